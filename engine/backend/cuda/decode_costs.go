package cuda

// The declared costs of the decode step's kernels (kernels/step.cu), beside the others'
// in costs.go.
func init() {
	appendKV := func(a *costArgs) Count {
		n := 2 * int64(a.d.grid[0]) * a.i("width") * a.sz("k") // k and v, each row once
		return Count{Read: n + 2*4*int64(a.d.grid[0]), Written: n}
	}
	q4Linear := func(a *costArgs) Count {
		rows, cols, m, rank := a.i("rows"), a.i("cols"), a.i("m"), a.i("rank")
		w, out := rows*cols, a.sz("y")
		c := Count{Read: w/2 + scales(a, w) + m*cols*2 + rows*a.sz("bias") + m*rows*a.sz("res"), Written: m * rows * out, Flops: 2 * m * w}
		if a.sz("xa") > 0 {
			c.Read += m*rank*2 + rows*rank*2
			c.Flops += 2 * m * rows * rank
		}
		return c
	}
	kernelCosts["gemm_nt_few"] = func(a *costArgs) Count {
		m, n, k := a.i("m"), int64(a.d.grid[0]), a.i("k")
		size := func(flag string) int64 { return 2 + 2*a.i(flag) } // bf16 or float32
		c := Count{Read: m*k*size("aF32") + n*k*size("bF32"), Written: m * n * size("cF32"), Flops: 2 * m * n * k}
		if a.f("beta") != 0 {
			c.Read += m * n * size("cF32")
		}
		return c
	}
	kernelCosts["append_kv"], kernelCosts["append_kv_f32"] = appendKV, appendKV
	kernelCosts["q4_linear_bf16"], kernelCosts["q4_linear_f32"] = q4Linear, q4Linear
	kernelCosts["q4_linear_tc_bf16"], kernelCosts["q4_linear_tc_f32"] = q4Linear, q4Linear
	kernelCosts["scale_f32"] = func(a *costArgs) Count { return a.elems(a.i("n"), 1, true) }
	kernelCosts["advance_pos"] = func(a *costArgs) Count { return a.elems(a.i("rows"), 1, true) }
}
