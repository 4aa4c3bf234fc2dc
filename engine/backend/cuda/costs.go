package cuda

import "math"

// Each kernel's declared cost: the bytes of device memory it reads and writes and the
// floating-point operations it does, from the shape arguments of its launch (read back
// from the launch's parameter slots by name; see kernelParams). Counts are of the data a
// kernel must touch once (what a bandwidth bound needs), not of cache traffic. A volume
// that lives only in device memory (the tensors of a multi-tensor table, the keys of a
// ragged batch) comes from the launcher's o.hint, set just before the launch.

// kparam is one kernel parameter as kernelParams lists it.
type kparam struct {
	name string
	kind pkind
	size int // the pointee's size in bytes, or the scalar's
}

type pkind uint8

const (
	pIn    pkind = iota // a pointer the kernel only reads
	pOut                // a pointer the kernel writes (and may read)
	pInt                // a signed integer
	pUint               // an unsigned integer (seeds, thresholds)
	pFloat              // float or double
)

// costArgs reads a launch's arguments by parameter name.
type costArgs struct {
	params []kparam
	slots  *[maxKernelArgs]uint64
	d      dims
	hint   int64
	attn   attnVolume
	bad    string // a name the cost asked for that the kernel does not have
}

func (a *costArgs) find(name string) int {
	for i, p := range a.params {
		if p.name == name {
			return i
		}
	}
	if a.bad == "" {
		a.bad = name
	}
	return -1
}

// i is an integer argument (widened: int32 parameters sign-extended).
func (a *costArgs) i(name string) int64 {
	k := a.find(name)
	if k < 0 {
		return 0
	}
	v := a.slots[k]
	if a.params[k].kind == pInt && a.params[k].size == 4 {
		return int64(int32(uint32(v)))
	}
	return int64(v)
}

// f is a float argument.
func (a *costArgs) f(name string) float64 {
	k := a.find(name)
	if k < 0 {
		return 0
	}
	if a.params[k].size == 8 {
		return math.Float64frombits(a.slots[k])
	}
	return float64(math.Float32frombits(uint32(a.slots[k])))
}

// sz is pointer name's element size, 0 when the launch passed none (an absent operand).
func (a *costArgs) sz(name string) int64 {
	k := a.find(name)
	if k < 0 || a.slots[k] == 0 {
		return 0
	}
	return int64(a.params[k].size)
}

// szOpt is sz for a parameter that only some of the kernels sharing a cost have.
func (a *costArgs) szOpt(name string) int64 {
	for _, p := range a.params {
		if p.name == name {
			return a.sz(name)
		}
	}
	return 0
}

// elems is an element-wise kernel over n values: every pointer read (and every written
// one written; accumulating kernels read it too) once per value.
func (a *costArgs) elems(n int64, flopsEach int64, accumulates bool) Count {
	var c Count
	for k, p := range a.params {
		if a.slots[k] == 0 {
			continue
		}
		switch p.kind {
		case pIn:
			c.Read += n * int64(p.size)
		case pOut:
			c.Written += n * int64(p.size)
			if accumulates {
				c.Read += n * int64(p.size)
			}
		}
	}
	c.Flops = n * flopsEach
	return c
}

type costFunc func(a *costArgs) Count

// The three tensor-core attention kernels (kernels/attention.cu).
const (
	attnFwd = iota
	attnDq
	attnDkv
)

// attnTC is the cost of a tensor-core attention kernel: its m16n8k16 products (S, and P·V
// as P_hi·V + P_lo·V, in the forward; S and dP twice per block of dq's dims and dS·K in attn_bwd_dq; S and dP per
// block of dK/dV dims, dV and dK in attn_bwd_dkv), each 2·16·16·dims flops a tile pair and
// head, and the tensors it reads and writes once.
func attnTC(kind int) costFunc {
	return func(a *costArgs) Count {
		heads, kvh, hd := a.i("heads"), a.i("kvHeads"), a.i("hd")
		v := a.attn
		D := int64(tcDims(int(hd)))
		tile := 2 * tcTile * tcTile * D * heads // one product over every head
		q, kv := v.rows*heads*hd*2, v.keys*kvh*hd*2
		z := int64(ceilDiv(int(hd), tcGradDims(int(hd))))
		switch kind {
		case attnFwd:
			return Count{Read: q + 2*kv, Written: q, Flops: 3 * v.pairs * tile}
		case attnDq:
			return Count{Read: 3*q + 2*kv, Written: q + v.rows*heads*8, Flops: (4*z + 1) * v.pairs * tile}
		}
		return Count{Read: 2*q + v.rows*heads*8 + 4*kv, Written: 2 * kv, Flops: (2*z + 2) * v.dkvPairs * tile}
	}
}

