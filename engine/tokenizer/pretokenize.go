package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
)

// piece is a pre-token: the bytes [start,end) of the text being encoded, or, when a
// pre-tokenizer changed them (a space made '▁', a prefix added), its own text.
type piece struct {
	start, end int
	t          *pieceText // nil: the piece is s[start:end]
}

// pieceText is the text of a changed piece; al[i] is the range of s that byte i of
// text came from (empty for bytes added, such as a prefix).
type pieceText struct {
	text string
	al   alignment
}

// preCtx is what a pre-tokenizer sees besides the pieces.
type preCtx struct {
	s string
	// origin maps a byte offset of s to the offset in the caller's text it came from
	// (Metaspace's prepend_scheme "first" looks for pieces at offset 0).
	origin func(i int) int
}

func (c *preCtx) text(p piece) string {
	if p.t != nil {
		return p.t.text
	}
	return c.s[p.start:p.end]
}

// sub is the piece made of bytes [a,b) of p's text.
func (c *preCtx) sub(p piece, a, b int) piece {
	if p.t == nil {
		return piece{p.start + a, p.start + b, nil}
	}
	lo, hi := p.t.al.span(a, b)
	if text := p.t.text[a:b]; hi-lo == b-a && c.s[lo:hi] == text {
		return piece{lo, hi, nil} // back to bytes of s as they are
	}
	return piece{lo, hi, &pieceText{p.t.text[a:b], p.t.al[a:b]}}
}

// preTokenizer refines pieces into smaller ones, as one step of a Hugging Face
// pre_tokenizer does.
type preTokenizer interface {
	preTokenize(c *preCtx, in []piece) []piece
}

// matcher finds the matches of a pattern in s, as [start,end) pairs in order.
type matcher interface {
	matches(s string, dst [][2]int) [][2]int
}

// behavior says what a Split does with the matches (Hugging Face's
// SplitDelimiterBehavior).
type behavior int

