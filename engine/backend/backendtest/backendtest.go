// Package backendtest is the conformance suite every backend.Backend passes, in the spirit of
// ggml's test-backend-ops: every op, forward and backward, on random inputs of awkward shapes
// (odd sizes, partial tiles, grouped-query ratios 1, 2 and 7, one row, rows of 4097 and more,
// empty runs), run on the backend under test and on the reference, the CPU backend, with the
// same inputs, and compared with per-dtype tolerances. A backend's test calls it in one line:
//
//	func TestConformance(t *testing.T) { backendtest.Run(t, mybackend.New(), backendtest.F32()) }
//
// Beyond the comparison, the suite checks the reference itself, so that it can fail on the
// CPU too: its forward values against plain float64 loops written here (the CPU's fast paths
// — packed GEMM panels, the fused 4-bit products, parallel splits, the vector exp — against
// the textbook formula), every backward against finite differences of its forward, the 4-bit
// dequantization bit for bit against package quant, and sampling against the distribution it
// must draw from.
//
// What else every op must do: write exactly its outputs (the harness hands each op views at
// odd offsets into larger allocations and checks that the elements around them, and every
// input, are left as they were), write every element of an output it overwrites (outputs
// start as NaN), and accumulate into gradients (they start random).
//
// Each group of ops is a subtest (go test -run 'Conformance/attention'); -v prints how many
// ops and shapes the backend passed.
package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cpu"
)

// Tol bounds an element's error: |got − want| ≤ Abs + Rel·|want|.
type Tol struct{ Abs, Rel float64 }

// Tolerances are what a backend may differ from the reference by.
type Tolerances struct {
	F32 Tol // ops on float32 operands
	// Ops overrides F32 for the named ops (backend.Backend's method names): a backend that
	// computes some ops in lower precision internally (bf16 products) names them here.
	Ops map[string]Tol
	// Model bounds the whole-model checks: log-probs and logits by Abs + Rel·|want| each;
	// gradients and updated adapters by Rel of each tensor's norm; a greedy token that
	// differs must have a logit within both logits' bounds of the reference's best.
	Model Tol
}

// F32 is the tolerance of a backend that computes in float32 as the reference does, up to
// the order of its sums.
func F32() Tolerances {
	return Tolerances{F32: Tol{Abs: 2e-5, Rel: 1e-4}, Model: Tol{Abs: 1e-4, Rel: 1e-3}}
}

// BF16 is the tolerance of a backend whose products and activations are bf16 (8 bits of
// mantissa) with float32 sums, for unit-scale values.
func BF16() Tolerances {
	return Tolerances{F32: Tol{Abs: 3e-2, Rel: 1.0 / 32}, Model: Tol{Abs: 0.1, Rel: 0.1}}
}

func (t Tolerances) of(op string) Tol {
	if o, ok := t.Ops[op]; ok {
		return o
	}
	return t.F32
}

// Option changes how Run runs.
type Option func(*config)

type config struct {
	small bool
	mixed *Tol
}

// Small uses shorter shape lists (fewer shapes of each kind, smaller long rows) for slow
// backends, such as the CUDA backend on its CPU stand-in. Every op is still run.
func Small() Option { return func(c *config) { c.small = true } }

// Mixed runs the ops a second time with the operand types the model gives the backend: each
// operand of the type b.Precision() names for its role (the residual stream, activations,
// frozen weights; float32 for the rest, as the model passes them), compared with the
// reference within tol. The ops whose operands are all float32 (log-probs, sampling, the
// optimizer) and the whole-model checks are not repeated. A backend whose Precision is
// float32 throughout has nothing to run.
func Mixed(tol Tol) Option { return func(c *config) { c.mixed = &tol } }

// Run runs the suite on b.
func Run(t *testing.T, b backend.Backend, tol Tolerances, opts ...Option) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	s := &suite{b: b, ref: cpu.New(), tol: tol, small: c.small, passed: map[string]int{}, failed: map[string]int{}}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			e := &env{suite: s, t: t, rng: rand.New(rand.NewPCG(uint64(len(g.name)), hash(g.name)))}
			g.run(e)
		})
	}
	summary(t, s, "")
	p := b.Precision()
	if c.mixed == nil || p == (backend.Precision{Act: backend.F32, Stream: backend.F32, Weight: backend.F32}) {
		return
	}
	m := &suite{b: b, ref: s.ref, tol: Tolerances{F32: *c.mixed}, small: c.small, mixed: &p, passed: map[string]int{}, failed: map[string]int{}}
	name := fmt.Sprintf("stream %s, activations %s, weights %s", p.Stream, p.Act, p.Weight)
	t.Run(name, func(t *testing.T) {
		for _, g := range groups {
			if !g.mixed {
				continue
			}
			t.Run(g.name, func(t *testing.T) {
				e := &env{suite: m, t: t, rng: rand.New(rand.NewPCG(uint64(len(g.name)), hash(g.name)))}
				g.run(e)
			})
		}
	})
	summary(t, m, " with "+name)
}