// attnRows is attn_rows*' cost: q and out once, every row's keys and values (a.hint: the
// rows' keys, summed) once per key/value head.
func attnRows(a *costArgs) Count {
	rows, heads, kvh, hd := int64(a.d.grid[0]), a.i("heads"), a.i("kvHeads"), a.i("hd")
	keys := a.hint
	return Count{Read: rows*heads*hd*2 + keys*kvh*hd*2*2, Written: rows * heads * hd * 2, Flops: 4 * keys * heads * hd}
}

// kernelCosts declares every kernel's cost (a test checks that none is missing).
var kernelCosts = map[string]costFunc{
	"attn_softmax_forward": func(a *costArgs) Count {
		e := a.i("heads") * a.i("n") * a.i("L")
		return Count{Read: 4 * e, Written: 4 * e, Flops: 5 * e}
	},
	"attn_softmax_backward_scores": func(a *costArgs) Count {
		e := a.i("heads") * a.i("n") * a.i("L")
		return Count{Read: 8 * e, Written: 2 * e * (1 + min(1, a.sz("probs")/2)), Flops: 6 * e}
	},
	"attn_rows64": attnRows, "attn_rows128": attnRows, "attn_rows256": attnRows,
	// the tensor-core kernels: a.attn's tile pairs (each a 16×16 tile of a head's scores) times
	// the products each forms, on tcDims(hd) padded dims; q, k, v and the gradients once
	"attn_fwd_tc64": attnTC(attnFwd), "attn_fwd_tc128": attnTC(attnFwd), "attn_fwd_tc256": attnTC(attnFwd),
	"attn_bwd_dq_tc64": attnTC(attnDq), "attn_bwd_dq_tc128": attnTC(attnDq), "attn_bwd_dq_tc256": attnTC(attnDq),
	"attn_bwd_dkv_tc64": attnTC(attnDkv), "attn_bwd_dkv_tc128": attnTC(attnDkv), "attn_bwd_dkv_tc256": attnTC(attnDkv),
	"attn_expand_kv": expandKV, "attn_expand_kv_f32": expandKV,
	// hint: dB's products (Σ out·r·rows); the rest from the shape
	"lora_grads_bf16": loraGrads(2), "lora_grads_f32": loraGrads(4),
	// hint: dA's products (rows·width); each is paired with one of dx's, rows·in·width in all
	"lora_in_bf16": loraIn(2), "lora_in_f32": loraIn(4),
	"attn_reduce_kv": func(a *costArgs) Count {
		L, hd := a.i("L"), a.i("hd")
		return Count{Read: 2 * L * a.i("heads") * hd, Written: 2 * L * a.i("kvHeads") * hd, Flops: L * a.i("heads") * hd}
	},
	"dropout_forward": elementwise(4, false), "dropout_forward_f32": elementwise(4, false),
	"dropout_backward": elementwise(4, true), "dropout_backward_f32": elementwise(4, true),
	"cast_f32_bf16": elementwise(0, false), "cast_bf16_f32": elementwise(0, false),
	"residual_forward": elementwise(1, false), "residual_forward_bf16": elementwise(1, false), "residual_forward_f32": elementwise(1, false),
	"add_scaled_f32": elementwise(2, true), "add_scaled_bf16": elementwise(2, true),
	"add_scaled_bf16_f32": elementwise(2, true), "add_scaled_f32_bf16": elementwise(2, true),
	"gelu_forward": elementwise(10, false), "gelu_forward_f32": elementwise(10, false),
	"gelu_backward": elementwise(16, true), "gelu_backward_f32": elementwise(16, true),
	"swiglu_forward": elementwise(6, false), "swiglu_forward_f32": elementwise(6, false),
	"swiglu_backward": elementwise(10, true), "swiglu_backward_f32": elementwise(10, true),
	"geglu_forward": elementwise(12, false), "geglu_forward_f32": elementwise(12, false),
	"geglu_backward": elementwise(18, true), "geglu_backward_f32": elementwise(18, true),
	"softcap_forward_f32": elementwise(4, false), "softcap_backward_f32": elementwise(4, true),
	"softcap_uncap_f32": elementwise(4, false), "softcap_uncap_bf16": elementwise(4, false),
	"bias_forward": biasForward, "bias_forward_f32": biasForward,
	"bias_backward": biasBackward, "bias_backward_f32": biasBackward,
	"copy2d_bf16": copy2d(false), "copy2d_f32": copy2d(false), "cast2d_f32_bf16": copy2d(false),
	"add2d_bf16": copy2d(true), "add2d_f32": copy2d(true),
	"copy_rows_bf16": copyRows, "copy_rows_f32": copyRows,
	"embedding_forward": embedding, "embedding_forward_bf16": embedding,
	"embedding_forward_f32tab": embedding, "embedding_forward_bf16_f32tab": embedding,
	"embedding_backward": func(a *costArgs) Count {
		e := a.i("rows") * a.i("dim")
		tables := 4 + a.sz("dwpe")
		return Count{Read: 4*e + e*tables, Written: e * tables, Flops: e * (1 + min(1, a.sz("dwpe")/4))}
	},
	"logprob_forward": func(a *costArgs) Count {
		e := a.i("rows") * a.i("vocab")
		return Count{Read: 4*e + 4*a.i("rows"), Written: 4 * a.i("rows") * (1 + min(1, a.sz("entropy")/4)), Flops: 5 * e}
	},
	"logprob_backward": logprobBack, "logprob_backward_f32": logprobBack,
	"digit_probs": func(a *costArgs) Count {
		// each row reads its n digit logits (gathered: a sector each) 12 times
		r, n := a.i("rows"), a.i("n")
		return Count{Read: 8*n + r*n*32, Written: 40 * r, Flops: 12 * r * n}
	},
	"rmsnorm_forward": normForward, "rmsnorm_forward_f32": normForward, "rmsnorm_forward_bf16": normForward,
	"layernorm_forward": normForward, "layernorm_forward_f32": normForward, "layernorm_forward_bf16": normForward,
	"rmsnorm_backward": normBackward, "rmsnorm_backward_bf16": normBackward,
	"layernorm_backward": normBackward, "layernorm_backward_bf16": normBackward,
	"sum_f32": func(a *costArgs) Count { return Count{Read: 4 * a.i("n"), Written: 4, Flops: a.i("n")} },
	// the tables' tensors: o.hint is their elements, summed
	"adamw_multi": func(a *costArgs) Count { return Count{Read: 16 * a.hint, Written: 12 * a.hint, Flops: 12 * a.hint} },
	"sumsq_multi": func(a *costArgs) Count {
		return Count{Read: 4 * a.hint, Written: 4 * int64(a.d.grid[0]) * int64(a.d.grid[1]), Flops: 2 * a.hint}
	},
	"scale_multi":     func(a *costArgs) Count { return Count{Read: 4 * a.hint, Written: 4 * a.hint, Flops: a.hint} },
	"cast_multi_bf16": func(a *costArgs) Count { return Count{Read: 4 * a.hint, Written: 2 * a.hint} },
	"dequant4_bf16":   dequant, "dequant4_f32": dequant,
	"gemv4_bf16": func(a *costArgs) Count {
		rows, cols, m := a.i("rows"), a.i("cols"), a.i("m")
		w := rows * cols
		return Count{Read: w/2 + scales(a, w) + m*cols*2, Written: m * rows * 2, Flops: 2 * m * w}
	},
	"rope_forward": rope, "rope_forward_f32": rope,
	"sample_rows": func(a *costArgs) Count {
		// a pass for the maximum, one for the sum, one to pick (top-k/top-p add sorting
		// work in shared memory, not memory traffic)
		e := a.i("rows") * a.i("vocab")
		// with the repetition penalty's bits (counted as present whenever given): read with
		// every logit, and two more passes over the raw row for its log-sum-exp
		pen := min(1, a.sz("seen")/4)
		seen := pen * a.i("rows") * a.i("words") * 4
		return Count{Read: (3+2*pen)*4*e + 8*a.i("rows") + 3*seen, Written: 8*a.i("rows") + seen/max(1, a.i("words")), Flops: (4 + 2*pen) * e}
	},
}

