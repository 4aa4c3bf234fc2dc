package cuda

// The declared costs of the decode step's kernels (kernels/step.cu), beside the others'
// in costs.go.
func init() {
	appendKV := func(a *costArgs) Count {
		n := 2 * int64(a.d.grid[0]) * a.i("width") * a.sz("k") // k and v, each row once
		return Count{Read: n + 2*4*int64(a.d.grid[0]), Written: n}
	}
	// q4_linears: the weights' codes and scales (o.hint) once, x, the outputs (feats of
	// them a row), their biases and residuals, the LoRA terms' xa and B
	q4Linear := func(a *costArgs) Count {
		feats, cols, m, rank := a.i("feats"), a.i("cols"), a.i("m"), a.i("rank")
		c := Count{Read: a.hint + m*cols*2 + feats*a.sz("bias0") + m*feats*a.sz("res0"), Written: m * feats * a.sz("y0"), Flops: 2 * m * feats * cols}
		if a.sz("xa") > 0 {
			c.Read += m*rank*2 + feats*rank*2
			c.Flops += 2 * m * feats * rank
		}
		return c
	}
	kernelCosts["gemm_nt_few"] = func(a *costArgs) Count {
		m, n, k := a.i("m"), a.i("n"), a.i("k")
		size := func(flag string) int64 { return 2 + 2*a.i(flag) } // bf16 or float32
		c := Count{Read: m*k*size("aF32") + n*k*size("bF32"), Written: m * n * size("cF32"), Flops: 2 * m * n * k}
		if a.f("beta") != 0 {
			c.Read += m * n * size("cF32")
		}
		return c
	}
	// the tiled draw: the logits read once by each launch (the second reads them again to
	// find the tile holding the uniform: a tile, not counted)
	kernelCosts["sample_tiles"] = func(a *costArgs) Count {
		e := int64(a.d.grid[1]) * a.i("vocab")
		return Count{Read: 4 * e, Written: 12*int64(a.d.grid[0])*int64(a.d.grid[1]) + 4*int64(a.d.grid[1]), Flops: 2 * e}
	}
	kernelCosts["sample_tiles_draw"] = func(a *costArgs) Count {
		rows, tiles := int64(a.d.grid[1]), int64(a.d.grid[0])
		e := rows * a.i("vocab")
		return Count{Read: 4*e + 12*tiles*tiles*rows + 8*rows, Written: 8*tiles*rows + 8*rows, Flops: 2 * e}
	}
	kernelCosts["append_kv"], kernelCosts["append_kv_f32"] = appendKV, appendKV
	kernelCosts["q4_linears_bf16"], kernelCosts["q4_linears_f32"] = q4Linear, q4Linear
	kernelCosts["q4_linears_tc_bf16"], kernelCosts["q4_linears_tc_f32"] = q4Linear, q4Linear
	kernelCosts["scale_f32"] = func(a *costArgs) Count { return a.elems(a.i("n"), 1, true) }
	kernelCosts["advance_pos"] = func(a *costArgs) Count { return a.elems(a.i("rows"), 1, true) }
}
