package tokenizer

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpe is the BPE model of a tokenizer.json: a vocabulary and ranked merges. Its
// merge order is Hugging Face's exactly: the pair of lowest rank first, the leftmost
// among equal ranks.
type bpe struct {
	vocab  map[string]int
	tokens []string // id → token, "" where an id has none
	merges *pairTable

	byteLevel bool       // pieces are raw bytes to map to the byte-level alphabet
	byteIDs   [256]int32 // id of each byte's character, -1 when the vocabulary lacks it
	fallback  [256]int32 // id of each byte's "<0xNN>" token, -1 when the vocabulary lacks it

	unk          int // -1 without unk_token
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix

	mu    sync.RWMutex
	cache map[string][]symbolOut

	// A SentencePiece-style word is the whole text between special tokens. It is
	// merged in chunks cut before a '▁' that no merge can join to the character before
	// it: one no token of the vocabulary has right before a '▁' (joined). The chunks
	// evolve apart under Hugging Face's merge order, so the result is the same, and
	// repeated words come from the cache. Off (meta == "") for byte-level models and
	// where the merge of a whole word differs from its chunks' (subword affixes,
	// ignore_merges).
	meta   string
	joined map[string]bool
}

// chunkMin is the length from which a SentencePiece-style word is merged in chunks.
const chunkMin = 32

type mergeInfo struct{ rank, id int32 }

// symbolOut is one token of a merged word: its id and how many bytes of the piece
// it covers.
type symbolOut struct{ id, n int32 }

const (
	cacheMax      = 200_000 // entries; beyond it words are merged but not kept
	cacheMaxPiece = 256     // bytes; longer pieces are rare and not worth keeping
)

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// maxID bounds the ids of a tokenizer.json: tables are indexed by id, and the largest
// vocabularies in use are near 2^18 (Gemma's 262,144).
const maxID = 1<<22 - 1

func newBPE(vocab map[string]int, merges [][2]string, byteLevel bool) (*bpe, error) {
	m := &bpe{vocab: vocab, unk: -1, byteLevel: byteLevel, cache: map[string][]symbolOut{}}
	top := -1
	for tok, id := range vocab {
		if id < 0 || id > maxID {
			return nil, fmt.Errorf("vocab: %q has id %d, outside 0..%d", tok, id, maxID)
		}
		top = max(top, id)
	}
	m.tokens = make([]string, top+1)
	has := make([]bool, top+1)
	for tok, id := range vocab {
		if has[id] {
			a, b := m.tokens[id], tok
			if b < a {
				a, b = b, a
			}
			return nil, fmt.Errorf("vocab: %q and %q have the same id %d", a, b, id)
		}
		m.tokens[id], has[id] = tok, true
	}
	recs, err := resolveMerges(vocab, merges)
	if err != nil {
		return nil, err
	}
	m.merges = newPairTable(len(recs))
	for _, r := range recs {
		// A repeated merge keeps its last rank, as Hugging Face's map building does.
		m.merges.set(r.key, r.info)
	}
	for b := range 256 {
		m.byteIDs[b], m.fallback[b] = -1, -1
		if id, ok := vocab[byteChar[b]]; ok {
			m.byteIDs[b] = int32(id)
		}
		if id, ok := vocab[fallbackToken(byte(b))]; ok {
			m.fallback[b] = int32(id)
		}
	}
	return m, nil
}

type mergeRec struct {
	key  uint64
	info mergeInfo
}

// resolveMerges looks up the ids of each merge's parts and result. Gemma-3 has 514,906
// merges, three lookups each in a 262,144-entry map: the lookups run on all cores (the
// map is only read), which is most of the time a large tokenizer takes to load.
func resolveMerges(vocab map[string]int, merges [][2]string) ([]mergeRec, error) {
	recs := make([]mergeRec, len(merges))
	const chunk = 1 << 15
	nChunks := (len(merges) + chunk - 1) / chunk
	errs := make([]error, nChunks)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for c := range nChunks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			var buf []byte
			for rank := c * chunk; rank < min(len(merges), (c+1)*chunk); rank++ {
				mg := merges[rank]
				a, ok1 := vocab[mg[0]]
				b, ok2 := vocab[mg[1]]
				if !ok1 || !ok2 {
					errs[c] = fmt.Errorf("merges[%d] %q %q: a part is not in the vocabulary", rank, mg[0], mg[1])
					return
				}
				buf = append(append(buf[:0], mg[0]...), mg[1]...)
				id, ok := vocab[string(buf)] // no allocation: the conversion is only a map key
				if !ok {
					errs[c] = fmt.Errorf("merges[%d] %q %q: the merged token is not in the vocabulary", rank, mg[0], mg[1])
					return
				}
				recs[rank] = mergeRec{pairKey(int32(a), int32(b)), mergeInfo{int32(rank), int32(id)}}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err // the first bad merge
		}
	}
	return recs, nil
}

