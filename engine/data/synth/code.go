package synth

import (
	"fmt"
	"sort"
	"strings"
)

// Code: small functions built as a little statement tree, rendered in a Python-like or a
// Go-like style, with comments, and examples whose results this package computes itself.

type typ int

const (
	tInt typ = iota
	tInts
	tStr
	tBool
)

// ex is an expression in both styles.
type ex struct{ py, goSrc string }

// e writes an expression once, in Go's syntax, deriving the Python form: && || ! / true false.
func e(src string) ex {
	py := src
	for _, r := range [][2]string{{" && ", " and "}, {" || ", " or "}, {" / ", " // "}, {"true", "True"}, {"false", "False"}} {
		py = strings.ReplaceAll(py, r[0], r[1])
	}
	if strings.HasPrefix(py, "!") && !strings.HasPrefix(py, "!=") {
		py = "not " + py[1:]
	}
	return ex{py, src}
}

type stmtKind int

const (
	sLet      stmtKind = iota // name = x (declaration)
	sSet                      // raw assignment text, x (e.g. "total += v")
	sForEach                  // for name in x
	sForRange                 // for name in range(x, y)
	sWhile                    // while x
	sIf                       // if x ... else ...
	sReturn                   // return x
	sAppend                   // name.append(x)
	sEmpty                    // name = [] (a list of ints)
)

type stmt struct {
	kind      stmtKind
	name      string
	x, y      ex
	body, els []stmt
	note      string // a comment line above the statement
}

type param struct {
	name string
	t    typ
}

type example struct {
	args []any
	want any
}

type function struct {
	words    []string // name words
	params   []param
	result   typ
	verb     string // doc: base verb ("return", "count")
	doc      string // doc: the rest ("the sum of the weights")
	body     []stmt
	examples []example
	imports  []string // Go imports the body needs
}

func (f *function) pyName() string { return strings.Join(f.words, "_") }
func (f *function) goName() string {
	var b strings.Builder
	for i, w := range f.words {
		if i > 0 {
			w = capitalize(w)
		}
		b.WriteString(w)
	}
	return b.String()
}

// third is the third-person form of a base verb.
func third(v string) string {
	switch {
	case strings.HasSuffix(v, "ch"), strings.HasSuffix(v, "sh"), strings.HasSuffix(v, "s"), strings.HasSuffix(v, "x"):
		return v + "es"
	case strings.HasSuffix(v, "y") && !strings.HasSuffix(v, "ay"):
		return v[:len(v)-1] + "ies"
	}
	return v + "s"
}

func goType(t typ) string { return [...]string{"int", "[]int", "string", "bool"}[t] }
func pyType(t typ) string { return [...]string{"int", "list[int]", "str", "bool"}[t] }

func pyValue(v any) string {
	switch v := v.(type) {
	case []int:
		return "[" + joinInts(v) + "]"
	case string:
		return fmt.Sprintf("%q", v)
	case bool:
		if v {
			return "True"
		}
		return "False"
	}
	return fmt.Sprint(v)
}