// summary logs what passed (and failed).
func summary(t *testing.T, s *suite, with string) {
	b := s.b
	ops, shapes, models := 0, 0, 0
	for op, n := range s.passed {
		switch {
		case strings.HasPrefix(op, "model "):
			models += n
		case s.failed[op] == 0:
			ops++
			shapes += n
		default:
			shapes += n
		}
	}
	var bad []string
	for op, n := range s.failed {
		bad = append(bad, fmt.Sprintf("%s (%d)", op, n))
	}
	if len(bad) > 0 {
		t.Logf("%s: failed: %s", b.Name(), strings.Join(bad, ", "))
	}
	if s.mixed != nil {
		t.Logf("%s: %d ops, %s shapes passed%s", b.Name(), ops, thousands(shapes), with)
		return
	}
	t.Logf("%s: %d ops, %s shapes passed; %d whole-model checks passed; %d finite-difference checks of the reference's backwards",
		b.Name(), ops, thousands(shapes), models, s.fdChecks)
}

// group is a subtest: a family of ops checked together (a forward and its backward share
// inputs).
type group struct {
	name  string
	mixed bool // has operands of other roles than float32: runs again under Mixed
	run   func(e *env)
}

// groups is filled by the files of this package, one group each.
var groups []group

func register(name string, mixed bool, run func(e *env)) {
	groups = append(groups, group{name, mixed, run})
}

type suite struct {
	b        backend.Backend
	ref      backend.Backend
	tol      Tolerances
	small    bool
	mixed    *backend.Precision // the run with the backend's own operand types
	passed   map[string]int     // op → shapes passed
	failed   map[string]int     // op → shapes failed
	fdChecks int
}

// env is one group's view of the suite.
type env struct {
	*suite
	t   *testing.T
	rng *rand.Rand

	op, shape string // the case being checked
	errs      int    // errors reported in it
	shown     map[string]int
	sink      func(msg string) // when set, takes the errors instead of t (the suite's own tests)
	zerosOK   bool             // the case's outputs may all be zero
}

func allZero(outs [][]float32) bool {
	n := 0
	for _, o := range outs {
		for _, v := range o {
			if v != 0 {
				return false
			}
		}
		n += len(o)
	}
	return n > 0
}

// check runs one case: op on one shape. fn reports mistakes with e.errorf.
func (e *env) check(op, shape string, fn func()) {
	e.op, e.shape, e.errs, e.zerosOK = op, shape, 0, false
	defer func() {
		if r := recover(); r != nil {
			e.errorf("panic: %v", r)
		}
		// A queued op's failure is reported by a later call: drain it here, in its case.
		if err := e.b.Sync(); err != nil {
			e.errorf("%s: a failure reported after the case: %v", e.b.Name(), err)
		}
		if e.errs == 0 {
			e.passed[op]++
		} else {
			e.failed[op]++
		}
		e.op, e.shape = "", ""
	}()
	fn()
}

// errorf reports a mistake in the current case (at most a few per op, then a count).
func (e *env) errorf(format string, v ...any) {
	e.t.Helper()
	e.errs++
	if e.sink != nil {
		e.sink(fmt.Sprintf("%s %s: %s", e.op, e.shape, fmt.Sprintf(format, v...)))
		return
	}
	if e.shown == nil {
		e.shown = map[string]int{}
	}
	e.shown[e.op]++
	if n := e.shown[e.op]; n > 6 {
		if n == 7 {
			e.t.Errorf("%s: more errors not shown", e.op)
		} else {
			e.t.Fail()
		}
		return
	}
	e.t.Errorf("%s %s: %s", e.op, e.shape, fmt.Sprintf(format, v...))
}

// must reports a backend's error.
func (e *env) must(what string, err error) bool {
	e.t.Helper()
	if err != nil {
		e.errorf("%s: %v", what, err)
		return false
	}
	return true
}

