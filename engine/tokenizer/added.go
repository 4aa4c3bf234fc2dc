package tokenizer

import (
	"sort"
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
// boundaries; lstrip/rstrip take the whitespace beside a match into it.
type addedMatcher struct {
	byFirst map[byte][]*matchable // candidates by first byte, longest first
}

type matchable struct {
	pattern string // the content, normalized for normalized tokens
	tok     *addedToken
}

func newAddedMatcher(toks []*addedToken, norm func(string) string) *addedMatcher {
	m := &addedMatcher{byFirst: map[byte][]*matchable{}}
	for _, t := range toks {
		p := t.content
		if norm != nil {
			p = norm(p)
		}
		if p == "" {
			continue
		}
		m.byFirst[p[0]] = append(m.byFirst[p[0]], &matchable{p, t})
	}
	for _, list := range m.byFirst {
		sort.SliceStable(list, func(i, j int) bool { return len(list[i].pattern) > len(list[j].pattern) })
	}
	return m
}

// tokenSpan is an added token found at [start,end) of a text.
type tokenSpan struct {
	start, end int
	tok        *addedToken
}

func (m *addedMatcher) find(s string, dst []tokenSpan) []tokenSpan {
	if m == nil || len(m.byFirst) == 0 {
		return dst
	}
	done := 0 // end of the last span taken
	for i := 0; i < len(s); {
		var hit *matchable
		for _, c := range m.byFirst[s[i]] {
			if len(c.pattern) <= len(s)-i && s[i:i+len(c.pattern)] == c.pattern {
				hit = c
				break
			}
		}
		if hit == nil {
			i++
			continue
		}
		start, stop := i, i+len(hit.pattern)
		t := hit.tok
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
