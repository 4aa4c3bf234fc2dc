package chat

import (
	"strings"
	"unicode"
)

// Whitespace control the way Python's Jinja2 lexer does it with HF's settings, applied to the
// template source before github.com/ardanlabs/jinja compiles it.
//
// That library trims text next to tags itself, but it looks past {{ }} tags for the text to
// trim: in "{% if x %}{{ a }}\n{% else %}" its trim_blocks removes the "\n" after {{ a }},
// which Jinja2 keeps, and "{{ a }}  {%- if %}" loses the text before {{ a }}. It also keeps a
// template's final newline, which Jinja2 drops (keep_trailing_newline off), and does not know
// the "+" markers. So the trimming is done here, and every piece of text is handed to the
// library as a string expression ({{ "..." }}), which it never trims. Jinja2's rules:
//
//   - newlines (\r\n, \r) become \n, and one newline at the very end is dropped;
//   - "-" beside a tag's delimiter strips all whitespace on that side ({%- -%}, {{- -}}, {#- -#});
//   - lstrip_blocks: before a block or comment tag that is the first thing on its line, the
//     line's indentation goes, unless the tag opens with "+" ({%+);
//   - trim_blocks: one newline right after a block or comment tag goes, unless it closes
//     with "+" (+%}); {% raw %} keeps it;
//   - {% raw %}...{% endraw %} is text.
//
// Comments are dropped; the lines they and trimmed whitespace held are kept as empty comments,
// so that the library's error messages give the template's own line numbers.

type segKind int

const (
	textSeg    segKind = iota
	exprSeg            // {{ }}
	stmtSeg            // {% %}
	commentSeg         // {# #}
)

type segment struct {
	kind        segKind
	text        string // text, or a tag's content without delimiters and markers
	left, right byte   // a tag's markers: '-', '+' or 0
	cutLines    int    // text: newlines trimmed away
	tookNewline bool   // tag: trim_blocks took the newline after it
	raw         bool   // {% raw %} or {% endraw %}: done here, not given to the library
}

// cut replaces a text segment's text by a trimmed version of it.
func (s *segment) cut(trimmed string) {
	s.cutLines += strings.Count(s.text, "\n") - strings.Count(trimmed, "\n")
	s.text = trimmed
}

// normalizeWhitespace rewrites a template so that the library renders it with Jinja2's
// whitespace. A tag left unclosed is left in the output for the library to report.
func normalizeWhitespace(src string) string {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	segs, rest := segmentTemplate(src)
	trimSegments(segs)

	var b strings.Builder
	for _, s := range segs {
		switch s.kind {
		case textSeg:
			if s.text != "" {
				b.WriteString(`{{ "`)
				for _, r := range s.text {
					switch r {
					case '\\', '"':
						b.WriteByte('\\')
						b.WriteRune(r)
					default:
						b.WriteRune(r) // newlines stay: the library's line numbers stay the template's
					}
				}
				b.WriteString(`" }}`)
			}
			b.WriteString(lines(s.cutLines))
		case exprSeg:
			b.WriteString("{{" + s.text + "}}")
		case stmtSeg:
			if s.raw {
				b.WriteString(lines(strings.Count(s.text, "\n")))
			} else {
				b.WriteString("{%" + s.text + "%}")
			}
		case commentSeg:
			b.WriteString(lines(strings.Count(s.text, "\n")))
		}
	}
	b.WriteString(rest)
	return b.String()
}

// lines is an empty comment holding n newlines ("" for none).
func lines(n int) string {
	if n == 0 {
		return ""
	}
	return "{#" + strings.Repeat("\n", n) + "#}"
}

// segmentTemplate splits src into text and tags as Jinja2's lexer (and the library's scanner)
// find them: a tag ends at its closer outside quoted strings, a comment at the first "#}".
// It returns the segments and an unclosed tag's text, if any.
func segmentTemplate(src string) ([]segment, string) {
	var segs []segment
	text := 0 // where the current text starts
	for i := 0; i+1 < len(src); {
		if src[i] != '{' || (src[i+1] != '{' && src[i+1] != '%' && src[i+1] != '#') {
			i++
			continue
		}
		kind, closer := map[byte]segKind{'{': exprSeg, '%': stmtSeg, '#': commentSeg}[src[i+1]], map[byte]string{'{': "}}", '%': "%}", '#': "#}"}[src[i+1]]
		j := i + 2
		var left byte
		if j < len(src) && (src[j] == '-' || src[j] == '+') {
			left = src[j]
			j++
		}
		end, contentEnd, right := findCloser(src, j, closer, kind != commentSeg, kind == stmtSeg)
		if end < 0 {
			segs = appendText(segs, src[text:i])
			return segs, src[i:]
		}
		segs = appendText(segs, src[text:i])
		tag := segment{kind: kind, text: src[j:contentEnd], left: left, right: right}
		tag.raw = kind == stmtSeg && strings.TrimSpace(tag.text) == "raw"
		segs = append(segs, tag)
		i, text = end, end
		if tag.raw {
			// Everything up to {% endraw %} is text.
			start, stop, endTag := findEndraw(src, end)
			if start < 0 {
				return segs, src[text:] // unclosed: the library reports it
			}
			segs = appendText(segs, src[end:start])
			segs = append(segs, endTag)
			i, text = stop, stop
		}
	}
	segs = appendText(segs, src[text:])
	return segs, ""
}