// fallbackToken is the vocabulary entry of a byte under byte_fallback: "<0x0A>".
func fallbackToken(b byte) string {
	const hex = "0123456789ABCDEF"
	return string([]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'})
}

// tokenize appends the tokens of one pre-token: raw bytes for a byte-level model,
// else text.
func (m *bpe) tokenize(word string, dst []symbolOut) []symbolOut {
	if word == "" {
		return dst
	}
	if m.meta != "" && len(word) >= chunkMin {
		return m.tokenizeChunks(word, dst)
	}
	return m.tokenizeCached(word, dst)
}

// tokenizeCached merges a word, or takes it from the cache.
func (m *bpe) tokenizeCached(word string, dst []symbolOut) []symbolOut {
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

// prepareChunks turns chunked merging on for a SentencePiece-style vocabulary.
func (m *bpe) prepareChunks() {
	const meta = "▁"
	if _, ok := m.vocab[meta]; !ok || m.byteLevel || m.ignoreMerges || m.prefix != "" || m.suffix != "" {
		return
	}
	m.meta, m.joined = meta, map[string]bool{}
	for tok := range m.vocab {
		for i := 1; i < len(tok); i++ {
			k := strings.Index(tok[i:], meta)
			if k < 0 {
				break
			}
			i += k
			_, n := utf8.DecodeLastRuneInString(tok[:i])
			m.joined[tok[i-n:i]] = true
		}
	}
}

// tokenizeChunks merges a long word in chunks cut before each '▁' whose preceding
// character is a token of its own (so it starts as itself, not as bytes or unk) that
// no token has before a '▁'.
func (m *bpe) tokenizeChunks(word string, dst []symbolOut) []symbolOut {
	start, prev := 0, 0 // the chunk's start, the previous character's
	for i := 0; i < len(word); {
		_, n := utf8.DecodeRuneInString(word[i:])
		if i > start && strings.HasPrefix(word[i:], m.meta) {
			if c := word[prev:i]; c != m.meta && !m.joined[c] {
				if _, ok := m.vocab[c]; ok {
					dst = m.tokenizeCached(word[start:i], dst)
					start = i
				}
			}
		}
		prev = i
		i += n
	}
	return m.tokenizeCached(word[start:], dst)
}

// symbol is a node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int32
	n          int32 // bytes of the word covered; dead (merged into its left neighbour) when < 0
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
		if s.n >= 0 {
			dst = append(dst, symbolOut{s.id, s.n})
		}
	}
	return dst
}

// initialSymbols splits a word into the symbols merging starts from, as Hugging Face's
// BPE::merge_word does: each character (each byte's character for a byte-level model)
// with the model's continuing_subword_prefix and end_of_word_suffix; a character the
// vocabulary lacks becomes its "<0xNN>" byte tokens under byte_fallback, else unk_token
// (one for a run of them with fuse_unk; a pending unk is only written when a known
// character follows, so byte tokens can come before it), else nothing.
func (m *bpe) initialSymbols(word string) []symbol {
	syms := make([]symbol, 0, len(word))
	add := func(id int32, n int) {
		k := int32(len(syms))
		syms = append(syms, symbol{id: id, prev: k - 1, next: k + 1, n: int32(n)})
	}
	unkN := -1 // bytes of the pending unk, -1 when none
	for i := 0; i < len(word); {
		var ch string
		n := 1
		id := int32(-1)
		if m.byteLevel {
			ch = byteChar[word[i]]
			id = m.byteIDs[word[i]]
		} else {
			_, n = utf8.DecodeRuneInString(word[i:])
			ch = word[i : i+n]
		}
		first, last := i == 0, i+n == len(word)
		i += n
		s := ch
		if !first && m.prefix != "" {
			s = m.prefix + s
		}
		if last && m.suffix != "" {
			s += m.suffix
		}
		if id < 0 || s != ch {
			if v, ok := m.vocab[s]; ok {
				id = int32(v)
			} else {
				id = -1
			}
		}
		if id >= 0 {
			if unkN >= 0 {
				add(int32(m.unk), unkN)
				unkN = -1
			}
			add(id, n)
			continue
		}
		if m.byteFallback && m.fallbackCovers(s) {
			// The prefix's and suffix's bytes are in s too; they cover no byte of the word.
			lead := len(s) - len(ch)
			if last {
				lead -= len(m.suffix)
			}
			for k := 0; k < len(s); k++ {
				add(m.fallback[s[k]], b2i(k >= lead && k < lead+len(ch)))
			}
			continue
		}
		switch {
		case m.unk < 0:
			add(-1, n) // dropped, as Hugging Face does; its bytes go to the next symbol
		case unkN >= 0 && m.fuseUnk:
			unkN += n
		default:
			if unkN >= 0 {
				add(int32(m.unk), unkN)
			}
			unkN = n
		}
	}
	if unkN >= 0 {
		add(int32(m.unk), unkN)
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	// Symbols without an id (characters dropped) take no part in merges; their bytes are
	// counted in the next symbol kept, for offsets.
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

// fallbackCovers reports whether every byte of s has a "<0xNN>" token.
func (m *bpe) fallbackCovers(s string) bool {
	for k := 0; k < len(s); k++ {
		if m.fallback[s[k]] < 0 {
			return false
		}
	}
	return true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
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
		if mi, ok := m.merges.get(pairKey(syms[i].id, syms[i+1].id)); ok {
			q.push(mergeCand{mi.rank, int32(i), mi.id})
		}
	}
	for len(q) > 0 {
		top := q.pop()
		cur := &syms[top.pos]
		if cur.n < 0 || cur.next < 0 {
			continue
		}
		right := syms[cur.next]
		if mi, ok := m.merges.get(pairKey(cur.id, right.id)); !ok || mi.id != top.id {
			continue
		}
		cur.id = top.id
		cur.n += right.n
		syms[cur.next].n = -1
		cur.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if mi, ok := m.merges.get(pairKey(syms[cur.prev].id, cur.id)); ok {
				q.push(mergeCand{mi.rank, cur.prev, mi.id})
			}
		}
		if cur.next >= 0 {
			if mi, ok := m.merges.get(pairKey(cur.id, syms[cur.next].id)); ok {
				q.push(mergeCand{mi.rank, top.pos, mi.id})
			}
		}
	}
}
