package model

import (
	"fmt"

	"rlhfstation/engine/backend"
)

// Cache holds the keys and values of a batch of sequences on the model's backend, so that
// decoding a token costs one row of work instead of the whole prefix.
type Cache struct {
	Batch, Capacity int
	Len             []int // tokens held per sequence

	ids [][]int // per sequence: the tokens GenerateOn left in it (nil: unknown)

	kvDim  int
	layers int
	on     backend.Backend
	k, v   []backend.Buf // per block: [Batch][Capacity][KVDim], the Act precision
}

// NewCache makes a cache for batch sequences of up to capacity tokens each (clamped to the
// model's context); its memory is allocated by the first Forward.
func (m *Model) NewCache(batch, capacity int) *Cache {
	capacity = min(capacity, m.Config.Context())
	return &Cache{Batch: batch, Capacity: capacity, Len: make([]int, batch), kvDim: m.Config.KVDim(), layers: len(m.Layers)}
}

// Reset empties every sequence.
func (c *Cache) Reset() {
	clear(c.Len)
	clear(c.ids)
}

// Free releases the cache's memory (a later Forward allocates it again).
func (c *Cache) Free() {
	for i := range c.k {
		c.on.Free(c.k[i])
		c.on.Free(c.v[i])
	}
	c.k, c.v, c.on = nil, nil, nil
	clear(c.ids) // the keys and values are gone
}

// alloc places the cache on b, once.
func (c *Cache) alloc(b backend.Backend) error {
	if c.on == b {
		return nil
	}
	if c.on != nil {
		return fmt.Errorf("the cache belongs to another backend")
	}
	n := c.Batch * c.Capacity * c.kvDim
	dt := b.Precision().Act
	for l := 0; l < c.layers; l++ {
		k, err := b.Alloc(dt, n)
		if err != nil {
			c.Free()
			return fmt.Errorf("key/value cache: %w", err)
		}
		c.on, c.k = b, append(c.k, k)
		v, err := b.Alloc(dt, n)
		if err != nil {
			c.Free()
			return fmt.Errorf("key/value cache: %w", err)
		}
		c.v = append(c.v, v)
	}
	c.on = b
	return nil
}

// slot returns the key and value storage of sequence s in block l.
func (c *Cache) slot(l, s int) (k, v backend.Buf) {
	n := c.Capacity * c.kvDim
	return c.k[l].Slice(s*n, n), c.v[l].Slice(s*n, n)
}
