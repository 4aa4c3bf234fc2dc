package tokenizer

import (
	"fmt"
	"sync"
	"unicode/utf8"
)

// bpe is the BPE model of a tokenizer.json: a vocabulary and ranked merges. Its
// merge order is Hugging Face's exactly: the pair of lowest rank first, the leftmost
// among equal ranks.
type bpe struct {
	vocab  map[string]int
	tokens []string // id → token, "" where an id has none
	merges map[uint64]mergeInfo

	byteLevel bool       // pieces are raw bytes to map to the byte-level alphabet
	byteIDs   [256]int32 // id of each byte's character, -1 when the vocabulary lacks it

	unk          int // -1 without unk_token
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix

	mu    sync.RWMutex
	cache map[string][]symbolOut
}

type mergeInfo struct{ rank, id int32 }

// symbolOut is one token of a merged word: its id and how many bytes of the piece
// it covers.
type symbolOut struct{ id, n int32 }

const (
	cacheMax      = 200_000 // entries; beyond it words are merged but not kept
	cacheMaxPiece = 256     // bytes; longer pieces are rare and not worth keeping
)

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func newBPE(vocab map[string]int, merges [][2]string, byteLevel bool) (*bpe, error) {
	m := &bpe{vocab: vocab, unk: -1, byteLevel: byteLevel, cache: map[string][]symbolOut{}}
	maxID := -1
	for _, id := range vocab {
		if id < 0 {
			return nil, fmt.Errorf("model.vocab: negative id %d", id)
		}
		maxID = max(maxID, id)
	}
	m.tokens = make([]string, maxID+1)
	for tok, id := range vocab {
		m.tokens[id] = tok
	}
	m.merges = make(map[uint64]mergeInfo, len(merges))
	for rank, mg := range merges {
		a, ok1 := vocab[mg[0]]
		b, ok2 := vocab[mg[1]]
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("model.merges[%d] %q %q: a part is not in the vocabulary", rank, mg[0], mg[1])
		}
		id, ok := vocab[mg[0]+mg[1]]
		if !ok {
			return nil, fmt.Errorf("model.merges[%d] %q %q: the merged token is not in the vocabulary", rank, mg[0], mg[1])
		}
		// A repeated merge keeps its last rank, as Hugging Face's map building does.
		m.merges[pairKey(int32(a), int32(b))] = mergeInfo{int32(rank), int32(id)}
	}
	for b := range 256 {
		m.byteIDs[b] = -1
		if id, ok := vocab[byteChar[b]]; ok {
			m.byteIDs[b] = int32(id)
		}
	}
	return m, nil
}

// tokenize appends the tokens of one pre-token: raw bytes for a byte-level model,
// else text.
func (m *bpe) tokenize(word string, dst []symbolOut) []symbolOut {
	if word == "" {
		return dst
	}
	if len(word) <= cacheMaxPiece {
		m.mu.RLock()
		hit, ok := m.cache[word]
		m.mu.RUnlock()
		if ok {
			return append(dst, hit...)
		}
	}
	start := len(dst)
	dst = m.merge(word, dst)
	if len(word) <= cacheMaxPiece {
		m.mu.Lock()
		if len(m.cache) < cacheMax {
			m.cache[word] = append([]symbolOut(nil), dst[start:]...)
		}
		m.mu.Unlock()
	}
	return dst
}

// symbol is a node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int32
	n          int32 // bytes covered; 0 once merged into its left neighbour
}

func (m *bpe) merge(word string, dst []symbolOut) []symbolOut {
	if m.ignoreMerges {
		key := word
		if m.byteLevel {
			key = byteLevelString([]byte(word))
		}
		if id, ok := m.vocab[key]; ok {
			return append(dst, symbolOut{int32(id), int32(len(word))})
		}
	}
	syms := m.initialSymbols(word)
	if len(syms) > 1 {
		m.mergeAll(syms)
	}
	for _, s := range syms {
		if s.n > 0 && s.id >= 0 {
			dst = append(dst, symbolOut{s.id, s.n})
		}
	}
	return dst
}