func elementwise(flopsEach int64, accumulates bool) costFunc {
	return func(a *costArgs) Count { return a.elems(a.i("n"), flopsEach, accumulates) }
}

func expandKV(a *costArgs) Count {
	L, hd := a.i("L"), a.i("hd")
	return Count{Read: 2 * L * a.i("kvHeads") * hd, Written: L * a.i("heads") * hd * a.sz("dst")}
}

func biasForward(a *costArgs) Count {
	e := a.i("rows") * a.i("cols")
	return Count{Read: e*a.sz("out") + 4*a.i("cols"), Written: e * a.sz("out"), Flops: e}
}

func biasBackward(a *costArgs) Count {
	e := a.i("rows") * a.i("cols")
	return Count{Read: e * a.sz("dout"), Written: 4 * a.i("cols") * int64(max(1, a.d.grid[1])), Flops: e}
}

func copy2d(add bool) costFunc {
	return func(a *costArgs) Count {
		e := a.i("rows") * a.i("cols")
		c := Count{Read: e * a.sz("src"), Written: e * a.sz("dst")}
		if add {
			c.Read += e * a.sz("dst")
			c.Flops = e
		}
		return c
	}
}

func copyRows(a *costArgs) Count {
	e := a.i("n") * a.i("cols")
	idx := 8 * a.i("n") * (min(1, a.sz("dstRows")/8) + min(1, a.sz("srcRows")/8))
	return Count{Read: e*a.sz("src") + idx, Written: e * a.sz("dst")}
}