const (
	behaviorRemoved behavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

var behaviorNames = map[string]behavior{
	"Removed":            behaviorRemoved,
	"Isolated":           behaviorIsolated,
	"MergedWithPrevious": behaviorMergedWithPrevious,
	"MergedWithNext":     behaviorMergedWithNext,
	"Contiguous":         behaviorContiguous,
}

// splitPre is the Split pre-tokenizer, and the regex step of ByteLevel.
type splitPre struct {
	m        matcher
	behavior behavior
	invert   bool
}

// byteLevelPre is the ByteLevel pre-tokenizer: an optional leading space per piece,
// then (with use_regex) GPT-2's split. Mapping bytes to the byte-level alphabet is
// done by the model, which sees raw bytes.
type byteLevelPre struct {
	addPrefixSpace bool
	split          *splitPre // nil without use_regex
}

type sequencePre []preTokenizer

func (q sequencePre) preTokenize(c *preCtx, in []piece) []piece {
	for _, p := range q {
		in = p.preTokenize(c, in)
	}
	return in
}

func (b *byteLevelPre) preTokenize(c *preCtx, in []piece) []piece {
	if b.addPrefixSpace {
		for i, p := range in {
			if text := c.text(p); !strings.HasPrefix(text, " ") {
				in[i].t = prefixed(p, " ", text)
			}
		}
	}
	if b.split != nil {
		return b.split.preTokenize(c, in)
	}
	return in
}

// prefixed is the text of p (given) led by prefix, which comes from no byte of s.
func prefixed(p piece, prefix, text string) *pieceText {
	al := make(alignment, 0, len(prefix)+len(text))
	for range len(prefix) {
		al = append(al, [2]int32{int32(p.start), int32(p.start)})
	}
	if p.t != nil {
		al = append(al, p.t.al...)
	} else {
		for i := p.start; i < p.end; i++ {
			al = append(al, [2]int32{int32(i), int32(i + 1)})
		}
	}
	return &pieceText{prefix + text, al}
}

func (p *splitPre) preTokenize(c *preCtx, in []piece) []piece {
	out := make([]piece, 0, len(in)+len(c.s)/4)
	var ms [][2]int
	var parts []part
	for _, pc := range in {
		text := c.text(pc)
		ms = p.m.matches(text, ms[:0])
		parts = splitParts(len(text), ms, p.behavior, p.invert, parts[:0])
		for _, r := range parts {
			out = append(out, c.sub(pc, r.start, r.end))
		}
	}
	return out
}

// metaspacePre is the Metaspace pre-tokenizer: spaces become the replacement
// character, which leads each piece (prepend "always"), only the piece at the start
// of the text ("first"), or none ("never"); with split, pieces are then cut before
// each replacement character.
type metaspacePre struct {
	repl    string
	prepend prependScheme
	split   bool
}

type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

var prependSchemes = map[string]prependScheme{"always": prependAlways, "first": prependFirst, "never": prependNever}

func (m *metaspacePre) preTokenize(c *preCtx, in []piece) []piece {
	out := make([]piece, 0, len(in))
	var ms [][2]int
	var parts []part
	for _, pc := range in {
		text := c.text(pc)
		if strings.IndexByte(text, ' ') >= 0 {
			pc.t = replaceSpaces(c, pc, text, m.repl)
			text = pc.t.text
		}
		if !strings.HasPrefix(text, m.repl) &&
			(m.prepend == prependAlways || m.prepend == prependFirst && c.origin(pc.start) == 0) {
			pc.t = prefixed(pc, m.repl, text)
			text = pc.t.text
		}
		if !m.split {
			out = append(out, pc)
			continue
		}
		ms = literalMatcher(m.repl).matches(text, ms[:0])
		parts = splitParts(len(text), ms, behaviorMergedWithNext, false, parts[:0])
		for _, r := range parts {
			out = append(out, c.sub(pc, r.start, r.end))
		}
	}
	return out
}

// replaceSpaces is the text of p with each ' ' replaced by repl.
func replaceSpaces(c *preCtx, p piece, text, repl string) *pieceText {
	var b strings.Builder
	al := make(alignment, 0, len(text)+2*strings.Count(text, " "))
	for i := 0; i < len(text); i++ {
		var src [2]int32
		if p.t != nil {
			src = p.t.al[i]
		} else {
			src = [2]int32{int32(p.start + i), int32(p.start + i + 1)}
		}
		if text[i] == ' ' {
			b.WriteString(repl)
			for range len(repl) {
				al = append(al, src)
			}
			continue
		}
		b.WriteByte(text[i])
		al = append(al, src)
	}
	return &pieceText{b.String(), al}
}

type part struct{ start, end int }

// splitParts cuts [0,n) at the matches by Hugging Face's rules for a Split
// behavior; empty parts are dropped.
func splitParts(n int, ms [][2]int, b behavior, invert bool, dst []part) []part {
	type seg struct {
		start, end int
		match      bool
	}
	if n == 0 {
		return dst
	}
	if b == behaviorIsolated && !invert { // the common case: gaps and matches in turn
		prev := 0
		for _, m := range ms {
			if m[0] > prev {
				dst = append(dst, part{prev, m[0]})
			}
			if m[1] > m[0] {
				dst = append(dst, part{m[0], m[1]})
			}
			prev = m[1]
		}
		if prev < n {
			dst = append(dst, part{prev, n})
		}
		return dst
	}
	var segs []seg
	prev := 0
	for _, m := range ms {
		if m[0] > prev {
			segs = append(segs, seg{prev, m[0], false})
		}
		segs = append(segs, seg{m[0], m[1], true})
		prev = m[1]
	}
	if prev < n {
		segs = append(segs, seg{prev, n, false})
	}
	if invert {
		for i := range segs {
			segs[i].match = !segs[i].match
		}
	}
	var res []seg
	switch b {
	case behaviorIsolated:
		res = segs
	case behaviorRemoved:
		for _, g := range segs {
			if !g.match {
				res = append(res, g)
			}
		}
	case behaviorMergedWithPrevious:
		prevMatch := false
		for _, g := range segs {
			if g.match && !prevMatch && len(res) > 0 {
				res[len(res)-1].end = g.end
			} else {
				res = append(res, g)
			}
			prevMatch = g.match
		}
	case behaviorMergedWithNext:
		prevMatch := false
		for i := len(segs) - 1; i >= 0; i-- {
			g := segs[i]
			if g.match && !prevMatch && len(res) > 0 {
				res[len(res)-1].start = g.start
			} else {
				res = append(res, g)
			}
			prevMatch = g.match
		}
		for i, j := 0, len(res)-1; i < j; i, j = i+1, j-1 {
			res[i], res[j] = res[j], res[i]
		}
	case behaviorContiguous:
		prevMatch := false
		for _, g := range segs {
			if g.match == prevMatch && len(res) > 0 {
				res[len(res)-1].end = g.end
			} else {
				res = append(res, g)
			}
			prevMatch = g.match
		}
	}
	for _, g := range res {
		if g.end > g.start {
			dst = append(dst, part{g.start, g.end})
		}
	}
	return dst
}

// matches of a scanner cover the text: each one is a pre-token.
func (sc *scanner) matches(s string, dst [][2]int) [][2]int { return sc.split(s, dst) }

// regexMatcher is Go's regexp, for patterns that need no look-around.
type regexMatcher struct{ re *regexp.Regexp }

func (r regexMatcher) matches(s string, dst [][2]int) [][2]int {
	if s == "" { // nothing matches in an empty text, as in Hugging Face's find_matches
		return dst
	}
	for _, m := range r.re.FindAllStringIndex(s, -1) {
		dst = append(dst, [2]int{m[0], m[1]})
	}
	return dst
}

// literalMatcher matches a fixed string (a String pattern). The empty string matches
// at every character boundary of a non-empty text, as the empty regex Hugging Face
// makes of it does.
type literalMatcher string

func (l literalMatcher) matches(s string, dst [][2]int) [][2]int {
	if s == "" {
		return dst
	}
	if l == "" {
		for i := range s {
			dst = append(dst, [2]int{i, i})
		}
		return append(dst, [2]int{len(s), len(s)})
	}
	for off := 0; ; {
		k := strings.Index(s[off:], string(l))
		if k < 0 {
			return dst
		}
		dst = append(dst, [2]int{off + k, off + k + len(l)})
		off += k + len(l)
	}
}

// digitMatcher matches each ASCII digit (Hugging Face's Digits pre-tokenizer).
type digitMatcher struct{}

func (digitMatcher) matches(s string, dst [][2]int) [][2]int {
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			dst = append(dst, [2]int{i, i + 1})
		}
	}
	return dst
}