// initialSymbols splits a word into the symbols merging starts from: bytes for a
// byte-level model, characters otherwise (with unk, byte fallback and the
// subword prefix and suffix of the model).
func (m *bpe) initialSymbols(word string) []symbol {
	var syms []symbol
	add := func(id int32, n int) {
		k := int32(len(syms))
		syms = append(syms, symbol{id: id, prev: k - 1, next: k + 1, n: int32(n)})
	}
	if m.byteLevel {
		syms = make([]symbol, 0, len(word))
		for i := 0; i < len(word); i++ {
			id := m.byteIDs[word[i]]
			if id < 0 {
				id = int32(m.unk) // -1 without unk: the byte is dropped, as Hugging Face does
			}
			add(id, 1)
		}
	} else {
		lastUnk := false
		for i := 0; i < len(word); {
			_, n := utf8.DecodeRuneInString(word[i:])
			s := word[i : i+n]
			i0 := i
			i += n
			if i0 > 0 {
				s = m.prefix + s
			}
			if i == len(word) {
				s += m.suffix
			}
			if id, ok := m.vocab[s]; ok {
				add(int32(id), n)
				lastUnk = false
				continue
			}
			if m.byteFallback {
				ids := make([]int32, 0, n)
				for k := 0; k < n; k++ {
					if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", word[i0+k])]; ok {
						ids = append(ids, int32(id))
					}
				}
				if len(ids) == n {
					for _, id := range ids {
						add(id, 1)
					}
					lastUnk = false
					continue
				}
			}
			if m.unk < 0 {
				continue
			}
			if m.fuseUnk && lastUnk {
				syms[len(syms)-1].n += int32(n)
				continue
			}
			add(int32(m.unk), n)
			lastUnk = true
		}
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	// Symbols without an id (bytes the vocabulary lacks, with no unk) take no part
	// in merges; their bytes are counted in the next symbol kept, for offsets.
	k, carry := 0, int32(0)
	for _, s := range syms {
		if s.id < 0 {
			carry += s.n
			continue
		}
		s.n += carry
		carry = 0
		syms[k] = s
		k++
	}
	if carry > 0 && k > 0 {
		syms[k-1].n += carry
	}
	if k != len(syms) {
		syms = syms[:k]
		for i := range syms {
			syms[i].prev, syms[i].next = int32(i-1), int32(i+1)
		}
		if k > 0 {
			syms[k-1].next = -1
		}
	}
	return syms
}

// mergeCand is a queued merge: the pair starting at symbol pos.
type mergeCand struct {
	rank, pos, id int32
}

// before orders the queue: the lowest rank first, then the leftmost position.
func (a mergeCand) before(b mergeCand) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

// mergeAll applies merges by a priority queue of (rank, position), skipping
// entries made stale by earlier merges: Hugging Face's Word::merge_all.
func (m *bpe) mergeAll(syms []symbol) {
	var q minHeap[mergeCand]
	for i := 0; i+1 < len(syms); i++ {
		if mi, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			q.push(mergeCand{mi.rank, int32(i), mi.id})
		}
	}
	for len(q) > 0 {
		top := q.pop()
		cur := &syms[top.pos]
		if cur.n == 0 || cur.next < 0 {
			continue
		}
		right := syms[cur.next]
		if mi, ok := m.merges[pairKey(cur.id, right.id)]; !ok || mi.id != top.id {
			continue
		}
		cur.id = top.id
		cur.n += right.n
		syms[cur.next].n = 0
		cur.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if mi, ok := m.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				q.push(mergeCand{mi.rank, cur.prev, mi.id})
			}
		}
		if cur.next >= 0 {
			if mi, ok := m.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				q.push(mergeCand{mi.rank, top.pos, mi.id})
			}
		}
	}
}
