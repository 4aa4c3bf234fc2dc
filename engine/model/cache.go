package model

// Cache holds the keys and values of a batch of sequences, so that decoding a token costs
// one row of work instead of the whole prefix.
type Cache struct {
	Batch, Capacity int
	Len             []int // tokens held per sequence

	kvDim int
	k, v  [][]float32 // per block: [Batch][Capacity][KVDim]
}

// NewCache makes a cache for batch sequences of up to capacity tokens each (clamped to the
// model's context).
func (m *Model) NewCache(batch, capacity int) *Cache {
	capacity = min(capacity, m.Config.MaxPos)
	c := &Cache{Batch: batch, Capacity: capacity, Len: make([]int, batch), kvDim: m.Config.KVDim()}
	per := batch * capacity * c.kvDim
	buf := make([]float32, 2*len(m.Layers)*per)
	for l := range m.Layers {
		c.k = append(c.k, buf[2*l*per:(2*l+1)*per])
		c.v = append(c.v, buf[(2*l+1)*per:(2*l+2)*per])
	}
	return c
}

// Reset empties every sequence.
func (c *Cache) Reset() { clear(c.Len) }

// slot returns the key and value storage of sequence s in block l.
func (c *Cache) slot(l, s int) (k, v []float32) {
	n := c.Capacity * c.kvDim
	return c.k[l][s*n : (s+1)*n], c.v[l][s*n : (s+1)*n]
}
