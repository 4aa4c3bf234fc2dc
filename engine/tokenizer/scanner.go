package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Hand-written scanners for the pre-tokenizer regexes of GPT-2, Llama-3 and Qwen2.
// Go's regexp has no look-ahead, and these patterns end in `\s+(?!\S)`; each scanner
// below returns, at a position, exactly the match that a backtracking engine
// (Oniguruma, as Hugging Face tokenizers uses) returns for the whole alternation:
// alternatives tried left to right, quantifiers greedy, classes in Unicode:
// \p{L} letters, \p{N} numbers (Nd, Nl, No), \s the White_Space property.

// Known patterns, byte for byte as tokenizer.json files hold them.
const (
	gpt2Pattern   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// scanner matches one of the known patterns.
type scanner struct {
	// llama selects the Llama-3 family of alternatives (Llama-3, Qwen2);
	// false is GPT-2's.
	llama bool
	// foldCase makes the contractions case-insensitive ((?i:...)).
	foldCase bool
	// maxDigits bounds a run of \p{N} (0: unbounded, GPT-2's \p{N}+).
	maxDigits int
}

var (
	gpt2Scanner   = &scanner{}
	llama3Scanner = &scanner{llama: true, foldCase: true, maxDigits: 3}
	qwen2Scanner  = &scanner{llama: true, foldCase: true, maxDigits: 1}
)

// knownScanner returns the scanner of a known pattern, or nil.
func knownScanner(pattern string) *scanner {
	switch pattern {
	case gpt2Pattern:
		return gpt2Scanner
	case llama3Pattern:
		return llama3Scanner
	case qwen2Pattern:
		return qwen2Scanner
	}
	return nil
}

// Character classes the patterns distinguish.
const (
	clsOther   = iota // [^\s\p{L}\p{N}]
	clsLetter         // \p{L}
	clsNumber         // \p{N}
	clsSpace          // \s other than \r and \n
	clsNewline        // \r or \n (also \s)
)

var asciiClass [128]uint8

func init() {
	for c := 0; c < 128; c++ {
		r := rune(c)
		switch {
		case r == '\r' || r == '\n':
			asciiClass[c] = clsNewline
		case unicode.IsSpace(r):
			asciiClass[c] = clsSpace
		case unicode.IsLetter(r):
			asciiClass[c] = clsLetter
		case unicode.IsNumber(r):
			asciiClass[c] = clsNumber
		default:
			asciiClass[c] = clsOther
		}
	}
}

// classAt returns the class and byte length of the character at s[i]. An invalid
// UTF-8 byte counts as one character of class other.
func classAt(s string, i int) (uint8, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && n == 1:
		return clsOther, 1
	case unicode.IsLetter(r):
		return clsLetter, n
	case unicode.IsNumber(r):
		return clsNumber, n
	case unicode.IsSpace(r): // equals the White_Space property
		return clsSpace, n
	}
	return clsOther, n
}

func isSpaceClass(c uint8) bool { return c == clsSpace || c == clsNewline }

// run returns the end of the run of characters of class cls starting at i
// (at most max characters when max > 0).
func run(s string, i int, cls uint8, max int) int {
	for k := 0; i < len(s) && (max <= 0 || k < max); k++ {
		c, n := classAt(s, i)
		if c != cls {
			break
		}
		i += n
	}
	return i
}

// spaceRun returns the end of the run of \s characters starting at i, the start of
// its last character, and the end of its last \r or \n (-1 when it holds none).
func spaceRun(s string, i int) (end, last, afterNewline int) {
	last, afterNewline = i, -1
	for i < len(s) {
		c, n := classAt(s, i)
		if !isSpaceClass(c) {
			break
		}
		last = i
		i += n
		if c == clsNewline {
			afterNewline = i
		}
	}
	return i, last, afterNewline
}

// contraction returns the length of the contraction ('s 't 're 've 'm 'll 'd) after
// the apostrophe at s[i-1], or 0. With foldCase the letters match in any case, by
// Unicode simple case folding (so 'ſ', long s, matches 's' as it does in Oniguruma).
func (sc *scanner) contraction(s string, i int) int {
	for _, suf := range [...]string{"s", "t", "re", "ve", "m", "ll", "d"} {
		j, ok := i, true
		for k := 0; k < len(suf); k++ {
			if j >= len(s) {
				ok = false
				break
			}
			c := s[j]
			if c == suf[k] || sc.foldCase && c == suf[k]-'a'+'A' {
				j++
				continue
			}
			if sc.foldCase && suf[k] == 's' && c == 0xC5 && j+1 < len(s) && s[j+1] == 0xBF { // ſ U+017F
				j += 2
				continue
			}
			ok = false
			break
		}
		if ok {
			return j - i
		}
	}
	return 0
}

// next returns the end of the match that starts at s[i] (i < len(s)); every
// character starts a match of these patterns, so the result is always > i.
func (sc *scanner) next(s string, i int) int {
	if s[i] == '\'' {
		if n := sc.contraction(s, i+1); n > 0 {
			return i + 1 + n
		}
	}
	cls, n := classAt(s, i)
	if sc.llama {
		return sc.nextLlama(s, i, cls, n)
	}
	// ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: a space joins the run after it.
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		if c2, _ := classAt(s, i+1); !isSpaceClass(c2) {
			start, cls = i+1, c2
		}
	}
	if !isSpaceClass(cls) {
		max := 0
		if cls == clsNumber {
			max = sc.maxDigits
		}
		return run(s, start, cls, max)
	}
	return spaceTail(s, i)
}

// spaceTail matches `\s+(?!\S)|\s+` at a space: the whole run at the end of the
// text, else the run less its last character (which then leads the next word), or
// the single character when the run has only one.
func spaceTail(s string, i int) int {
	end, last, _ := spaceRun(s, i)
	if end == len(s) || last == i {
		return end
	}
	return last
}

func (sc *scanner) nextLlama(s string, i int, cls uint8, n int) int {
	switch cls {
	case clsLetter: // [^\r\n\p{L}\p{N}]?\p{L}+ without the optional character
		return run(s, i, clsLetter, 0)
	case clsNumber: // \p{N}{1,k}
		return run(s, i, clsNumber, sc.maxDigits)
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+ : one character (not \r \n) leads a run of letters.
	if cls != clsNewline && i+n < len(s) {
		if c2, _ := classAt(s, i+n); c2 == clsLetter {
			return run(s, i+n, clsLetter, 0)
		}
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		if c2, _ := classAt(s, i+1); c2 == clsOther {
			start, cls = i+1, c2
		}
	}
	if cls == clsOther {
		j := run(s, start, clsOther, 0)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// `\s*[\r\n]+`: the run of spaces up to its last newline.
	if _, _, afterNewline := spaceRun(s, i); afterNewline > 0 {
		return afterNewline
	}
	return spaceTail(s, i)
}

// split appends the matches of the scanner over s (they cover s) as [start,end) pairs.
func (sc *scanner) split(s string, dst [][2]int) [][2]int {
	for i := 0; i < len(s); {
		j := sc.next(s, i)
		dst = append(dst, [2]int{i, j})
		i = j
	}
	return dst
}
