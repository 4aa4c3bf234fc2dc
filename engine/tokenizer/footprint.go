package tokenizer

import "math/bits"

// Footprint is about how many bytes the tokenizer holds once loaded and used to decode, for
// the memory estimate (engine/memory): the file's text (kept to save it as it came), the
// vocabulary (its JSON text, which the keys share, its map and the id → token table), the
// merge table, the added tokens, and the id → bytes table decoding builds. The sizes follow
// Go's layouts (a map slot is its key, value and a control byte, in a power-of-two table);
// TestFootprintMatchesHeap holds the sum against the heap a loaded tokenizer takes. Not counted:
// the cache of merged words, which grows with the text encoded (at most cacheMax words).
func (t *Tokenizer) Footprint() int64 {
	n := int64(len(t.model.tokens))
	var text int64
	for _, s := range t.model.tokens {
		text += int64(len(s))
	}
	const (
		stringHeader = 16
		sliceHeader  = 24
		vocabEntry   = 10 // a vocabulary entry's JSON besides its token: quotes, colon, id, comma
	)
	b := int64(len(t.raw))
	b += text + vocabEntry*n                          // the vocabulary's JSON text
	b += mapBytes(len(t.model.vocab), stringHeader+8) // the vocabulary's map
	b += stringHeader * n                             // id → token
	b += 16 * int64(len(t.model.merges.keys))         // the merge table: keys and values
	b += mapBytes(len(t.model.joined), stringHeader+1)
	var added int64 // the added tokens' text, a matcher node for each of its bytes
	for _, a := range t.added {
		added += int64(len(a.content))
	}
	b += (32+8)*int64(len(t.added)) + added // the tokens and the list of them
	b += mapBytes(len(t.added), 8+8) + mapBytes(len(t.added), stringHeader+8)
	b += mapBytes(int(added), 8+4) + 8*added // the matchers' nodes and their tokens
	b += (sliceHeader+8)*n + text            // id → bytes, each token's bytes a small allocation
	return b
}

// mapBytes is the size of a Go map of n entries of slot bytes each, made with a size hint: slots
// for n at the most 7/8 full, a power of two, each with a control byte.
func mapBytes(n int, slot int64) int64 {
	if n == 0 {
		return 0
	}
	slots := int64(1) << bits.Len64(uint64(n*8/7))
	return slots * (slot + 1)
}
