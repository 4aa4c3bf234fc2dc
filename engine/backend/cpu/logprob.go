package cpu

import "math"

// LogProbForward computes, per row of logits[rows,vocab], the log-softmax of
// logits·invTemp at the row's target: logp[r] = log p(targets[r]). Cross-entropy is its
// negation. When entropy is not nil it also receives −Σ p·log p of the row's distribution.
// Rows whose target is negative get logp 0. Sums run in float64 after subtracting the
// row maximum.
func LogProbForward(logp, entropy, logits []float32, targets []int32, rows, vocab int, invTemp float32) {
	For(rows, grainFor(vocab)*2, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := logits[r*vocab : (r+1)*vocab]
			mx, lse := logSumExp(row, invTemp)
			if t := targets[r]; t >= 0 {
				logp[r] = float32(float64(row[t]*invTemp-mx) - lse)
			} else {
				logp[r] = 0
			}
			if entropy != nil {
				// H = lse − Σ p·z with z = x·invTemp − max
				var spz float64
				var buf [expChunk]float32
				for c := 0; c < len(row); c += expChunk {
					part := row[c:min(c+expChunk, len(row))]
					p := buf[:len(part)]
					expAffine(p, part, invTemp, -mx, -float32(lse))
					for j, v := range part {
						spz += float64(p[j] * (v*invTemp - mx))
					}
				}
				entropy[r] = float32(lse - spz)
			}
		}
	})
}

// LogProbBackward accumulates, for each row with a target,
// dlogits[r] += dlogp[r]·invTemp·(onehot(targets[r]) − softmax(logits[r]·invTemp)).
func LogProbBackward(dlogits, dlogp, logits []float32, targets []int32, rows, vocab int, invTemp float32) {
	For(rows, grainFor(vocab)*2, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			t := targets[r]
			if t < 0 || dlogp[r] == 0 {
				continue
			}
			row, d := logits[r*vocab:(r+1)*vocab], dlogits[r*vocab:(r+1)*vocab]
			mx, lse := logSumExp(row, invTemp)
			g := dlogp[r] * invTemp
			var buf [expChunk]float32
			for c := 0; c < len(row); c += expChunk {
				part := row[c:min(c+expChunk, len(row))]
				p := buf[:len(part)]
				expAffine(p, part, invTemp, -mx, -float32(lse))
				dc := d[c : c+len(p)]
				for j, e := range p {
					dc[j] -= g * e
				}
			}
			d[t] += g
		}
	})
}

// LogSoftmax sets out = log softmax(x·invTemp) for one row.
func LogSoftmax(out, x []float32, invTemp float32) {
	mx, lse := logSumExp(x, invTemp)
	for j, v := range x {
		out[j] = float32(float64(v*invTemp-mx) - lse)
	}
}

// logSumExp returns the row maximum m of x·invTemp and log Σ exp(x·invTemp − m).
func logSumExp(x []float32, invTemp float32) (float32, float64) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v*invTemp)
	}
	var s float64
	var buf [expChunk]float32
	for c := 0; c < len(x); c += expChunk {
		part := x[c:min(c+expChunk, len(x))]
		p := buf[:len(part)]
		expAffine(p, part, invTemp, -mx, 0)
		for _, e := range p {
			s += float64(e)
		}
	}
	return mx, math.Log(s)
}