func goValue(v any) string {
	switch v := v.(type) {
	case []int:
		return "[]int{" + joinInts(v) + "}"
	case string:
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprint(v)
}

// goPrinted is what fmt.Println shows for v.
func goPrinted(v any) string {
	if s, ok := v.([]int); ok {
		return "[" + strings.ReplaceAll(joinInts(s), ",", "") + "]"
	}
	return fmt.Sprint(v)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

// Python rendering.

func (g *gen) pyFunc(f *function, b *strings.Builder) {
	hints := g.chance(0.4)
	ps := make([]string, len(f.params))
	for i, p := range f.params {
		ps[i] = p.name
		if hints {
			ps[i] += ": " + pyType(p.t)
		}
	}
	doc := capitalize(f.verb) + " " + f.doc + "."
	above := g.chance(0.3)
	if above {
		fmt.Fprintf(b, "# %s\n", doc)
	}
	fmt.Fprintf(b, "def %s(%s)", f.pyName(), strings.Join(ps, ", "))
	if hints {
		fmt.Fprintf(b, " -> %s", pyType(f.result))
	}
	b.WriteString(":\n")
	if !above {
		fmt.Fprintf(b, "    \"\"\"%s\"\"\"\n", doc)
	}
	pyBlock(f.body, 1, b)
}

func pyBlock(body []stmt, depth int, b *strings.Builder) {
	ind := strings.Repeat("    ", depth)
	for _, s := range body {
		if s.note != "" {
			fmt.Fprintf(b, "%s# %s\n", ind, s.note)
		}
		switch s.kind {
		case sLet:
			fmt.Fprintf(b, "%s%s = %s\n", ind, s.name, s.x.py)
		case sSet:
			fmt.Fprintf(b, "%s%s\n", ind, s.x.py)
		case sEmpty:
			fmt.Fprintf(b, "%s%s = []\n", ind, s.name)
		case sAppend:
			fmt.Fprintf(b, "%s%s.append(%s)\n", ind, s.name, s.x.py)
		case sReturn:
			fmt.Fprintf(b, "%sreturn %s\n", ind, s.x.py)
		case sForEach:
			fmt.Fprintf(b, "%sfor %s in %s:\n", ind, s.name, s.x.py)
			pyBlock(s.body, depth+1, b)
		case sForRange:
			if s.x.py == "0" {
				fmt.Fprintf(b, "%sfor %s in range(%s):\n", ind, s.name, s.y.py)
			} else {
				fmt.Fprintf(b, "%sfor %s in range(%s, %s):\n", ind, s.name, s.x.py, s.y.py)
			}
			pyBlock(s.body, depth+1, b)
		case sWhile:
			fmt.Fprintf(b, "%swhile %s:\n", ind, s.x.py)
			pyBlock(s.body, depth+1, b)
		case sIf:
			fmt.Fprintf(b, "%sif %s:\n", ind, s.x.py)
			pyBlock(s.body, depth+1, b)
			if len(s.els) > 0 {
				fmt.Fprintf(b, "%selse:\n", ind)
				pyBlock(s.els, depth+1, b)
			}
		}
	}
}

// Go rendering.

func (g *gen) goFunc(f *function, b *strings.Builder) {
	ps := make([]string, len(f.params))
	for i, p := range f.params {
		ps[i] = p.name + " " + goType(p.t)
	}
	// Adjacent parameters of one type share it, as gofmt users write them.
	for i := len(f.params) - 2; i >= 0; i-- {
		if f.params[i].t == f.params[i+1].t {
			ps[i] = f.params[i].name
		}
	}
	fmt.Fprintf(b, "// %s %s %s.\n", f.goName(), third(f.verb), f.doc)
	fmt.Fprintf(b, "func %s(%s) %s {\n", f.goName(), strings.Join(ps, ", "), goType(f.result))
	goBlock(f.body, 1, b)
	b.WriteString("}\n")
}

func goBlock(body []stmt, depth int, b *strings.Builder) {
	ind := strings.Repeat("\t", depth)
	for _, s := range body {
		if s.note != "" {
			fmt.Fprintf(b, "%s// %s\n", ind, s.note)
		}
		switch s.kind {
		case sLet:
			fmt.Fprintf(b, "%s%s := %s\n", ind, s.name, s.x.goSrc)
		case sSet:
			fmt.Fprintf(b, "%s%s\n", ind, s.x.goSrc)
		case sEmpty:
			fmt.Fprintf(b, "%s%s := []int{}\n", ind, s.name)
		case sAppend:
			fmt.Fprintf(b, "%s%s = append(%s, %s)\n", ind, s.name, s.name, s.x.goSrc)
		case sReturn:
			fmt.Fprintf(b, "%sreturn %s\n", ind, s.x.goSrc)
		case sForEach:
			fmt.Fprintf(b, "%sfor _, %s := range %s {\n", ind, s.name, s.x.goSrc)
			goBlock(s.body, depth+1, b)
			fmt.Fprintf(b, "%s}\n", ind)
		case sForRange:
			fmt.Fprintf(b, "%sfor %s := %s; %s < %s; %s++ {\n", ind, s.name, s.x.goSrc, s.name, s.y.goSrc, s.name)
			goBlock(s.body, depth+1, b)
			fmt.Fprintf(b, "%s}\n", ind)
		case sWhile:
			fmt.Fprintf(b, "%sfor %s {\n", ind, s.x.goSrc)
			goBlock(s.body, depth+1, b)
			fmt.Fprintf(b, "%s}\n", ind)
		case sIf:
			fmt.Fprintf(b, "%sif %s {\n", ind, s.x.goSrc)
			goBlock(s.body, depth+1, b)
			if len(s.els) > 0 {
				fmt.Fprintf(b, "%s} else {\n", ind)
				goBlock(s.els, depth+1, b)
			}
			fmt.Fprintf(b, "%s}\n", ind)
		}
	}
}

// Function archetypes.

type theme struct{ plural, single string }

var themes = []theme{
	{"scores", "score"}, {"prices", "price"}, {"weights", "weight"}, {"lengths", "length"}, {"ages", "age"},
	{"counts", "count"}, {"distances", "distance"}, {"sizes", "size"}, {"votes", "vote"}, {"readings", "reading"},
	{"steps", "step"}, {"points", "point"}, {"heights", "height"}, {"minutes", "minute"}, {"coins", "coin"},
	{"temps", "temp"}, {"values", "value"}, {"numbers", "number"}, {"items", "item"}, {"marks", "mark"},
	{"sales", "sale"}, {"costs", "cost"}, {"loads", "load"}, {"speeds", "speed"}, {"nums", "num"},
}

// loopVar is the name of the variable that walks a list of a theme, unlike the names to avoid.
func (g *gen) loopVar(t theme, avoid ...string) string {
	for _, v := range []string{[]string{t.single[:1], "x", t.single, t.single}[g.intn(4)], t.single, "x", "v"} {
		if !sliceHas(avoid, v) {
			return v
		}
	}
	return "elem"
}

func (g *gen) note(p float64, notes ...string) string {
	if g.chance(p) {
		return g.pick(notes)
	}
	return ""
}

func (g *gen) ints(n, lo, hi int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = g.between(lo, hi)
	}
	return out
}

func (g *gen) intsExamples(f *function, lo, hi int, calc func([]int) any) {
	for n := g.between(1, 3); n > 0; n-- {
		xs := g.ints(g.between(3, 6), lo, hi)
		f.examples = append(f.examples, example{[]any{xs}, calc(xs)})
	}
}

func sumInts(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

var archetypes = []func(g *gen) *function{
	codeSum, codeCountIf, codeExtreme, codeAverage, codeFactorial, codeFibonacci, codeGCD, codePower,
	codePrime, codeDigitSum, codeVowels, codeClamp, codeArea, codeFahrenheit, codeTotalPrice, codeFilter,
	codeScale, codeRunning, codeIndexOf, codeSumRange, codeSquares, codeCountMultiples,
}

func codeSum(g *gen) *function {
	t := oneOf(g, themes)
	acc := g.pick([]string{"total", "acc", "result", "s"})
	v := g.loopVar(t, acc)
	f := &function{
		words:  oneOf(g, [][]string{{"total", t.single}, {"sum", t.plural}, {"add", "up", t.plural}}),
		params: []param{{t.plural, tInts}}, result: tInt, verb: "return",
		doc: g.pick([]string{"the sum of all " + t.plural, "the total of the " + t.plural, "all the " + t.plural + " added together"}),
	}
	loop := stmt{kind: sForEach, name: v, x: e(t.plural), body: []stmt{{kind: sSet, x: e(acc + " += " + v)}}, note: g.note(0.3, "add each "+t.single, "go through every "+t.single)}
	if g.chance(0.3) {
		loop = stmt{kind: sForRange, name: "i", x: e("0"), y: e("len(" + t.plural + ")"), body: []stmt{{kind: sSet, x: e(acc + " += " + t.plural + "[i]")}}}
	}
	f.body = []stmt{{kind: sLet, name: acc, x: e("0"), note: g.note(0.3, "start from zero")}, loop, {kind: sReturn, x: e(acc)}}
	g.intsExamples(f, 0, 99, func(xs []int) any { return sumInts(xs) })
	return f
}

func codeCountIf(g *gen) *function {
	t := oneOf(g, themes)
	c := g.pick([]string{"count", "n", "hits", "found"})
	type cmp struct{ op, word, nameWord string }
	k := oneOf(g, []cmp{{">", "greater than", "above"}, {">=", "at least", "at_least"}, {"<", "less than", "below"}, {"==", "equal to", "equal_to"}})
	limit := g.pick([]string{"limit", "threshold", "target", "k"})
	v := g.loopVar(t, c, limit)
	f := &function{
		words:  append([]string{"count", t.plural}, strings.Split(k.nameWord, "_")...),
		params: []param{{t.plural, tInts}, {limit, tInt}}, result: tInt, verb: "count",
		doc: "how many " + t.plural + " are " + k.word + " " + limit,
	}
	f.body = []stmt{
		{kind: sLet, name: c, x: e("0")},
		{kind: sForEach, name: v, x: e(t.plural), body: []stmt{{kind: sIf, x: e(v + " " + k.op + " " + limit), body: []stmt{{kind: sSet, x: e(c + " += 1")}}}}},
		{kind: sReturn, x: e(c)},
	}
	for n := g.between(1, 3); n > 0; n-- {
		xs, lim := g.ints(g.between(3, 7), 0, 50), g.between(5, 45)
		if k.op == "==" {
			lim = xs[g.intn(len(xs))]
		}
		got := 0
		for _, x := range xs {
			if map[string]bool{">": x > lim, ">=": x >= lim, "<": x < lim, "==": x == lim}[k.op] {
				got++
			}
		}
		f.examples = append(f.examples, example{[]any{xs, lim}, got})
	}
	return f
}

func codeExtreme(g *gen) *function {
	t := oneOf(g, themes)
	largest := g.chance(0.5)
	word, op, best := "largest", ">", g.pick([]string{"best", "biggest", "top", "m"})
	if !largest {
		word, op, best = "smallest", "<", g.pick([]string{"best", "lowest", "least", "m"})
	}
	v := g.loopVar(t, best)
	f := &function{
		words:  oneOf(g, [][]string{{word, t.single}, {map[bool]string{true: "max", false: "min"}[largest], t.single}}),
		params: []param{{t.plural, tInts}}, result: tInt, verb: "return", doc: "the " + word + " of the " + t.plural,
	}
	f.body = []stmt{
		{kind: sLet, name: best, x: e(t.plural + "[0]"), note: g.note(0.4, "assume the first one wins", "the list must not be empty")},
		{kind: sForEach, name: v, x: e(t.plural), body: []stmt{{kind: sIf, x: e(v + " " + op + " " + best), body: []stmt{{kind: sSet, x: e(best + " = " + v)}}, note: g.note(0.4, "keep the "+word+" so far")}}},
		{kind: sReturn, x: e(best)},
	}
	g.intsExamples(f, 0, 999, func(xs []int) any {
		m := xs[0]
		for _, x := range xs {
			if largest && x > m || !largest && x < m {
				m = x
			}
		}
		return m
	})
	return f
}

func codeAverage(g *gen) *function {
	t := oneOf(g, themes)
	v := g.loopVar(t, "total")
	f := &function{
		words: oneOf(g, [][]string{{"average", t.single}, {"mean", t.single}}), params: []param{{t.plural, tInts}}, result: tInt,
		verb: "return", doc: "the average " + t.single + ", rounded down",
	}
	f.body = []stmt{
		{kind: sLet, name: "total", x: e("0")},
		{kind: sForEach, name: v, x: e(t.plural), body: []stmt{{kind: sSet, x: e("total += " + v)}}},
		{kind: sReturn, x: e("total / len(" + t.plural + ")"), note: g.note(0.4, "integer division drops the remainder")},
	}
	g.intsExamples(f, 0, 100, func(xs []int) any { return sumInts(xs) / len(xs) })
	return f
}

func codeFactorial(g *gen) *function {
	n := g.pick([]string{"n", "k", "count"})
	f := &function{words: []string{"factorial"}, params: []param{{n, tInt}}, result: tInt, verb: "return", doc: "the product of the numbers from 1 to " + n}
	f.body = []stmt{
		{kind: sLet, name: "result", x: e("1")},
		{kind: sForRange, name: "i", x: e("2"), y: e(n + " + 1"), body: []stmt{{kind: sSet, x: e("result *= i")}}},
		{kind: sReturn, x: e("result")},
	}
	for _, k := range pickN(g, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, g.between(1, 3)) {
		p := 1
		for i := 2; i <= k; i++ {
			p *= i
		}
		f.examples = append(f.examples, example{[]any{k}, p})
	}
	return f
}

func codeFibonacci(g *gen) *function {
	f := &function{words: oneOf(g, [][]string{{"fibonacci"}, {"fib"}, {"nth", "fibonacci"}}), params: []param{{"n", tInt}}, result: tInt,
		verb: "return", doc: "the n-th Fibonacci number, starting from 0 and 1"}
	f.body = []stmt{
		{kind: sSet, x: e("a, b = 0, 1"), note: g.note(0.4, "the first two numbers")},
		{kind: sForRange, name: "i", x: e("0"), y: e("n"), body: []stmt{{kind: sSet, x: e("a, b = b, a + b")}}, note: g.note(0.3, "each number is the sum of the two before it")},
		{kind: sReturn, x: e("a")},
	}
	// The Go form needs a declaration first.
	f.body[0].x.goSrc = "a, b := 0, 1"
	for _, k := range pickN(g, []int{1, 2, 3, 5, 6, 7, 8, 10, 12, 15, 20}, g.between(1, 3)) {
		a, b := 0, 1
		for i := 0; i < k; i++ {
			a, b = b, a+b
		}
		f.examples = append(f.examples, example{[]any{k}, a})
	}
	return f
}

func codeGCD(g *gen) *function {
	f := &function{words: oneOf(g, [][]string{{"gcd"}, {"greatest", "common", "divisor"}}), params: []param{{"a", tInt}, {"b", tInt}}, result: tInt,
		verb: "return", doc: "the greatest common divisor of a and b"}
	f.body = []stmt{
		{kind: sWhile, x: e("b != 0"), body: []stmt{{kind: sSet, x: e("a, b = b, a % b")}}, note: g.note(0.4, "Euclid's method: replace the pair by the smaller number and the remainder")},
		{kind: sReturn, x: e("a")},
	}
	for n := g.between(1, 3); n > 0; n-- {
		d := g.between(1, 12)
		a, b := d*g.between(1, 30), d*g.between(1, 30)
		x, y := a, b
		for y != 0 {
			x, y = y, x%y
		}
		f.examples = append(f.examples, example{[]any{a, b}, x})
	}
	return f
}

func codePower(g *gen) *function {
	f := &function{words: oneOf(g, [][]string{{"power"}, {"pow"}, {"int", "power"}}), params: []param{{"base", tInt}, {"exp", tInt}}, result: tInt,
		verb: "return", doc: "base raised to the power exp, by repeated multiplication"}
	f.body = []stmt{
		{kind: sLet, name: "result", x: e("1")},
		{kind: sForRange, name: "i", x: e("0"), y: e("exp"), body: []stmt{{kind: sSet, x: e("result *= base")}}},
		{kind: sReturn, x: e("result")},
	}
	for n := g.between(1, 3); n > 0; n-- {
		b, x := g.between(2, 9), g.between(0, 5)
		p := 1
		for i := 0; i < x; i++ {
			p *= b
		}
		f.examples = append(f.examples, example{[]any{b, x}, p})
	}
	return f
}

func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

func codePrime(g *gen) *function {
	f := &function{words: []string{"is", "prime"}, params: []param{{"n", tInt}}, result: tBool, verb: "report", doc: "whether n is a prime number"}
	f.body = []stmt{
		{kind: sIf, x: e("n < 2"), body: []stmt{{kind: sReturn, x: e("false")}}},
		{kind: sLet, name: "d", x: e("2")},
		{kind: sWhile, x: e("d * d <= n"), note: g.note(0.4, "a factor larger than the square root has a partner below it"), body: []stmt{
			{kind: sIf, x: e("n % d == 0"), body: []stmt{{kind: sReturn, x: e("false")}}},
			{kind: sSet, x: e("d += 1")},
		}},
		{kind: sReturn, x: e("true")},
	}
	for n := g.between(1, 3); n > 0; n-- {
		k := g.between(1, 200)
		f.examples = append(f.examples, example{[]any{k}, isPrime(k)})
	}
	return f
}

func codeDigitSum(g *gen) *function {
	f := &function{words: oneOf(g, [][]string{{"digit", "sum"}, {"sum", "digits"}}), params: []param{{"n", tInt}}, result: tInt, verb: "return", doc: "the sum of the decimal digits of n"}
	f.body = []stmt{
		{kind: sLet, name: "total", x: e("0")},
		{kind: sWhile, x: e("n > 0"), body: []stmt{
			{kind: sSet, x: e("total += n % 10"), note: g.note(0.5, "take the last digit")},
			{kind: sSet, x: e("n = n / 10"), note: g.note(0.5, "drop the last digit")},
		}},
		{kind: sReturn, x: e("total")},
	}
	for n := g.between(1, 3); n > 0; n-- {
		k := g.between(1, 99999)
		s := 0
		for x := k; x > 0; x /= 10 {
			s += x % 10
		}
		f.examples = append(f.examples, example{[]any{k}, s})
	}
	return f
}

func codeVowels(g *gen) *function {
	f := &function{words: []string{"count", "vowels"}, params: []param{{"text", tStr}}, result: tInt, verb: "count", doc: "the vowels in text",
		imports: []string{"strings"}}
	f.body = []stmt{
		{kind: sLet, name: "count", x: e("0")},
		{kind: sForEach, name: "ch", x: e("text"), body: []stmt{{kind: sIf, x: ex{`ch in "aeiou"`, `strings.ContainsRune("aeiou", ch)`}, body: []stmt{{kind: sSet, x: e("count += 1")}}}}},
		{kind: sReturn, x: e("count")},
	}
	pool := append(append([]string{}, things...), foods...)
	for n := g.between(1, 3); n > 0; n-- {
		w := g.pick(pool)
		if g.chance(0.5) {
			w = g.pick(colors) + " " + w
		}
		c := 0
		for _, r := range w {
			if strings.ContainsRune("aeiou", r) {
				c++
			}
		}
		f.examples = append(f.examples, example{[]any{w}, c})
	}
	return f
}

func codeClamp(g *gen) *function {
	f := &function{words: []string{"clamp"}, params: []param{{"x", tInt}, {"lo", tInt}, {"hi", tInt}}, result: tInt, verb: "limit", doc: "x to the range from lo to hi"}
	f.body = []stmt{
		{kind: sIf, x: e("x < lo"), body: []stmt{{kind: sReturn, x: e("lo")}}},
		{kind: sIf, x: e("x > hi"), body: []stmt{{kind: sReturn, x: e("hi")}}},
		{kind: sReturn, x: e("x")},
	}
	for n := g.between(1, 3); n > 0; n-- {
		lo := g.between(0, 20)
		hi := lo + g.between(5, 50)
		x := g.between(0, 90)
		f.examples = append(f.examples, example{[]any{x, lo, hi}, min(max(x, lo), hi)})
	}
	return f
}

func codeArea(g *gen) *function {
	shape := oneOf(g, []struct {
		words     []string
		a, b, doc string
		expr      string
		calc      func(a, b int) int
	}{
		{[]string{"rectangle", "area"}, "width", "height", "the area of a rectangle", "width * height", func(a, b int) int { return a * b }},
		{[]string{"rectangle", "perimeter"}, "width", "height", "the perimeter of a rectangle", "2 * (width + height)", func(a, b int) int { return 2 * (a + b) }},
		{[]string{"box", "volume"}, "side", "depth", "the volume of a box with a square side", "side * side * depth", func(a, b int) int { return a * a * b }},
		{[]string{"triangle", "area"}, "base", "height", "the area of a triangle, rounded down", "base * height / 2", func(a, b int) int { return a * b / 2 }},
	})
	f := &function{words: shape.words, params: []param{{shape.a, tInt}, {shape.b, tInt}}, result: tInt, verb: "return", doc: shape.doc,
		body: []stmt{{kind: sReturn, x: e(shape.expr)}}}
	for n := g.between(1, 3); n > 0; n-- {
		a, b := g.between(1, 40), g.between(1, 40)
		f.examples = append(f.examples, example{[]any{a, b}, shape.calc(a, b)})
	}
	return f
}

func codeFahrenheit(g *gen) *function {
	f := &function{words: oneOf(g, [][]string{{"to", "fahrenheit"}, {"celsius", "to", "fahrenheit"}}), params: []param{{"celsius", tInt}}, result: tInt,
		verb: "convert", doc: "a temperature in degrees Celsius to degrees Fahrenheit"}
	f.body = []stmt{{kind: sReturn, x: e("celsius * 9 / 5 + 32")}}
	for n := g.between(1, 3); n > 0; n-- {
		c := 5 * g.between(-8, 20)
		f.examples = append(f.examples, example{[]any{c}, c*9/5 + 32})
	}
	return f
}

func codeTotalPrice(g *gen) *function {
	f := &function{words: oneOf(g, [][]string{{"total", "price"}, {"order", "total"}, {"bill"}}), params: []param{{"prices", tInts}, {"quantities", tInts}}, result: tInt,
		verb: "return", doc: "the cost of an order: each price times its quantity, added up"}
	f.body = []stmt{
		{kind: sLet, name: "total", x: e("0")},
		{kind: sForRange, name: "i", x: e("0"), y: e("len(prices)"), body: []stmt{{kind: sSet, x: e("total += prices[i] * quantities[i]")}}},
		{kind: sReturn, x: e("total")},
	}
	for n := g.between(1, 2); n > 0; n-- {
		k := g.between(2, 4)
		p, q := g.ints(k, 1, 50), g.ints(k, 1, 9)
		s := 0
		for i := range p {
			s += p[i] * q[i]
		}
		f.examples = append(f.examples, example{[]any{p, q}, s})
	}
	return f
}

func codeFilter(g *gen) *function {
	t := oneOf(g, themes)
	v := g.loopVar(t, "result")
	type rule struct {
		words []string
		doc   string
		cond  string
		keep  func(int) bool
	}
	k := g.between(3, 7)
	r := oneOf(g, []rule{
		{[]string{"even", t.plural}, "the even " + t.plural, v + " % 2 == 0", func(x int) bool { return x%2 == 0 }},
		{[]string{"odd", t.plural}, "the odd " + t.plural, v + " % 2 == 1", func(x int) bool { return x%2 == 1 }},
		{[]string{"multiples", "of", fmt.Sprint(numberWord(k))}, fmt.Sprintf("the %s that are multiples of %d", t.plural, k), fmt.Sprintf("%s %% %d == 0", v, k), func(x int) bool { return x%k == 0 }},
		{[]string{"large", t.plural}, fmt.Sprintf("the %s above %d", t.plural, 10*k), fmt.Sprintf("%s > %d", v, 10*k), func(x int) bool { return x > 10*k }},
	})
	f := &function{words: r.words, params: []param{{t.plural, tInts}}, result: tInts, verb: "return", doc: r.doc}
	f.body = []stmt{
		{kind: sEmpty, name: "result"},
		{kind: sForEach, name: v, x: e(t.plural), body: []stmt{{kind: sIf, x: e(r.cond), body: []stmt{{kind: sAppend, name: "result", x: e(v)}}}}},
		{kind: sReturn, x: e("result")},
	}
	g.intsExamples(f, 0, 99, func(xs []int) any {
		out := []int{}
		for _, x := range xs {
			if r.keep(x) {
				out = append(out, x)
			}
		}
		return out
	})
	return f
}

func codeScale(g *gen) *function {
	t := oneOf(g, themes)
	v := g.loopVar(t, "out", "factor")
	f := &function{words: oneOf(g, [][]string{{"scale", t.plural}, {"multiply", t.plural}}), params: []param{{t.plural, tInts}, {"factor", tInt}}, result: tInts,
		verb: "return", doc: "a new list with every " + t.single + " multiplied by factor"}
	f.body = []stmt{
		{kind: sEmpty, name: "out"},
		{kind: sForEach, name: v, x: e(t.plural), body: []stmt{{kind: sAppend, name: "out", x: e(v + " * factor")}}},
		{kind: sReturn, x: e("out")},
	}
	for n := g.between(1, 2); n > 0; n-- {
		xs, k := g.ints(g.between(2, 5), 0, 30), g.between(2, 9)
		out := make([]int, len(xs))
		for i, x := range xs {
			out[i] = x * k
		}
		f.examples = append(f.examples, example{[]any{xs, k}, out})
	}
	return f
}

func codeRunning(g *gen) *function {
	t := oneOf(g, themes)
	v := g.loopVar(t, "total", "totals")
	f := &function{words: []string{"running", "total"}, params: []param{{t.plural, tInts}}, result: tInts,
		verb: "return", doc: "the running totals of the " + t.plural}
	f.body = []stmt{
		{kind: sEmpty, name: "totals"},
		{kind: sLet, name: "total", x: e("0")},
		{kind: sForEach, name: v, x: e(t.plural), body: []stmt{{kind: sSet, x: e("total += " + v)}, {kind: sAppend, name: "totals", x: e("total")}}},
		{kind: sReturn, x: e("totals")},
	}
	g.intsExamples(f, 0, 40, func(xs []int) any {
		out, s := make([]int, len(xs)), 0
		for i, x := range xs {
			s += x
			out[i] = s
		}
		return out
	})
	return f
}

func codeIndexOf(g *gen) *function {
	t := oneOf(g, themes)
	f := &function{words: oneOf(g, [][]string{{"index", "of"}, {"find", t.single}}), params: []param{{t.plural, tInts}, {"target", tInt}}, result: tInt,
		verb: "return", doc: "the position of target in " + t.plural + ", or -1 if it is missing"}
	f.body = []stmt{
		{kind: sForRange, name: "i", x: e("0"), y: e("len(" + t.plural + ")"), body: []stmt{{kind: sIf, x: e(t.plural + "[i] == target"), body: []stmt{{kind: sReturn, x: e("i")}}}}},
		{kind: sReturn, x: e("-1"), note: g.note(0.5, "not found")},
	}
	for n := g.between(1, 3); n > 0; n-- {
		xs := g.ints(g.between(3, 7), 0, 60)
		target := xs[g.intn(len(xs))]
		if g.chance(0.3) {
			target = 61 + g.intn(30)
		}
		idx := -1
		for i, x := range xs {
			if x == target {
				idx = i
				break
			}
		}
		f.examples = append(f.examples, example{[]any{xs, target}, idx})
	}
	return f
}

func codeSumRange(g *gen) *function {
	f := &function{words: []string{"sum", "between"}, params: []param{{"lo", tInt}, {"hi", tInt}}, result: tInt,
		verb: "add", doc: "up the whole numbers from lo to hi, both included"}
	f.body = []stmt{
		{kind: sLet, name: "total", x: e("0")},
		{kind: sForRange, name: "i", x: e("lo"), y: e("hi + 1"), body: []stmt{{kind: sSet, x: e("total += i")}}},
		{kind: sReturn, x: e("total")},
	}
	for n := g.between(1, 3); n > 0; n-- {
		lo := g.between(0, 20)
		hi := lo + g.between(0, 30)
		f.examples = append(f.examples, example{[]any{lo, hi}, (lo + hi) * (hi - lo + 1) / 2})
	}
	return f
}

func codeSquares(g *gen) *function {
	f := &function{words: []string{"sum", "of", "squares"}, params: []param{{"n", tInt}}, result: tInt, verb: "return", doc: "1*1 + 2*2 + ... + n*n"}
	f.body = []stmt{
		{kind: sLet, name: "total", x: e("0")},
		{kind: sForRange, name: "i", x: e("1"), y: e("n + 1"), body: []stmt{{kind: sSet, x: e("total += i * i")}}},
		{kind: sReturn, x: e("total")},
	}
	for n := g.between(1, 3); n > 0; n-- {
		k := g.between(1, 20)
		f.examples = append(f.examples, example{[]any{k}, k * (k + 1) * (2*k + 1) / 6})
	}
	return f
}

func codeCountMultiples(g *gen) *function {
	f := &function{words: []string{"count", "multiples"}, params: []param{{"n", tInt}, {"k", tInt}}, result: tInt,
		verb: "count", doc: "the numbers from 1 to n that k divides evenly"}
	f.body = []stmt{
		{kind: sLet, name: "count", x: e("0")},
		{kind: sForRange, name: "i", x: e("1"), y: e("n + 1"), body: []stmt{{kind: sIf, x: e("i % k == 0"), body: []stmt{{kind: sSet, x: e("count += 1")}}}}},
		{kind: sReturn, x: e("count")},
	}
	for n := g.between(1, 3); n > 0; n-- {
		a, k := g.between(1, 100), g.between(2, 9)
		f.examples = append(f.examples, example{[]any{a, k}, a / k})
	}
	return f
}

var moduleNotes = []string{
	"Small helpers for working with lists of numbers.", "Utility functions used by the report script.",
	"Math helpers for the exercises in chapter %d.", "Functions for the inventory tool.", "Helpers written for lesson %d.",
	"Common calculations, kept simple on purpose.", "A few checks used by the game.", "Number utilities.",
}

func makeCode(g *gen) string {
	g.codeText(false)
	return g.b.String()
}

// codeText writes one to three functions in one style, with their examples. With promptOnly,
// the cut is placed after the first function's header.
func (g *gen) codeText(promptOnly bool) {
	goStyle := g.chance(0.5)
	n := g.between(1, 3)
	if promptOnly {
		n = 1
	}
	fns := make([]*function, 0, n)
	seen := map[string]bool{}
	for len(fns) < n {
		f := oneOf(g, archetypes)(g)
		if !seen[f.goName()] {
			seen[f.goName()] = true
			fns = append(fns, f)
		}
	}
	b := &g.b
	note := g.pick(moduleNotes)
	if strings.Contains(note, "%d") {
		note = fmt.Sprintf(note, g.between(1, 12))
	}
	if goStyle {
		program := !promptOnly && g.chance(0.6)
		needsImport := false
		for _, f := range fns {
			needsImport = needsImport || len(f.imports) > 0
		}
		if program || needsImport || g.chance(0.3) {
			if g.chance(0.5) {
				fmt.Fprintf(b, "// %s\n", note)
			}
			b.WriteString("package main\n\n")
			imports := map[string]bool{}
			if program {
				imports["fmt"] = true
			}
			for _, f := range fns {
				for _, im := range f.imports {
					imports[im] = true
				}
			}
			writeImports(b, keys(imports))
		}
		for i, f := range fns {
			if i > 0 {
				b.WriteString("\n")
			}
			var fb strings.Builder
			g.goFunc(f, &fb)
			if i == 0 {
				g.cutAfterHeader(fb.String(), 2)
			}
			b.WriteString(fb.String())
			if !program {
				for _, x := range f.examples {
					fmt.Fprintf(b, "\n// %s(%s) returns %s.", f.goName(), goArgs(x.args), goValue(x.want))
				}
				if len(f.examples) > 0 {
					b.WriteString("\n")
				}
			}
		}
		if program {
			b.WriteString("\nfunc main() {\n")
			for _, f := range fns {
				for _, x := range f.examples {
					fmt.Fprintf(b, "\tfmt.Println(%s(%s)) // %s\n", f.goName(), goArgs(x.args), goPrinted(x.want))
				}
			}
			b.WriteString("}\n")
		}
		return
	}
	if !promptOnly && g.chance(0.4) {
		fmt.Fprintf(b, "# %s\n\n", note)
	}
	asserts := g.chance(0.3)
	for i, f := range fns {
		if i > 0 {
			b.WriteString("\n\n")
		}
		var fb strings.Builder
		g.pyFunc(f, &fb)
		if i == 0 {
			g.cutAfterHeader(fb.String(), 2)
		}
		b.WriteString(fb.String())
	}
	b.WriteString("\n\n")
	for _, f := range fns {
		for _, x := range f.examples {
			call := fmt.Sprintf("%s(%s)", f.pyName(), pyArgs(x.args))
			if asserts {
				fmt.Fprintf(b, "assert %s == %s\n", call, pyValue(x.want))
			} else {
				fmt.Fprintf(b, "print(%s)  # %s\n", call, pyValue(x.want))
			}
		}
	}
}

// cutAfterHeader marks the prompt cut after the first lines lines of the function text fn,
// which is about to be appended to the document.
func (g *gen) cutAfterHeader(fn string, lines int) {
	at := 0
	for i := 0; i < lines; i++ {
		j := strings.IndexByte(fn[at:], '\n')
		if j < 0 {
			break
		}
		at += j + 1
	}
	g.cutAt = g.b.Len() + at
}

func writeImports(b *strings.Builder, imports []string) {
	sort.Strings(imports)
	switch len(imports) {
	case 0:
	case 1:
		fmt.Fprintf(b, "import %q\n\n", imports[0])
	default:
		b.WriteString("import (\n")
		for _, im := range imports {
			fmt.Fprintf(b, "\t%q\n", im)
		}
		b.WriteString(")\n\n")
	}
}

func pyArgs(args []any) string {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = pyValue(a)
	}
	return strings.Join(s, ", ")
}

func goArgs(args []any) string {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = goValue(a)
	}
	return strings.Join(s, ", ")
}

// codePrompt is the opening of a function (its comment or docstring and its header), to be
// completed.
func codePrompt(g *gen) Prompt {
	g.codeText(true)
	return g.promptAtCut()
}