// twin runs f on the reference and on the backend under test, each with its own side (the
// same inputs uploaded to each), and compares the outputs f returns, downloaded as float32,
// with the op's tolerance. It returns the reference's outputs (nil when f failed there).
func (e *env) twin(f func(s *side) []backend.Buf) [][]float32 {
	e.t.Helper()
	want := e.run(e.ref, true, f)
	if want == nil {
		return nil
	}
	if !e.zerosOK && allZero(want) {
		e.errorf("the reference's outputs are all zeros: the check would prove nothing")
	}
	got := e.run(e.b, false, f)
	if got == nil {
		return want
	}
	tol := e.tol.of(e.op)
	for i := range want {
		e.close(fmt.Sprintf("output %d", i), got[i], want[i], tol)
	}
	return want
}

// run runs f on one backend and downloads its outputs; nil after a failure (reported).
func (e *env) run(b backend.Backend, ref bool, f func(s *side) []backend.Buf) [][]float32 {
	e.t.Helper()
	s := &side{e: e, b: b, ref: ref}
	if !ref {
		s.prec = e.mixed
	}
	defer s.free()
	outs := f(s)
	if s.failed || !e.must(b.Name()+": sync", b.Sync()) {
		return nil
	}
	var r [][]float32
	for _, o := range outs {
		r = append(r, s.get(o))
	}
	s.checkUntouched()
	if s.failed {
		return nil
	}
	return r
}

// close compares got with want element by element: NaN where want is finite is an error,
// as is a difference beyond tol; it reports the worst element and how many are out.
func (e *env) close(what string, got, want []float32, tol Tol) {
	e.t.Helper()
	if len(got) != len(want) {
		e.errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	bad, worst, wi := 0, 0.0, -1
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(w) && math.IsNaN(g) || g == w {
			continue
		}
		d := math.Abs(g - w)
		lim := tol.Abs + tol.Rel*math.Abs(w)
		if d <= lim {
			continue
		}
		bad++
		r := d / math.Max(lim, 1e-300)
		if math.IsNaN(d) {
			r = math.Inf(1)
		}
		if wi < 0 || r > worst {
			worst, wi = r, i
		}
	}
	if bad > 0 {
		e.errorf("%s: %d of %d values beyond |d| ≤ %g + %g·|want|; worst at %d: got %v, want %v",
			what, bad, len(want), tol.Abs, tol.Rel, wi, got[wi], want[wi])
	}
}

// oracle compares the reference's values with the suite's float64 formula: the check that
// makes the suite able to fail on the CPU itself. The bound is float32 rounding of sums of
// terms of the given scale: |got − want| ≤ abs·scale + rel·|want|.
func (e *env) oracle(what string, got []float32, want []float64, abs, rel float64) {
	e.t.Helper()
	if e.mixed != nil {
		return // checked in the float32 run
	}
	w := make([]float32, len(want))
	for i, v := range want {
		w[i] = float32(v)
	}
	e.close("reference against float64 "+what, got, w, Tol{Abs: abs, Rel: rel})
}

// exact compares bit patterns.
func (e *env) exact(what string, got, want []float32) {
	e.t.Helper()
	if len(got) != len(want) {
		e.errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			e.errorf("%s: value %d is %v (%#08x), want %v (%#08x), bit for bit", what, i, got[i],
				math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			return
		}
	}
}

// Inputs: normal values of a scale, rounded to bf16 so that a backend that computes in bf16
// reads exactly the values the reference reads.

func (e *env) randn(n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = roundBF16(float32(e.rng.NormFloat64() * scale))
	}
	return x
}

func (e *env) uniform(n int, lo, hi float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = roundBF16(float32(lo + (hi-lo)*e.rng.Float64()))
	}
	return x
}

func (e *env) ids(n, below int) []int32 {
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(e.rng.IntN(below))
	}
	return x
}

// roundBF16 rounds to the nearest bf16 value (ties to even), as a float32.
// bf16Exact rounds x to bf16 values in place and returns it, and reports whether the
// backend under test takes frozen matrices as bf16 in this run (role frozen): a backend that
// computes in float32 throughout, outside the Mixed run.
func (e *env) bf16Exact(x []float32) bool {
	for i, v := range x {
		x[i] = roundBF16(v)
	}
	return e.mixed == nil && e.b.Precision().Weight == backend.F32
}

func roundBF16(f float32) float32 {
	return math.Float32frombits(uint32(bf16Bits(f)) << 16)
}

// bf16Bits is the bf16 pattern nearest f (ties to even); NaN stays a quiet NaN.
func bf16Bits(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func hash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// pick returns the full list, or every other element (first and last kept) when small.
func pick[T any](e *env, xs []T) []T {
	if !e.small || len(xs) <= 2 {
		return xs
	}
	var r []T
	for i := 0; i < len(xs); i += 2 {
		r = append(r, xs[i])
	}
	if (len(xs)-1)%2 != 0 {
		r = append(r, xs[len(xs)-1])
	}
	return r
}
