package synth

import (
	"math/rand/v2"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A small template language, so that each sentence shape can be written once with its
// variations inline:
//
//	{a|b|c}   one of the alternatives, uniformly (alternatives nest)
//	{?a}      a, half of the time
//	$name     the variable name (letters, digits, _); a $ not followed by a letter is literal
type node struct {
	lit  string    // literal text, when alts and name are empty
	name string    // variable
	alts [][]*node // choice; with opt, the single alternative is optional
	opt  bool
}

type tmpl []*node

// compile parses a template; malformed templates panic at package initialisation, since they
// are constants of this package.
func compile(s string) tmpl {
	seq, rest := parseSeq(s, false)
	if rest != "" {
		panic("synth: unbalanced template: " + s)
	}
	return seq
}

func parseSeq(s string, inner bool) (tmpl, string) {
	var seq tmpl
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			seq = append(seq, &node{lit: lit.String()})
			lit.Reset()
		}
	}
	for len(s) > 0 {
		c := s[0]
		switch {
		case inner && (c == '|' || c == '}'):
			flush()
			return seq, s
		case c == '{':
			flush()
			n := &node{}
			s = s[1:]
			if strings.HasPrefix(s, "?") {
				n.opt = true
				s = s[1:]
			}
			for {
				alt, rest := parseSeq(s, true)
				n.alts = append(n.alts, alt)
				if rest == "" {
					panic("synth: unclosed { in template")
				}
				s = rest[1:]
				if rest[0] == '}' {
					break
				}
			}
			seq = append(seq, n)
		case c == '$' && len(s) > 1 && isIdent(s[1]) && !isDigit(s[1]):
			flush()
			i := 1
			for i < len(s) && isIdent(s[i]) {
				i++
			}
			seq = append(seq, &node{name: s[1:i]})
			s = s[i:]
		default:
			lit.WriteByte(c)
			s = s[1:]
		}
	}
	flush()
	return seq, ""
}

func isIdent(c byte) bool { return c == '_' || isDigit(c) || c|0x20 >= 'a' && c|0x20 <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// gen is the state of one document's generation: its random stream, its variables and the
// text written so far.
type gen struct {
	r     *rand.Rand
	vars  map[string]string
	b     strings.Builder
	cutAt int
}

func newGen(seed, stream uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, stream)), vars: map[string]string{}}
}

func (g *gen) expand(t tmpl, b *strings.Builder) {
	for _, n := range t {
		switch {
		case n.alts != nil && n.opt:
			if g.r.IntN(2) == 0 {
				g.expand(n.alts[0], b)
			}
		case n.alts != nil:
			g.expand(n.alts[g.r.IntN(len(n.alts))], b)
		case n.name != "":
			v, ok := g.vars[n.name]
			if !ok {
				panic("synth: template variable $" + n.name + " unset")
			}
			b.WriteString(v)
		default:
			b.WriteString(n.lit)
		}
	}
}

// text expands t and returns it with its first letter capitalised and spaces tidied.
func (g *gen) text(t tmpl) string {
	var b strings.Builder
	g.expand(t, &b)
	return tidy(b.String())
}

// phrase expands t without capitalising it, for text placed inside a sentence.
func (g *gen) phrase(t tmpl) string {
	var b strings.Builder
	g.expand(t, &b)
	s := tidy(b.String())
	if len(s) > 0 && b.Len() > 0 && s[0] != b.String()[0] {
		s = b.String()[:1] + s[1:]
	}
	return s
}

// cut marks the end of a prompt: the text so far.
func (g *gen) cut() { g.cutAt = g.b.Len() }

// promptAtCut splits the text at the cut: the prompt before it, the reference after.
func (g *gen) promptAtCut() Prompt {
	s := g.b.String()
	return Prompt{Prompt: s[:g.cutAt], Reference: s[g.cutAt:]}
}

// say appends a sentence made from one of the templates, separated by a space.
func (g *gen) say(ts ...tmpl) {
	s := g.text(ts[g.r.IntN(len(ts))])
	if g.b.Len() > 0 {
		if last := g.b.String()[g.b.Len()-1]; last != '\n' && last != ' ' {
			g.b.WriteByte(' ')
		}
	}
	g.b.WriteString(s)
}

// para starts a new paragraph.
func (g *gen) para() {
	if g.b.Len() > 0 {
		g.b.WriteString("\n\n")
	}
}

// tidy collapses doubled spaces (from empty optional parts), removes spaces before
// punctuation and capitalises the first letter.
func tidy(s string) string {
	if strings.Contains(s, "  ") || strings.Contains(s, " ,") || strings.Contains(s, " .") {
		var b strings.Builder
		prevSpace := false
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c == ' ' {
				if prevSpace {
					continue
				}
				if i+1 < len(s) && (s[i+1] == ',' || s[i+1] == '.') {
					continue
				}
				prevSpace = true
			} else {
				prevSpace = false
			}
			b.WriteByte(c)
		}
		s = b.String()
	}
	s = strings.TrimSpace(s)
	return capitalize(s)
}

func capitalize(s string) string {
	i := 0
	if strings.HasPrefix(s, `"`) {
		i = 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if n == 0 || unicode.IsUpper(r) {
		return s
	}
	return s[:i] + string(unicode.ToUpper(r)) + s[i+n:]
}

// Random helpers.

func (g *gen) pick(list []string) string { return list[g.r.IntN(len(list))] }
func (g *gen) intn(n int) int            { return g.r.IntN(n) }
func (g *gen) chance(p float64) bool     { return g.r.Float64() < p }

// between returns an integer in [lo, hi].
func (g *gen) between(lo, hi int) int { return lo + g.r.IntN(hi-lo+1) }

// pickN returns n distinct elements of list (n ≤ len(list)).
func pickN[T any](g *gen, list []T, n int) []T {
	idx := g.r.Perm(len(list))[:n]
	out := make([]T, n)
	for i, j := range idx {
		out[i] = list[j]
	}
	return out
}

// pickOrdered returns n distinct elements of list in their order in list.
func pickOrdered[T any](g *gen, list []T, n int) []T {
	idx := g.r.Perm(len(list))[:n]
	sort.Ints(idx)
	out := make([]T, n)
	for i, j := range idx {
		out[i] = list[j]
	}
	return out
}

func oneOf[T any](g *gen, list []T) T { return list[g.r.IntN(len(list))] }

func tmpls(ss ...string) []tmpl {
	out := make([]tmpl, len(ss))
	for i, s := range ss {
		out[i] = compile(s)
	}
	return out
}

// article returns "a" or "an" for the word w.
func article(w string) string {
	if w == "" {
		return "a"
	}
	switch w[0] {
	case 'a', 'e', 'i', 'o', 'u', 'A', 'E', 'I', 'O', 'U':
		if strings.HasPrefix(w, "uni") || strings.HasPrefix(w, "use") || strings.HasPrefix(w, "one") {
			return "a"
		}
		return "an"
	}
	if strings.HasPrefix(w, "hour") || strings.HasPrefix(w, "honest") {
		return "an"
	}
	return "a"
}

// withArticle is "a w" or "an w".
func withArticle(w string) string { return article(w) + " " + w }

// list joins words as "a, b and c".
func list(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

func sliceHas(s []string, x string) bool {
	for _, e := range s {
		if e == x {
			return true
		}
	}
	return false
}

// keys returns the sorted keys of m.
func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
