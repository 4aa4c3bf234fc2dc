package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         int
	content    string
	special    bool
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
}

// addedMatcher finds added tokens in a text, as Hugging Face's AddedVocabulary does:
// leftmost-longest matches, not overlapping; single_word tokens only between word
// boundaries; lstrip/rstrip take the whitespace beside a match into it. The patterns
// are a byte trie (Gemma-3 has 6,415 added tokens, 6,322 of them starting with '<').
type addedMatcher struct {
	root  [256]int32       // first byte → node, 0 where none
	next  map[uint64]int32 // node<<8 | byte → node
	token []*addedToken    // by node: the token whose pattern ends there, or nil
	empty bool             // no patterns
}

func newAddedMatcher(toks []*addedToken, norm func(string) string) *addedMatcher {
	m := &addedMatcher{next: map[uint64]int32{}, token: []*addedToken{nil}, empty: true}
	for _, t := range toks {
		p := t.content
		if norm != nil {
			p = norm(p)
		}
		if p == "" {
			continue
		}
		m.empty = false
		node := &m.root[p[0]]
		if *node == 0 {
			*node = m.newNode()
		}
		at := *node
		for i := 1; i < len(p); i++ {
			key := uint64(at)<<8 | uint64(p[i])
			n, ok := m.next[key]
			if !ok {
				n = m.newNode()
				m.next[key] = n
			}
			at = n
		}
		if m.token[at] == nil || t.id < m.token[at].id { // two tokens, one pattern: the first by id
			m.token[at] = t
		}
	}
	return m
}

func (m *addedMatcher) newNode() int32 {
	m.token = append(m.token, nil)
	return int32(len(m.token) - 1)
}

// longest returns the longest pattern that starts s, and its length.
func (m *addedMatcher) longest(s string) (*addedToken, int) {
	at := m.root[s[0]]
	if at == 0 {
		return nil, 0
	}
	best, n := m.token[at], 1
	for i := 1; i < len(s); i++ {
		next, ok := m.next[uint64(at)<<8|uint64(s[i])]
		if !ok {
			break
		}
		at = next
		if m.token[at] != nil {
			best, n = m.token[at], i+1
		}
	}
	if best == nil {
		return nil, 0
	}
	return best, n
}

// tokenSpan is an added token found at [start,end) of a text.
type tokenSpan struct {
	start, end int
	tok        *addedToken
}

func (m *addedMatcher) find(s string, dst []tokenSpan) []tokenSpan {
	if m == nil || m.empty {
		return dst
	}
	done := 0 // end of the last span taken
	for i := 0; i < len(s); {
		if m.root[s[i]] == 0 {
			i++
			continue
		}
		t, n := m.longest(s[i:])
		if t == nil {
			i++
			continue
		}
		start, stop := i, i+n
		i = stop // a rejected match is passed over whole, as Aho-Corasick's iterator does
		if t.singleWord && (endsWithWordChar(s[:start]) || startsWithWordChar(s[stop:])) {
			continue
		}
		if t.lstrip {
			start = max(len(trimRightSpace(s[:start])), done)
		}
		if t.rstrip {
			stop += len(s[stop:]) - len(trimLeftSpace(s[stop:]))
		}
		dst = append(dst, tokenSpan{start, stop, t})
		done = stop
		i = max(i, stop)
	}
	return dst
}

// isWordChar is Rust's char::is_alphanumeric or '_'.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || r == '_'
}

func endsWithWordChar(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

func trimRightSpace(s string) string {
	for len(s) > 0 {
		r, n := utf8.DecodeLastRuneInString(s)
		if !unicode.IsSpace(r) {
			break
		}
		s = s[:len(s)-n]
	}
	return s
}

func trimLeftSpace(s string) string {
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if !unicode.IsSpace(r) {
			break
		}
		s = s[n:]
	}
	return s
}
