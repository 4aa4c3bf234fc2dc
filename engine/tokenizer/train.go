package tokenizer

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
)

// TrainPattern is the pre-tokenizer regex of trained tokenizers: Llama-3's split with
// one digit per pre-token (as Qwen2 has it), so that every number is spelled digit
// by digit, which the number-token rewards read.
const TrainPattern = qwen2Pattern

// Train learns a byte-level BPE tokenizer of vocabSize entries from texts: the
// specials (ids 0..len-1, never split or merged), the 256 byte characters, then one
// token per merge. Merges are learned the standard way, from pre-token counts with
// pair counts updated incrementally. The most frequent pair is merged first; among
// equal counts the pair whose ids (left, then right) are smallest, so the result
// depends on the texts only. Training stops early when no pair is left.
func Train(texts []string, vocabSize int, specials []string) (*Tokenizer, error) {
	if vocabSize < 256+len(specials) {
		return nil, fmt.Errorf("tokenizer: vocabulary size %d is below 256 bytes + %d specials", vocabSize, len(specials))
	}
	seen := map[string]bool{}
	var specialToks []*addedToken
	for i, s := range specials {
		if s == "" || seen[s] {
			return nil, fmt.Errorf("tokenizer: special token %q is empty or repeated", s)
		}
		seen[s] = true
		specialToks = append(specialToks, &addedToken{id: i, content: s, special: true})
	}
	counts := countWords(texts, newAddedMatcher(specialToks, nil))

	tr := newTrainer(specials)
	tr.load(counts)
	tr.run(vocabSize)
	return parse(tr.file(specials))
}

// countWords counts the pre-tokens of texts (raw bytes), specials split out first.
func countWords(texts []string, specials *addedMatcher) map[string]int {
	workers := min(runtime.GOMAXPROCS(0), max(1, len(texts)))
	parts := make([]map[string]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts := map[string]int{}
			var ms [][2]int
			count := func(s string) {
				ms = qwen2Scanner.split(s, ms[:0])
				for _, m := range ms {
					counts[s[m[0]:m[1]]]++
				}
			}
			for i := w; i < len(texts); i += workers {
				text, pos := texts[i], 0
				for _, m := range specials.find(text, nil) {
					count(text[pos:m.start])
					pos = m.end
				}
				count(text[pos:])
			}
			parts[w] = counts
		}()
	}
	wg.Wait()
	total := parts[0]
	for _, p := range parts[1:] {
		for k, v := range p {
			total[k] += v
		}
	}
	return total
}

// trainer holds the state of BPE training. Ids are final vocabulary ids.
type trainer struct {
	tokens []string       // id → token string (byte-level spelling)
	ids    map[string]int // token string → id
	merges [][2]int32

	words  [][]int32 // each distinct pre-token as symbol ids
	freq   []int64   // its count
	pairs  map[uint64]int64
	where  map[uint64][]int32 // words that may hold a pair (may repeat or be stale)
	heap   minHeap[pairCount]
	stamp  []int32 // per word: the last merge that visited it
	byteID [256]int32
}

func newTrainer(specials []string) *trainer {
	tr := &trainer{ids: map[string]int{}, pairs: map[uint64]int64{}, where: map[uint64][]int32{}}
	for _, s := range specials {
		tr.addToken(s)
	}
	// The byte characters in code point order (GPT-2's order: '!' first).
	order := make([]int, 256)
	for b := range order {
		order[b] = b
	}
	sort.Slice(order, func(i, j int) bool { return byteRunes[order[i]] < byteRunes[order[j]] })
	for _, b := range order {
		tr.byteID[b] = int32(tr.addToken(byteChar[b]))
	}
	return tr
}

func (tr *trainer) addToken(s string) int {
	if id, ok := tr.ids[s]; ok {
		return id
	}
	id := len(tr.tokens)
	tr.tokens = append(tr.tokens, s)
	tr.ids[s] = id
	return id
}

func (tr *trainer) load(counts map[string]int) {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tr.words = make([][]int32, len(keys))
	tr.freq = make([]int64, len(keys))
	tr.stamp = make([]int32, len(keys))
	for w, k := range keys {
		syms := make([]int32, len(k))
		for i := 0; i < len(k); i++ {
			syms[i] = tr.byteID[k[i]]
		}
		tr.words[w], tr.freq[w] = syms, int64(counts[k])
		for i := 0; i+1 < len(syms); i++ {
			p := pairKey(syms[i], syms[i+1])
			tr.pairs[p] += tr.freq[w]
			tr.where[p] = append(tr.where[p], int32(w))
		}
	}
	for p, c := range tr.pairs {
		tr.heap.push(pairCount{c, p})
	}
}

// run merges until the vocabulary has size entries or no pair is left.
func (tr *trainer) run(size int) {
	delta := map[uint64]int64{}
	for len(tr.tokens) < size && len(tr.heap) > 0 {
		top := tr.heap.pop()
		cur := tr.pairs[top.pair]
		if cur != top.count { // stale: its count fell since it was queued
			if cur > 0 {
				tr.heap.push(pairCount{cur, top.pair})
			}
			continue
		}
		if cur <= 0 {
			continue
		}
		a, b := int32(top.pair>>32), int32(uint32(top.pair))
		id := int32(tr.addToken(tr.tokens[a] + tr.tokens[b]))
		tr.merges = append(tr.merges, [2]int32{a, b})
		stamp := int32(len(tr.merges))
		clear(delta)
		for _, w := range tr.where[top.pair] {
			if tr.stamp[w] == stamp {
				continue
			}
			tr.stamp[w] = stamp
			tr.mergeWord(int(w), a, b, id, delta)
		}
		delete(tr.where, top.pair)
		for p, d := range delta {
			tr.pairs[p] += d
			if tr.pairs[p] <= 0 {
				delete(tr.pairs, p)
			}
			if d > 0 {
				tr.heap.push(pairCount{tr.pairs[p], p})
			}
		}
	}
}

// mergeWord replaces the pair (a,b) by id throughout word w, left to right, and
// records how pair counts change.
func (tr *trainer) mergeWord(w int, a, b, id int32, delta map[uint64]int64) {
	s, f := tr.words[w], tr.freq[w]
	j := 0
	for i := 0; i < len(s); {
		if i+1 < len(s) && s[i] == a && s[i+1] == b {
			delta[pairKey(a, b)] -= f
			if j > 0 {
				prev := s[j-1]
				delta[pairKey(prev, a)] -= f
				delta[pairKey(prev, id)] += f
				tr.where[pairKey(prev, id)] = append(tr.where[pairKey(prev, id)], int32(w))
			}
			if i+2 < len(s) {
				next := s[i+2]
				delta[pairKey(b, next)] -= f
				delta[pairKey(id, next)] += f
				tr.where[pairKey(id, next)] = append(tr.where[pairKey(id, next)], int32(w))
			}
			s[j] = id
			j++
			i += 2
			continue
		}
		s[j] = s[i]
		j++
		i++
	}
	tr.words[w] = s[:j]
}

// pairCount is a queued pair with the count it had when queued.
type pairCount struct {
	count int64
	pair  uint64
}

// before orders the queue: higher count first, then smaller (left, right) ids.
func (x pairCount) before(y pairCount) bool {
	if x.count != y.count {
		return x.count > y.count
	}
	return x.pair < y.pair
}
