package tokenizer

// minHeap is a binary heap whose top is the element before all others: the next merge to
// apply (bpe.go) or the most frequent pair to learn (train.go).
type minHeap[T interface{ before(T) bool }] []T

func (h *minHeap[T]) push(x T) {
	*h = append(*h, x)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a[i].before(a[p]) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *minHeap[T]) pop() T {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		l, r, s := 2*i+1, 2*i+2, i
		if l < len(a) && a[l].before(a[s]) {
			s = l
		}
		if r < len(a) && a[r].before(a[s]) {
			s = r
		}
		if s == i {
			break
		}
		a[i], a[s] = a[s], a[i]
		i = s
	}
	*h = a
	return top
}

// pairTable maps a pair of token ids (pairKey) to its merge: open addressing with
// linear probing, sized once. It is faster than a Go map both to fill (half a million
// merges at load) and to probe (every step of every merge).
type pairTable struct {
	keys  []uint64 // emptyKey where free
	vals  []mergeInfo
	shift uint
}

const emptyKey = ^uint64(0) // pairKey(-1, -1): no id is negative

func newPairTable(n int) *pairTable {
	size, shift := 8, uint(61)
	for size < 2*n {
		size, shift = size*2, shift-1
	}
	t := &pairTable{keys: make([]uint64, size), vals: make([]mergeInfo, size), shift: shift}
	for i := range t.keys {
		t.keys[i] = emptyKey
	}
	return t
}

func (t *pairTable) slot(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> t.shift }

func (t *pairTable) get(key uint64) (mergeInfo, bool) {
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(key); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case key:
			return t.vals[i], true
		case emptyKey:
			return mergeInfo{}, false
		}
	}
}

// set adds or replaces key's merge; the table must have room (newPairTable's n).
func (t *pairTable) set(key uint64, v mergeInfo) {
	mask := uint64(len(t.keys) - 1)
	i := t.slot(key)
	for t.keys[i] != key && t.keys[i] != emptyKey {
		i = (i + 1) & mask
	}
	t.keys[i], t.vals[i] = key, v
}