func embedding(a *costArgs) Count {
	rows, dim := a.i("rows"), a.i("dim")
	tabs := a.sz("wte") + a.sz("wpe")
	return Count{Read: rows*dim*tabs + 4*rows*(1+min(1, a.sz("pos")/4)), Written: rows * dim * a.sz("out"), Flops: rows * dim * min(1, a.sz("wpe"))}
}

func logprobBack(a *costArgs) Count {
	e := a.i("rows") * a.i("vocab")
	ent := min(1, a.sz("dentropy")/4) // the entropy's term: its coefficients and 3 more flops a logit
	return Count{Read: 4*e + e*a.sz("dlogits") + 8*a.i("rows") + 4*a.i("rows")*ent, Written: e * a.sz("dlogits"), Flops: (6 + 3*ent) * e}
}

// normForward: RMSNorm or LayerNorm of rows×dim, statistics per row.
func normForward(a *costArgs) Count {
	rows, dim := a.i("rows"), a.i("dim")
	e := rows * dim
	stats := 4 * rows * (min(1, a.sz("rstd")/4) + min(1, a.szOpt("mean")/4))
	return Count{Read: e*a.sz("inp") + dim*(a.sz("weight")+a.szOpt("bias")), Written: e*a.sz("out") + stats, Flops: 5 * e}
}

// normBackward accumulates dinp (read and written); weight gradients as partial sums.
func normBackward(a *costArgs) Count {
	rows, dim := a.i("rows"), a.i("dim")
	e := rows * dim
	wg := dim * (a.sz("dweight") + a.szOpt("dbias")) * int64(max(1, a.d.grid[0]))
	return Count{Read: e*(a.sz("dout")+a.sz("inp")+a.sz("dinp")) + 4*rows*2 + dim*a.sz("weight"), Written: e*a.sz("dinp") + wg, Flops: 10 * e}
}

// scales is the bytes of a 4-bit weight's block scales (w values): one byte a block when
// double-quantized, else a float.
func scales(a *costArgs, w int64) int64 {
	blocks := w >> uint(max(0, a.i("blockShift")))
	if a.sz("qabsmax") > 0 {
		return blocks
	}
	return 4 * blocks
}

func dequant(a *costArgs) Count {
	n := a.i("n")
	return Count{Read: n/2 + scales(a, n), Written: n * a.sz("out"), Flops: n}
}

func rope(a *costArgs) Count {
	rows := a.i("rows")
	e := rows * a.i("heads") * 2 * a.i("half")
	return Count{Read: e*a.sz("x") + rows*a.i("half")*8 + 4*rows, Written: e * a.sz("x"), Flops: 3 * e}
}

// kernelCost is the declared cost of the launch of id whose arguments sit in o's slots.
func kernelCost(o *owner, id kernelID, d dims) Count {
	f := kernelCosts[kernelNames[id]]
	if f == nil {
		return Count{}
	}
	a := costArgs{params: kernelParams[id], slots: &o.args.slots, d: d, hint: o.hint, attn: o.attnHint}
	c := f(&a)
	if a.bad != "" {
		o.costErr = kernelNames[id] + ": no parameter " + a.bad
	}
	return c
}

// undeclaredKernels lists the kernels without a cost (a test wants none).
func undeclaredKernels() []string {
	var out []string
	for _, n := range kernelNames {
		if kernelCosts[n] == nil {
			out = append(out, n)
		}
	}
	return out
}

// loraGrads: dy read twice (dB, dxa) and written once as bf16, xa and B read, dB and dxa written.
func loraGrads(size int64) costFunc {
	return func(a *costArgs) Count {
		rows, width, r := a.i("rows"), a.i("width"), max(1, a.i("r"))
		tot := a.i("out0") + a.i("out1") + a.i("out2")
		return Count{Read: 2*size*rows*tot + 2*rows*width + 4*tot*r, Written: 2*rows*tot + 4*rows*width + 4*tot*r,
			Flops: 2*a.hint + 2*rows*tot*r}
	}
}

// loraIn: dxa and x read, dA and dx read and written.
func loraIn(size int64) costFunc {
	return func(a *costArgs) Count {
		rows, width, in := a.i("rows"), a.i("width"), a.i("in")
		return Count{Read: 4*rows*width + 2*rows*in + 4*width*in + size*rows*in + 4*width*in, Written: 4*width*in + size*rows*in,
			Flops: 2*a.hint*in + 2*rows*in*width}
	}
}