func appendText(segs []segment, s string) []segment {
	return append(segs, segment{kind: textSeg, text: s})
}

// findCloser finds closer from j, skipping quoted strings when quotes is set. It returns the
// index after the closer, where the content ends, and the marker before the closer ("-", or
// "+" when plus is set: blocks only).
func findCloser(src string, j int, closer string, quotes, plus bool) (end, contentEnd int, marker byte) {
	for i := j; i < len(src); i++ {
		c := src[i]
		if quotes && (c == '\'' || c == '"') {
			for i++; i < len(src) && src[i] != c; i++ {
				if src[i] == '\\' {
					i++
				}
			}
			continue
		}
		if (c == '-' || plus && c == '+') && strings.HasPrefix(src[i+1:], closer) {
			return i + 1 + len(closer), i, c
		}
		if strings.HasPrefix(src[i:], closer) {
			return i + len(closer), i, 0
		}
	}
	return -1, 0, 0
}

// findEndraw finds the {% endraw %} tag after from: where it starts and ends, and the tag.
func findEndraw(src string, from int) (start, end int, tag segment) {
	for i := from; ; {
		k := strings.Index(src[i:], "{%")
		if k < 0 {
			return -1, 0, segment{}
		}
		start = i + k
		j := start + 2
		var left byte
		if j < len(src) && (src[j] == '-' || src[j] == '+') {
			left = src[j]
			j++
		}
		body := strings.TrimLeft(src[j:], " \t\n\r\f\v")
		if after, ok := strings.CutPrefix(body, "endraw"); ok {
			p := len(src) - len(after)
			e, ce, right := findCloser(src, p, "%}", false, true)
			if e >= 0 && strings.TrimSpace(src[p:ce]) == "" {
				return start, e, segment{kind: stmtSeg, text: src[j:ce], left: left, right: right, raw: true}
			}
		}
		i = start + 2
	}
}

// trimSegments applies the markers, lstrip_blocks and trim_blocks to the text segments.
func trimSegments(segs []segment) {
	for i := range segs {
		t := &segs[i]
		if t.kind == textSeg {
			continue
		}
		block := t.kind == stmtSeg || t.kind == commentSeg
		if i > 0 && segs[i-1].kind == textSeg {
			prev := &segs[i-1]
			// Text starts a line at the template's start and after a tag whose
			// trim_blocks took a newline (Jinja2's line_starting).
			startsLine := i == 1 || segs[i-2].tookNewline
			switch {
			case t.left == '-':
				prev.cut(strings.TrimRightFunc(prev.text, isSpace))
			case t.left != '+' && block:
				prev.cut(lstripLine(prev.text, startsLine))
			}
		}
		if i+1 < len(segs) && segs[i+1].kind == textSeg {
			next := &segs[i+1]
			raw := t.raw && strings.TrimSpace(t.text) == "raw" // {% raw %} keeps its newline
			switch {
			case t.right == '-':
				next.cut(strings.TrimLeftFunc(next.text, isSpace))
			case t.right != '+' && block && !raw && strings.HasPrefix(next.text, "\n"):
				next.cut(next.text[1:])
				t.tookNewline = true
			}
		}
	}
}

// lstripLine drops the whitespace between the last newline of s (or its start, when s starts
// a line) and its end, when only whitespace is there.
func lstripLine(s string, startsLine bool) string {
	l := strings.LastIndexByte(s, '\n') + 1
	if l == 0 && !startsLine {
		return s
	}
	if strings.TrimLeftFunc(s[l:], isSpace) == "" {
		return s[:l]
	}
	return s
}

// isSpace is Python's str.isspace for one character (Jinja2's strips and \s).
func isSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }
