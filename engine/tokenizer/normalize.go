package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// alignment maps each byte of a normalized string to the [lo,hi) byte range of the
// string it was made from. A nil alignment is the identity.
type alignment [][2]int32

// span maps the normalized byte range [a,b) back to the source.
func (al alignment) span(a, b int) (int, int) {
	if al == nil {
		return a, b
	}
	if a >= len(al) { // an empty range at the end
		if len(al) == 0 {
			return 0, 0
		}
		e := int(al[len(al)-1][1])
		return e, e
	}
	if b <= a {
		s := int(al[a][0])
		return s, s
	}
	return int(al[a][0]), int(al[b-1][1])
}

// compose gives the alignment of a step applied after al.
func (al alignment) compose(next alignment, n int) alignment {
	switch {
	case next == nil:
		return al
	case al == nil:
		return next
	}
	out := make(alignment, len(next))
	for i, r := range next {
		lo, hi := al.span(int(r[0]), int(r[1]))
		out[i] = [2]int32{int32(lo), int32(hi)}
	}
	return out
}

// normalizer is one of Hugging Face's normalizers; it reports where each output
// byte came from so that offsets can be given in the caller's text.
type normalizer interface {
	normalize(s string) (string, alignment)
}

type sequenceNorm []normalizer

func (q sequenceNorm) normalize(s string) (string, alignment) {
	var al alignment
	for _, n := range q {
		var next alignment
		s, next = n.normalize(s)
		al = al.compose(next, len(s))
	}
	return s, al
}

// unicodeNorm is NFC, NFD, NFKC or NFKD. Output is aligned per normalization
// segment (a starter and its combining marks).
type unicodeNorm struct{ form norm.Form }

func (u unicodeNorm) normalize(s string) (string, alignment) {
	if u.form.IsNormalString(s) {
		return s, nil
	}
	var it norm.Iter
	it.InitString(u.form, s)
	out := make([]byte, 0, len(s)+8)
	al := make(alignment, 0, len(s)+8)
	for !it.Done() {
		lo := it.Pos()
		seg := it.Next()
		hi := it.Pos()
		out = append(out, seg...)
		for range seg {
			al = append(al, [2]int32{int32(lo), int32(hi)})
		}
	}
	return string(out), al
}

// lowercaseNorm lowercases each character on its own (Rust's char::to_lowercase).
type lowercaseNorm struct{}

func (lowercaseNorm) normalize(s string) (string, alignment) {
	return mapRunes(s, func(r rune) string {
		if r == 'İ' { // the one character whose lowercase is two
			return "i\u0307"
		}
		return string(unicode.ToLower(r))
	})
}

// mapRunes replaces every character of s by f's string, aligned per character.
func mapRunes(s string, f func(rune) string) (string, alignment) {
	var b strings.Builder
	al := make(alignment, 0, len(s))
	same := true
	for i, r := range s {
		n := utf8.RuneLen(r)
		if r == utf8.RuneError {
			_, n = utf8.DecodeRuneInString(s[i:])
		}
		rep := f(r)
		if r == utf8.RuneError && n == 1 {
			rep = s[i : i+1]
		}
		if rep != s[i:i+n] {
			same = false
		}
		b.WriteString(rep)
		for range len(rep) {
			al = append(al, [2]int32{int32(i), int32(i + n)})
		}
	}
	if same {
		return s, nil
	}
	return b.String(), al
}

// stripNorm removes leading and/or trailing whitespace.
type stripNorm struct{ left, right bool }

func (n stripNorm) normalize(s string) (string, alignment) {
	a, b := 0, len(s)
	if n.left {
		a = len(s) - len(strings.TrimLeftFunc(s, unicode.IsSpace))
	}
	if n.right {
		b = len(strings.TrimRightFunc(s[:b], unicode.IsSpace))
	}
	if b < a {
		b = a
	}
	if a == 0 && b == len(s) {
		return s, nil
	}
	al := make(alignment, b-a)
	for i := range al {
		al[i] = [2]int32{int32(a + i), int32(a + i + 1)}
	}
	return s[a:b], al
}

// prependNorm puts a fixed string before a non-empty text.
type prependNorm string

func (p prependNorm) normalize(s string) (string, alignment) {
	if s == "" || p == "" {
		return s, nil
	}
	al := make(alignment, len(p)+len(s))
	for i := range len(p) {
		al[i] = [2]int32{0, 0}
	}
	for i := range len(s) {
		al[len(p)+i] = [2]int32{int32(i), int32(i + 1)}
	}
	return string(p) + s, al
}

// replaceNorm replaces every match of a pattern; the bytes put in come from the match.
type replaceNorm struct {
	m       matcher
	content string
}

func (r replaceNorm) normalize(s string) (string, alignment) {
	if l, ok := r.m.(literalMatcher); ok && l != "" && !strings.Contains(s, string(l)) {
		return s, nil
	}
	ms := r.m.matches(s, nil)
	if len(ms) == 0 {
		return s, nil
	}
	var b strings.Builder
	al := make(alignment, 0, len(s)+len(ms)*len(r.content))
	prev := 0
	for _, m := range ms {
		b.WriteString(s[prev:m[0]])
		for i := prev; i < m[0]; i++ {
			al = append(al, [2]int32{int32(i), int32(i + 1)})
		}
		b.WriteString(r.content)
		for range len(r.content) {
			al = append(al, [2]int32{int32(m[0]), int32(m[1])})
		}
		prev = m[1]
	}
	b.WriteString(s[prev:])
	for i := prev; i < len(s); i++ {
		al = append(al, [2]int32{int32(i), int32(i + 1)})
	}
	return b.String(), al
}