// compilePattern returns the matcher of a Split regex: a hand-written scanner for the
// known byte-level patterns, else Go's regexp with the Unicode meaning of \s \d \w
// restored (Oniguruma's), else an error: look-around has no Go equivalent.
func compilePattern(pattern string) (matcher, error) {
	if sc := knownScanner(pattern); sc != nil {
		return sc, nil
	}
	translated, err := translateRegex(pattern)
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile(translated)
	if err != nil {
		return nil, fmt.Errorf("pre-tokenizer regex %q is not supported (Go's regexp: %v)", pattern, err)
	}
	return regexMatcher{re}, nil
}

// Oniguruma's Unicode classes, spelled for Go's regexp (whose \s \d \w are ASCII).
const (
	uniSpace = `\t\n\v\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}`
	uniDigit = `\p{Nd}`
	uniWord  = `\p{L}\p{M}\p{Nd}\p{Pc}`
)

// translateRegex rewrites \s \S \d \D \w \W to their Unicode meaning.
func translateRegex(p string) (string, error) {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '\\' && i+1 < len(p) {
			e := p[i+1]
			i++
			var set string
			switch e {
			case 's', 'S':
				set = uniSpace
			case 'd', 'D':
				set = uniDigit
			case 'w', 'W':
				set = uniWord
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
				continue
			}
			negated := e == 'S' || e == 'D' || e == 'W'
			switch {
			case inClass && negated:
				return "", fmt.Errorf("pre-tokenizer regex %q: \\%c inside a character class is not supported", p, e)
			case inClass:
				b.WriteString(set)
			case negated:
				b.WriteString("[^" + set + "]")
			default:
				b.WriteString("[" + set + "]")
			}
			continue
		}
		switch {
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			// A ']' right after '[' or '[^' is a literal in the class.
			if i+1 < len(p) && p[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' {
				b.WriteString(`\]`)
				i++
			}
			continue
		case c == ']' && inClass:
			inClass = false
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}
