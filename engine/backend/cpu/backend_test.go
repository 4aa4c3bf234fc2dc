package cpu

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"rlhfstation/engine/backend"
)

func TestSelectCPU(t *testing.T) {
	b, err := backend.Select("cpu")
	if err != nil || b.Name() != "cpu" {
		t.Fatalf("Select(cpu) = %v, %v", b, err)
	}
	if b, err := backend.Select("auto"); err != nil || b == nil {
		t.Fatalf("Select(auto) = %v, %v: the CPU must be the fallback", b, err)
	}
}

func TestMemoryOps(t *testing.T) {
	b := New()
	f, _ := b.Alloc(backend.F32, 5)
	if err := b.Upload(f, []float32{1, 2, 3, 4, 5}); err != nil {
		t.Fatal(err)
	}
	g, _ := b.Alloc(backend.F32, 3)
	if err := b.Copy(g, f.Slice(1, 3)); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 3)
	if err := b.Download(got, g); err != nil || got[0] != 2 || got[2] != 4 {
		t.Fatalf("copy of a slice = %v, %v", got, err)
	}
	b.Zero(f.Slice(0, 2))
	if x := f.F32(); x[0] != 0 || x[1] != 0 || x[2] != 3 {
		t.Fatalf("Zero of the first two = %v", x)
	}
	// bf16: upload rounds to nearest even, download widens exactly
	h, _ := b.Alloc(backend.BF16, 3)
	in := []float32{1 + 1.0/256, 1 + 3.0/256, -2.5}
	if err := b.Upload(h, in); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 3)
	if err := b.Download(out, h); err != nil {
		t.Fatal(err)
	}
	if out[0] != 1 || out[1] != 1+4.0/256 || out[2] != -2.5 {
		t.Fatalf("bf16 round trip of %v = %v", in, out)
	}
	back, _ := b.Alloc(backend.F32, 3)
	if err := b.Cast(back, h); err != nil || back.F32()[1] != out[1] {
		t.Fatalf("cast bf16→f32 = %v, %v", back.F32(), err)
	}
	for _, c := range []struct {
		dt   backend.DType
		host any
	}{{backend.U8, []byte{1, 2}}, {backend.I32, []int32{-1, 7}}, {backend.I64, []int64{1 << 40, 3}}, {backend.F64, []float64{0.5, 1e300}},
		{backend.F16, []uint16{0x3c00, 1}}} {
		x, err := b.Alloc(c.dt, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Upload(x, c.host); err != nil {
			t.Fatalf("%s: %v", c.dt, err)
		}
		var dst any
		switch c.host.(type) {
		case []byte:
			dst = make([]byte, 2)
		case []int32:
			dst = make([]int32, 2)
		case []int64:
			dst = make([]int64, 2)
		case []float64:
			dst = make([]float64, 2)
		case []uint16:
			dst = make([]uint16, 2)
		}
		if err := b.Download(dst, x); err != nil {
			t.Fatalf("%s: %v", c.dt, err)
		}
		if a, e := fmtAny(dst), fmtAny(c.host); a != e {
			t.Errorf("%s round trip: %s, want %s", c.dt, a, e)
		}
	}
	// mistakes are errors naming what was wrong
	for name, err := range map[string]error{
		"upload length":   b.Upload(f, []float32{1}),
		"upload type":     b.Upload(f, []int32{1, 2, 3, 4, 5}),
		"download length": b.Download(make([]float32, 4), f),
		"copy":            b.Copy(g, f),
		"short operand":   b.GELUForward(g, f, 4),
		"short gemm":      b.GEMM(false, false, 2, 2, 2, 1, f, 2, f, 2, 0, g, 2),
	} {
		if err == nil || !strings.Contains(err.Error(), "cpu:") {
			t.Errorf("%s: err = %v, want a cpu: error", name, err)
		}
	}
}

func fmtAny(x any) string { return fmt.Sprint(x) }

