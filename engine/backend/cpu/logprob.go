package cpu

// LogProbForward computes, per row of logits[rows,vocab], the log-softmax of
// logits·invTemp at the row's target: logp[r] = log p(targets[r]). Cross-entropy is its
// negation. When entropy is not nil it also receives −Σ p·log p of the row's distribution.
// Rows whose target is negative get logp 0. Sums run in float64 after subtracting the
// row maximum.
func LogProbForward(logp, entropy, logits []float32, targets []int32, rows, vocab int, invTemp float32) {
	For(rows, grainFor(vocab)*2, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := logits[r*vocab : (r+1)*vocab]
			mx, lse := logSumExp(row, invTemp, false) // For splits the rows
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

// LogProbBackward accumulates into dlogits the gradient of Σ_r dlogp[r]·logp[r] +
// dentropy[r]·H[r]: for each row with a target dlogp[r]·invTemp·(onehot(targets[r]) − p), and,
// when dentropy is not nil, for every row −dentropy[r]·invTemp·p⊙(log p + H), where
// p = softmax(logits[r]·invTemp) and H = −Σ p·log p is its entropy (∂H/∂z = −p⊙(log p + H)).
func LogProbBackward(dlogits, dlogp, dentropy, logits []float32, targets []int32, rows, vocab int, invTemp float32) {
	For(rows, grainFor(vocab)*2, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			t := targets[r]
			g := float32(0)
			if t >= 0 {
				g = dlogp[r] * invTemp
			}
			ge := float32(0)
			if dentropy != nil {
				ge = dentropy[r] * invTemp
			}
			if g == 0 && ge == 0 {
				continue
			}
			row, d := logits[r*vocab:(r+1)*vocab], dlogits[r*vocab:(r+1)*vocab]
			mx, lse := logSumExp(row, invTemp, false) // For splits the rows
			var buf [expChunk]float32
			if ge == 0 {
				for c := 0; c < len(row); c += expChunk {
					part := row[c:min(c+expChunk, len(row))]
					p := buf[:len(part)]
					expAffine(p, part, invTemp, -mx, -float32(lse))
					dc := d[c : c+len(p)]
					for j, e := range p {
						dc[j] -= g * e
					}
				}
			} else {
				// log p_j = z_j − lse with z = x·invTemp − max; H = lse − Σ p·z.
				var spz float64
				for c := 0; c < len(row); c += expChunk {
					part := row[c:min(c+expChunk, len(row))]
					p := buf[:len(part)]
					expAffine(p, part, invTemp, -mx, -float32(lse))
					for j, v := range part {
						spz += float64(p[j] * (v*invTemp - mx))
					}
				}
				h := lse - spz
				for c := 0; c < len(row); c += expChunk {
					part := row[c:min(c+expChunk, len(row))]
					p := buf[:len(part)]
					expAffine(p, part, invTemp, -mx, -float32(lse))
					dc := d[c : c+len(p)]
					for j, e := range p {
						lp := float64(part[j]*invTemp-mx) - lse
						dc[j] -= e * (g + ge*float32(lp+h))
					}
				}
			}
			if t >= 0 {
				d[t] += g
			}
		}
	})
}

// LogSoftmax sets out = log softmax(x·invTemp) for one row, a long row on the cores.
func LogSoftmax(out, x []float32, invTemp float32) {
	logSoftmax(out, x, invTemp, nil)
}

// logSoftmax is LogSoftmax keeping each chunk's sum of exp(x·invTemp − max) in parts (grown
// to the chunks), which it returns.
func logSoftmax(out, x []float32, invTemp float32, parts []float64) []float64 {
	mx := maxOf(x, invTemp, true).mx
	lse, parts := lseParts(x, invTemp, mx, true, parts)
	eachPiece(len(x), 4*mapPiece, true, func(_, lo, hi int) {
		for j, v := range x[lo:hi] {
			out[lo+j] = float32(float64(v*invTemp-mx) - lse)
		}
	})
	return parts
}
