package cuda

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// refSample is the device's sampling rule in float64 on the host: the kept set as the CPU
// chooses it (temperature, top-k with ties to the lowest ids, top-p over the top-k
// renormalised), then the first id, in id order, where the kept mass passes u·kept. It
// returns the token and how close u fell to a boundary (relative), to skip ambiguous draws.
func refSample(x []float32, invT float64, topK int, topP float64, u float64) (int, float64) {
	V := len(x)
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, float64(v))
	}
	w := make([]float64, V)
	for i, v := range x {
		w[i] = math.Exp((float64(v) - m) * invT)
	}
	idx := make([]int, V)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return x[idx[a]] > x[idx[b]] })
	k := V
	if topK > 0 && topK < V {
		k = topK
	}
	idx = idx[:k]
	if topP > 0 && topP < 1 {
		var tot float64
		for _, i := range idx {
			tot += w[i]
		}
		var c float64
		for n, i := range idx {
			c += w[i] / tot
			if c >= topP {
				idx = idx[:n+1]
				break
			}
		}
	}
	keep := make([]bool, V)
	var kept float64
	for _, i := range idx {
		keep[i] = true
		kept += w[i]
	}
	target := u * kept
	var c float64
	for i := 0; i < V; i++ {
		if !keep[i] {
			continue
		}
		prev := c
		c += w[i]
		if target < c {
			return i, math.Min(target-prev, c-target) / kept
		}
	}
	return idx[len(idx)-1], 0
}

func TestKernelSample(t *testing.T) {
	d := device(t)
	rng := rand.New(rand.NewPCG(19, 20))
	rows, vocab := 6, 3001
	x := randn(rng, rows*vocab, 2)
	// ties at the top and around a top-k boundary
	for j := 0; j < 5; j++ {
		x[1*vocab+100+j*7] = 9
	}
	for j := 0; j < 40; j++ {
		x[2*vocab+j*31] = 4.5
	}
	// the tiled draw's tiles are 1024 ids: a tie at the top in a later tile, and one across
	// two later tiles (the lowest id wins)
	x[1*vocab+2900] = 9
	x[3*vocab+2200], x[3*vocab+1500] = 12, 12
	xp := put(t, d, x)
	tok, lp := allocT[int32](t, d, rows), allocT[float32](t, d, rows)

	lse := func(r int, invT float64) float64 {
		m := math.Inf(-1)
		for _, v := range x[r*vocab : (r+1)*vocab] {
			m = math.Max(m, float64(v)*invT)
		}
		var s float64
		for _, v := range x[r*vocab : (r+1)*vocab] {
			s += math.Exp(float64(v)*invT - m)
		}
		return m + math.Log(s)
	}

	// greedy: the arg max (lowest id among equals), log-prob under T = 1
	us := put(t, d, make([]float64, rows))
	run(t, d, func(o *owner) error { return o.sample(tok, lp, xp, us, rows, vocab, 1, true, 0, 0, Penalties{}) })
	gt, gl := get(t, d, tok, rows), get(t, d, lp, rows)
	for r := 0; r < rows; r++ {
		best := 0
		row := x[r*vocab : (r+1)*vocab]
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if int(gt[r]) != best {
			t.Errorf("greedy row %d: token %d, want %d", r, gt[r], best)
		}
		if want := float64(row[best]) - lse(r, 1); math.Abs(float64(gl[r])-want) > 1e-4 {
			t.Errorf("greedy row %d: log-prob %v, want %v", r, gl[r], want)
		}
	}

	checked := 0
	for _, c := range []struct {
		temp float64
		k    int
		p    float64
	}{{1, 0, 0}, {0.7, 0, 0}, {1, 50, 0}, {1, 3, 0}, {1, 20, 0}, {1, 0, 0.9}, {0.8, 40, 0.5}, {1, 0, 0.3}} {
		for rep := 0; rep < 3; rep++ {
			u := make([]float64, rows)
			for i := range u {
				u[i] = rng.Float64()
			}
			if rep == 0 {
				u[0], u[1] = 0, 0.9999999
			}
			up := put(t, d, u)
			run(t, d, func(o *owner) error {
				return o.sample(tok, lp, xp, up, rows, vocab, float32(1/c.temp), false, c.k, float32(c.p), Penalties{})
			})
			st, sl := get(t, d, tok, rows), get(t, d, lp, rows)
			for r := 0; r < rows; r++ {
				want, margin := refSample(x[r*vocab:(r+1)*vocab], 1/c.temp, c.k, c.p, u[r])
				if margin < 1e-5 {
					continue // within rounding of a boundary
				}
				checked++
				if int(st[r]) != want {
					t.Errorf("T %g top-k %d top-p %g row %d u %.6f: token %d, want %d", c.temp, c.k, c.p, r, u[r], st[r], want)
					continue
				}
				if lw := float64(x[r*vocab+want])/c.temp - lse(r, 1/c.temp); math.Abs(float64(sl[r])-lw) > 1e-4 {
					t.Errorf("row %d: log-prob %v, want %v", r, sl[r], lw)
				}
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d draws checked", checked)
	}
}