func TestCopyRows2D(t *testing.T) {
	b := New()
	src := backend.HostF32([]float32{0, 1, 2, 10, 11, 12, 20, 21, 22})
	dst := backend.HostF32(make([]float32, 8))
	// rows 2 and 0 of src (3 wide) into rows 1 and 3 of dst (2 wide), two columns each
	if err := b.CopyRows(dst, []int64{1, 3}, 2, src, []int64{2, 0}, 3, 2, 2); err != nil {
		t.Fatal(err)
	}
	want := []float32{0, 0, 20, 21, 0, 0, 0, 1}
	for i, v := range dst.F32() {
		if v != want[i] {
			t.Fatalf("CopyRows = %v, want %v", dst.F32(), want)
		}
	}
	if err := b.CopyRows(dst, []int64{4}, 2, src, nil, 3, 1, 2); err == nil {
		t.Fatalf("a destination row past the end must be refused")
	}
	// Copy2D then Add2D: the split of a fused projection and the merge of its gradient
	q := backend.HostF32(make([]float32, 3*2))
	if err := b.Copy2D(q, 2, src.From(1), 3, 3, 2); err != nil {
		t.Fatal(err)
	}
	if err := b.Add2D(src.From(1), 3, q, 2, 3, 2); err != nil {
		t.Fatal(err)
	}
	want = []float32{0, 2, 4, 10, 22, 24, 20, 42, 44}
	for i, v := range src.F32() {
		if v != want[i] {
			t.Fatalf("Copy2D+Add2D = %v, want %v", src.F32(), want)
		}
	}
}

func TestDropoutOps(t *testing.T) {
	b := New()
	const n, p = 1000, float32(0.3)
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i + 1)
	}
	out := make([]float32, n)
	if err := b.DropoutForward(backend.HostF32(out), backend.HostF32(x), n, 7, p); err != nil {
		t.Fatal(err)
	}
	dx := make([]float32, n)
	for i := range dx {
		dx[i] = 1
	}
	if err := b.DropoutBackward(backend.HostF32(dx), backend.HostF32(x), n, 7, p); err != nil {
		t.Fatal(err)
	}
	scale := 1 / (1 - p)
	for i := range x {
		keep := backend.DropoutKeep(7, i, p)
		wantOut, wantDx := float32(0), float32(1)
		if keep {
			wantOut, wantDx = x[i]*scale, 1+x[i]*scale
		}
		if out[i] != wantOut || dx[i] != wantDx {
			t.Fatalf("element %d (kept %v): out %g dx %g, want %g %g", i, keep, out[i], dx[i], wantOut, wantDx)
		}
	}
}

func TestDigitProbs(t *testing.T) {
	b := New()
	logits := []float32{5, 1, 2, 3, -1, 0}            // two rows of vocab 3
	ids, values := []int32{0, 2, 1}, []int32{7, 7, 3} // tokens 0 and 2 are both "7"
	out := make([]float32, 20)
	if err := b.DigitProbs(backend.HostF32(out), backend.HostF32(logits), backend.HostI32(ids), backend.HostI32(values), 2, 3); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 2; r++ {
		row := logits[r*3 : r*3+3]
		z := math.Exp(float64(row[0])) + math.Exp(float64(row[1])) + math.Exp(float64(row[2]))
		p7 := (math.Exp(float64(row[0])) + math.Exp(float64(row[2]))) / z
		p3 := math.Exp(float64(row[1])) / z
		if math.Abs(float64(out[r*10+7])-p7) > 1e-6 || math.Abs(float64(out[r*10+3])-p3) > 1e-6 || out[r*10] != 0 {
			t.Fatalf("row %d: %v, want p(7)=%g p(3)=%g", r, out[r*10:r*10+10], p7, p3)
		}
	}
}

