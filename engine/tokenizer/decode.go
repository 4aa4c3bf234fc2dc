package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// decoder is one of Hugging Face's decoders. Like theirs, each step maps the list of
// token strings to a new list (decode_chain), and Decode joins the last list.
//
// inner asks for a token's text inside a longer one (TokenBytes): the steps that only
// apply at the ends of a decoded text (Strip, Metaspace's first token) leave it alone.
type decoder interface {
	decodeChain(toks []string, inner bool) []string
}

type sequenceDec []decoder

func (q sequenceDec) decodeChain(toks []string, inner bool) []string {
	for _, d := range q {
		toks = d.decodeChain(toks, inner)
	}
	return toks
}

// byteLevelDec maps byte-level characters back to bytes and the whole to text.
type byteLevelDec struct{}

func (byteLevelDec) decodeChain(toks []string, _ bool) []string {
	var buf []byte
	for _, t := range toks {
		buf = append(buf, unByteLevel(t)...)
	}
	return []string{lossyUTF8(buf)}
}

// replaceDec replaces the matches of a pattern in each token.
type replaceDec struct {
	m       matcher
	content string
}

func (r replaceDec) decodeChain(toks []string, _ bool) []string {
	var ms [][2]int
	for i, t := range toks {
		ms = r.m.matches(t, ms[:0])
		if len(ms) == 0 {
			continue
		}
		toks[i] = replaceMatches(t, ms, r.content)
	}
	return toks
}

func replaceMatches(s string, ms [][2]int, content string) string {
	var b strings.Builder
	prev := 0
	for _, m := range ms {
		b.WriteString(s[prev:m[0]])
		b.WriteString(content)
		prev = m[1]
	}
	b.WriteString(s[prev:])
	return b.String()
}

// byteFallbackDec turns runs of "<0xNN>" tokens back into the text their bytes
// spell; a run that is not valid UTF-8 becomes one U+FFFD per byte, as Hugging Face's
// ByteFallback decoder does.
type byteFallbackDec struct{}

func (byteFallbackDec) decodeChain(toks []string, _ bool) []string {
	out := toks[:0:0]
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, t := range toks {
		if b, ok := fallbackByte(t); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// fallbackByte reads a "<0xNN>" token (hex digits in either case, as Rust's
// u8::from_str_radix reads them, which also takes a leading '+').
func fallbackByte(t string) (byte, bool) {
	if len(t) != 6 || t[:3] != "<0x" || t[5] != '>' {
		return 0, false
	}
	if t[3] == '+' {
		v, ok := hexDigit(t[4])
		return v, ok
	}
	hi, ok1 := hexDigit(t[3])
	lo, ok2 := hexDigit(t[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// fuseDec joins all tokens into one.
type fuseDec struct{}

func (fuseDec) decodeChain(toks []string, _ bool) []string {
	return []string{strings.Join(toks, "")}
}

// stripDec removes up to start copies of content from the front of each token and up
// to stop from its end.
type stripDec struct {
	content     rune
	start, stop int
}

func (d stripDec) decodeChain(toks []string, inner bool) []string {
	if inner {
		return toks
	}
	for i, t := range toks {
		for k := 0; k < d.start; k++ {
			r, n := utf8.DecodeRuneInString(t)
			if n == 0 || r != d.content {
				break
			}
			t = t[n:]
		}
		for k := 0; k < d.stop; k++ {
			r, n := utf8.DecodeLastRuneInString(t)
			if n == 0 || r != d.content {
				break
			}
			t = t[:len(t)-n]
		}
		toks[i] = t
	}
	return toks
}

// metaspaceDec turns the replacement character back into spaces; in the first token
// it is dropped instead, unless the pre-tokenizer never prepends one (Hugging Face's
// Metaspace decoder drops every one there, not only a leading one).
type metaspaceDec struct {
	repl    rune
	prepend prependScheme
}

func (d metaspaceDec) decodeChain(toks []string, inner bool) []string {
	for i, t := range toks {
		if !strings.ContainsRune(t, d.repl) {
			continue
		}
		with := " "
		if i == 0 && !inner && d.prepend != prependNever {
			with = ""
		}
		toks[i] = strings.ReplaceAll(t, string(d.repl), with)
	}
	return toks
}