func TestSampleGreedyAndTruncated(t *testing.T) {
	b := New()
	logits := []float32{1, 3, 3, 0, 2, 0.5, 0.5, 0.4} // rows of 4: a tie for the best at 1, 2
	tok, lp, err := b.Sample(backend.HostF32(logits), []float64{0.9, 0.9}, 2, 4, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if tok[0] != 1 || tok[1] != 0 {
		t.Fatalf("greedy = %v, want [1 0] (lowest id on ties)", tok)
	}
	z := math.Log(math.Exp(1) + 2*math.Exp(3) + 1)
	if math.Abs(float64(lp[0])-(3-z)) > 1e-6 {
		t.Fatalf("greedy log-prob %g, want %g", lp[0], 3-z)
	}
	// top-k 1 keeps only the best token whatever the draw
	for _, u := range []float64{0, 0.5, 0.999} {
		tok, _, _ = b.Sample(backend.HostF32(logits[4:]), []float64{u}, 1, 4, 1.5, 1, 0)
		if tok[0] != 0 {
			t.Fatalf("top-k 1 with u=%g drew %d", u, tok[0])
		}
	}
	if _, _, err := b.Sample(backend.HostF32(nil), []float64{0.5}, 1, 0, 1, 0, 0); err == nil {
		t.Fatal("sampling from a vocabulary of 0 must be refused")
	}
	// without truncation, u walks the cumulative distribution
	tok, _, _ = b.Sample(backend.HostF32(logits[:4]), []float64{0.999999}, 1, 4, 1, 0, 0)
	if tok[0] != 3 {
		t.Fatalf("u near 1 drew %d, want the last token", tok[0])
	}
}

func TestAdamWMatchesFormula(t *testing.T) {
	b := New()
	data, grad := []float32{1, -2}, []float32{0.5, -0.25}
	m, v := make([]float32, 2), make([]float32, 2)
	p := backend.OptParam{Data: backend.HostF32(data), Grad: backend.HostF32(grad), M: backend.HostF32(m), V: backend.HostF32(v)}
	const lr, b1, b2, eps, wd = 0.1, 0.9, 0.999, 1e-8, 0.01
	if err := b.AdamW([]backend.OptParam{p}, lr, b1, b2, eps, wd, 1); err != nil {
		t.Fatal(err)
	}
	for i, d0 := range []float64{1, -2} {
		g := float64([]float32{0.5, -0.25}[i])
		mh, vh := (1-b1)*g/(1-b1), (1-b2)*g*g/(1-b2)
		want := d0*(1-lr*wd) - lr*mh/(math.Sqrt(vh)+eps)
		if math.Abs(float64(data[i])-want) > 1e-6 {
			t.Errorf("param %d: %g, want %g", i, data[i], want)
		}
	}
	n, err := b.GradNorm([]backend.Buf{p.Grad, backend.HostF32([]float32{1})})
	if err != nil || math.Abs(n-math.Sqrt(0.25+0.0625+1)) > 1e-12 {
		t.Fatalf("GradNorm = %g, %v", n, err)
	}
	if err := b.ScaleAll([]backend.Buf{p.Grad}, 2); err != nil || grad[0] != 1 || grad[1] != -0.5 {
		t.Fatalf("ScaleAll = %v, %v", grad, err)
	}
}

// AttentionRows over a cache laid out by sequence must equal AttentionForward over spans of
// one row each.
func TestAttentionRowsMatchesSpans(t *testing.T) {
	b := New()
	at := backend.Attention{Heads: 6, KVHeads: 2, HeadDim: 4, Scale: 0.5, Window: 3}
	kw, qw := at.KVHeads*at.HeadDim, at.Heads*at.HeadDim
	const seqs, capacity = 3, 7
	stride := capacity * kw
	k, v := randSlice(seqs*stride, 1), randSlice(seqs*stride, 2)
	seq, pos := []int32{2, 0, 1, 2}, []int32{6, 0, 4, 3}
	q := randSlice(len(seq)*qw, 3)
	got := make([]float32, len(seq)*qw)
	err := b.AttentionRows(backend.HostF32(got), backend.HostF32(q), backend.HostF32(k), backend.HostF32(v),
		backend.HostI32(seq), backend.HostI32(pos), len(seq), at, stride)
	if err != nil {
		t.Fatal(err)
	}
	var sp []backend.Span
	for r := range seq {
		s, p := int(seq[r]), int(pos[r])
		kv := backend.HostF32(k).Slice(s*stride, (p+1)*kw)
		vv := backend.HostF32(v).Slice(s*stride, (p+1)*kw)
		sp = append(sp, backend.Span{Row: r, N: 1, Pos: p, K: kv, V: vv})
	}
	want := make([]float32, len(got))
	if err := b.AttentionForward(backend.HostF32(want), backend.Buf{}, backend.HostF32(q), sp, at); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > 1e-6 {
			t.Fatalf("element %d: %g, want %g", i, got[i], want[i])
		}
	}
	if err := b.AttentionRows(backend.HostF32(got), backend.HostF32(q), backend.HostF32(k), backend.HostF32(v),
		backend.HostI32([]int32{3}), backend.HostI32([]int32{0}), 1, at, stride); err == nil {
		t.Fatalf("a sequence outside the cache must be refused")
	}
	// A head of no values is refused as AttentionForward's spans and the CUDA backend refuse
	// it (it took the one-row kernels' path, whose bounds check panicked on index -1).
	bad := at
	bad.HeadDim = 0
	if err := b.AttentionRows(backend.HostF32(got), backend.HostF32(q), backend.HostF32(k), backend.HostF32(v),
		backend.HostI32(seq), backend.HostI32(pos), len(seq), bad, stride); err == nil {
		t.Fatalf("a head of 0 values must be refused")
	}
}

func randSlice(n int, seed uint64) []float32 {
	x := make([]float32, n)
	s := seed*0x9E3779B97F4A7C15 + 1
	for i := range x {
		s = s*6364136223846793005 + 1442695040888963407
		x[i] = float32(int32(s>>33))/(1<<30) - 1
	}
	return x
}
