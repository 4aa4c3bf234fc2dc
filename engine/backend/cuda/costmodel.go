package cuda

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
)

// The cost model: a GRPO step's ledger, phase by phase, turned into an estimated time on a
// named GPU, before one is at hand. The calls (launches, cuBLAS calls, copies, graph
// launches and their nodes, syncs) come from a ledger; the work (bytes and flops) from the
// workload's shape, as this backend's passes move and compute it (see Workload.Work). Each
// phase takes
//
//	max(host calls × Launch, GPU time) + syncs × Sync,
//	GPU time = kernels × Node + max(bandwidth time, latency time),
//	bandwidth time = max(product bytes / Bandwidth, product flops / BF16) + other bytes / Bandwidth,
//	latency time = Σ over kernels of Latency × chain × max(1, warps / resident) (latency.go),
//	resident = the warps of the kernel the card holds at once (occupancy.go),
//
// as the host queues work while the GPU runs it, and waits at each sync. Launch, Node, Sync,
// Bandwidth and BF16 are the floors issue 31 sets, so that the estimate cannot be tuned by
// them; SMs, WarpsPerSM and Limits are the card's; Latency was calibrated once, for every kernel
// alike, on an H200's measured decode kernels (TestCostModelH200).

// Card is a GPU's constants.
type Card struct {
	Name       string
	Bandwidth  float64 // device memory, bytes/s
	BF16       float64 // dense bf16 tensor-core throughput, flop/s
	Launch     float64 // seconds per launch, copy or cuBLAS call outside a graph
	Node       float64 // seconds per kernel or graph node at the least (a small kernel's minimum time)
	Sync       float64 // seconds per stream synchronisation
	SMs        int     // streaming multiprocessors
	WarpsPerSM int     // the most warps an SM holds
	Latency    float64 // seconds per dependent memory round trip of a warp (latency.go)
	Limits     smRules // an SM's limits on resident blocks (occupancy.go)
}

// latency is the round trip every card is given: calibrated on the H200's decode kernels
// under Nsight Compute (TestCostModelH200), most of whose round trips hit L2 (a device-memory
// access alone is 0.6–0.8 µs).
const latency = 0.45e-6

// The cards of the estimate. H200: 4.8 TB/s, 989 TFLOP/s dense bf16 (its data sheet), 132 SMs.
var (
	H100    = Card{Name: "H100 SXM", Bandwidth: 3.0e12, BF16: 800e12, Launch: 4e-6, Node: 1.5e-6, Sync: 10e-6, SMs: 132, WarpsPerSM: 64, Latency: latency, Limits: sm90}
	H200    = Card{Name: "H200", Bandwidth: 4.8e12, BF16: 989e12, Launch: 4e-6, Node: 1.5e-6, Sync: 10e-6, SMs: 132, WarpsPerSM: 64, Latency: latency, Limits: sm90}
	RTX4090 = Card{Name: "RTX 4090", Bandwidth: 1.0e12, BF16: 165e12, Launch: 4e-6, Node: 1.5e-6, Sync: 10e-6, SMs: 128, WarpsPerSM: 48, Latency: latency, Limits: sm89}
)

// Cards are the cards an estimate is printed for.
var Cards = []Card{H100, H200, RTX4090}

func (c Card) String() string {
	return fmt.Sprintf("%s: %.1f TB/s, %.0f TFLOP/s bf16, %.1f µs a launch, copy or cuBLAS call outside a graph, %.1f µs a kernel or graph node at the least, %.0f µs a sync, %d SMs × %d warps resident, %.2f µs a dependent memory round trip, %s occupancy (%d blocks, %d KB shared an SM)",
		c.Name, c.Bandwidth/1e12, c.BF16/1e12, c.Launch*1e6, c.Node*1e6, c.Sync*1e6, c.SMs, c.WarpsPerSM, c.Latency*1e6, c.Limits.Arch, c.Limits.Blocks, c.Limits.Shared>>10)
}

// KernelTime is the time on c of kernel name's launches k: each launch's floor, then the
// longer of its bandwidth (or product) time and its latency term; for launches counted
// together (one name's), exact when they are in one regime (all within the resident warps,
// or all beyond them) and of one block shape.
func (c Card) KernelTime(name string, k Count) float64 {
	r, ok := kernelResources[name]
	return c.kernelTime(k, r, ok)
}

// kernelTime is KernelTime for a kernel of resources r (ok: known; else the card's full
// residency).
func (c Card) kernelTime(k Count, r kernelResource, ok bool) float64 {
	return float64(k.N)*c.Node + max(float64(k.Bytes())/c.Bandwidth, float64(k.Flops)/c.BF16, c.countChainTime(k, r, ok))
}

func (c Card) countChainTime(k Count, r kernelResource, ok bool) float64 {
	return c.chainTime(float64(k.Chain), float64(k.WarpChain), c.resident(r, ok, float64(k.Warps), float64(k.Blocks), float64(k.Shared)))
}

// chainTime is the latency term of launches whose chains sum to chain and, weighted by their
// warps, to warpChain, of a kernel the card holds resident warps of at once.
func (c Card) chainTime(chain, warpChain, resident float64) float64 {
	return c.Latency * max(chain, warpChain/resident)
}

// The phases of a step.
const (
	PhasePrefill   = "prefill"
	PhaseDecode    = "decode, a token"
	PhaseReference = "reference scoring"
	PhaseForward   = "training forward"
	PhaseBackward  = "backward"
	PhaseOptimizer = "optimizer"
)

// Phases in step order.
var Phases = []string{PhasePrefill, PhaseDecode, PhaseReference, PhaseForward, PhaseBackward, PhaseOptimizer}

// Workload is a model's shape (a gated-MLP decoder: llama, qwen2, qwen3) with LoRA on every
// linear, and a step's sizes: Seqs completions of Completion tokens after Prompt tokens.
type Workload struct {
	Name                                         string
	Dim, Layers, Heads, KVHeads, HeadDim, Hidden int
	Vocab                                        int
	Rank                                         int
	Seqs, Prompt, Completion                     int
}

// The three workloads.
var (
	Qwen05B = Workload{Name: "Qwen2.5-0.5B", Dim: 896, Layers: 24, Heads: 14, KVHeads: 2, HeadDim: 64, Hidden: 4864, Vocab: 151936,
		Rank: 16, Seqs: 8, Prompt: 32, Completion: 64}
	Qwen3_4B = Workload{Name: "Qwen3-4B", Dim: 2560, Layers: 36, Heads: 32, KVHeads: 8, HeadDim: 128, Hidden: 9728, Vocab: 151936,
		Rank: 16, Seqs: 16, Prompt: 128, Completion: 512}
	Llama8B = Workload{Name: "Llama-3.1-8B", Dim: 4096, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128, Hidden: 14336, Vocab: 128256,
		Rank: 16, Seqs: 16, Prompt: 128, Completion: 512}
)

// Path is how this backend's passes run, read from a structural run's ledger: the work
// depends on it.
type Path struct {
	DecodeFused    bool // decode's linears read the 4-bit weight (fused product), no expansion
	DequantPerPass bool // training and scoring passes expand each 4-bit weight to bf16 per use
	LoRACasts      bool // LoRA's float32 weights rounded to bf16 at each use (training and scoring)
	DecodeCasts    bool // the same in the decode step
	ProbsKept      bool // attention materialises the [T × T] probabilities (else flash-style)
}

// PathOf reads the path from a step's ledgers.
func PathOf(decode, forward Ledger) Path {
	return Path{
		DecodeFused:    decode.LaunchedPrefix("dequant4_") == 0,
		DequantPerPass: forward.LaunchedPrefix("dequant4_") > 0,
		LoRACasts:      forward.LaunchedPrefix("cast_f32_bf16") > 0,
		DecodeCasts:    decode.LaunchedPrefix("cast_f32_bf16") > 0,
		ProbsKept:      forward.Launched("attn_softmax_forward") > 0,
	}
}

// Work is a phase's bytes and flops, the products' apart from the rest.
type Work struct {
	GEMMBytes, GEMMFlops float64
	OtherBytes           float64
}

func (w *Work) add(x Work) {
	w.GEMMBytes += x.GEMMBytes
	w.GEMMFlops += x.GEMMFlops
	w.OtherBytes += x.OtherBytes
}

// nf4Bytes is a 4-bit parameter's bytes with double quantization: half a byte, a byte of
// scale per 64 values, a float per 256 blocks.
const nf4Bytes = 0.5 + 1.0/64 + 4.0/(64*256)

func (w Workload) qdim() float64  { return float64(w.Heads * w.HeadDim) }
func (w Workload) kvdim() float64 { return float64(w.KVHeads * w.HeadDim) }

// linearParams is a layer's linear weights (q, k, v, o, gate, up, down).
func (w Workload) linearParams() float64 {
	D, Q, K, H := float64(w.Dim), w.qdim(), w.kvdim(), float64(w.Hidden)
	return D*(Q+2*K) + Q*D + 3*D*H
}

// linearIO is the values in and out of a layer's linears for one row.
func (w Workload) linearIO() float64 {
	D, Q, K, H := float64(w.Dim), w.qdim(), w.kvdim(), float64(w.Hidden)
	return (D + Q) + 2*(D+K) + (Q + D) + 2*(D+H) + (H + D)
}

// loraParams is a layer's LoRA parameters (A and B of every linear).
func (w Workload) loraParams() float64 { return float64(w.Rank) * w.linearIO() }

// layerPass is one layer of a pass over rows rows of seqs sequences of T tokens (full
// sequences; T = 0 for decode rows over ctx cached keys each).
func (w Workload) layerPass(p Path, rows, seqs, T, ctx float64, adapters, decode bool) Work {
	W := w.linearParams()
	D, Q, K, H := float64(w.Dim), w.qdim(), w.kvdim(), float64(w.Hidden)
	var x Work
	// the base linears
	x.GEMMFlops += 2 * rows * W
	x.GEMMBytes += 2 * rows * w.linearIO()
	switch {
	case decode && p.DecodeFused:
		x.GEMMBytes += nf4Bytes * W
	case p.DequantPerPass:
		x.OtherBytes += (nf4Bytes + 2) * W // expansion
		x.GEMMBytes += 2 * W
	default: // expanded once, kept
		x.GEMMBytes += 2 * W
	}
	if adapters {
		R := w.loraParams()
		x.GEMMFlops += 2 * rows * R
		x.GEMMBytes += 2*rows*w.linearIO() + 2*R + 2*rows*7*float64(w.Rank)
		if decode && p.DecodeCasts || !decode && p.LoRACasts {
			x.OtherBytes += 6 * R
		}
	}
	// norms, residuals, RoPE, biases, the gated MLP's activation: a few passes over each row
	x.OtherBytes += rows * (2*(4+4+2)*D + 3*2*(Q+2*K) + 5*2*H)
	// attention
	if decode {
		x.OtherBytes += rows*ctx*2*K*2 + rows*4*Q // every cached key and value, once per row
		x.GEMMFlops += 4 * rows * ctx * Q
	} else {
		x.GEMMFlops += w.attnFlops(p, seqs, T, false)
		if p.ProbsKept {
			x.OtherBytes += seqs * float64(w.Heads) * T * T * (4 + 4 + 4 + 2) // scores, probabilities, their bf16 copy
			x.OtherBytes += 2 * rows * (Q + 2*Q) * 2                          // keys and values widened to every head
		} else {
			// each 16-row query tile reads its keys and values per head, from L2 (a sequence's
			// are a few MB a layer): device memory counted as one read per 128 query rows
			x.OtherBytes += rows*(Q+2*K)*2*math.Max(1, T/128) + 2*rows*Q
		}
	}
	return x
}

// attnFlops is attention's product flops in a training or scoring pass over seqs sequences
// of T tokens, its forward or its backward. Kept probabilities: the full [T × T] products
// (two forward, four backward). Flash-style (ragged.go): the causal (query tile, key tile)
// pairs of 16×16 that the tensor-core kernels form, nt(nt+1)/2 with nt = ⌈T/16⌉, on head
// dims padded to the kernels' instance, with the products of attnTC (costs.go): 3 forward;
// 4z+1 and 2z+2 backward, z the blocks of 128 gradient dims.
func (w Workload) attnFlops(p Path, seqs, T float64, backward bool) float64 {
	Q := w.qdim()
	if p.ProbsKept {
		if backward {
			return 8 * seqs * T * T * Q
		}
		return 4 * seqs * T * T * Q
	}
	nt := math.Ceil(T / tcTile)
	D := float64(tcDims(w.HeadDim))
	z := math.Ceil(float64(w.HeadDim) / float64(tcGradDims(w.HeadDim)))
	tile := 2 * tcTile * tcTile * D * float64(w.Heads) * seqs * nt * (nt + 1) / 2
	if backward {
		return (4*z + 1 + 2*z + 2) * tile
	}
	return 3 * tile
}

// head is the LM head over rows rows, its weight read once per chunk of rows.
func (w Workload) head(rows float64, backward bool) Work {
	V, D := float64(w.Vocab), float64(w.Dim)
	chunks := math.Ceil(rows / float64(headChunk(int(rows), w.Vocab)))
	x := Work{GEMMFlops: 2 * rows * V * D, GEMMBytes: chunks*2*V*D + rows*V*4 + rows*D*2}
	x.OtherBytes += rows * V * 4 * 2 // log-softmax and entropy over the logits
	if backward {
		x.GEMMFlops *= 2
		x.GEMMBytes += chunks*2*V*D + rows*V*2*2
		x.OtherBytes += rows * V * (4 + 2)
	}
	return x
}

// Work is a phase's bytes and flops on path p.
func (w Workload) Work(phase string, p Path) Work {
	B, P, C := float64(w.Seqs), float64(w.Prompt), float64(w.Completion)
	T := P + C
	L := float64(w.Layers)
	var x Work
	layers := func(l Work) {
		x.GEMMBytes += L * l.GEMMBytes
		x.GEMMFlops += L * l.GEMMFlops
		x.OtherBytes += L * l.OtherBytes
	}
	switch phase {
	case PhasePrefill:
		layers(w.layerPass(p, B*P, B, P, 0, true, false))
		x.add(w.head(B, false))
		x.OtherBytes += B * float64(w.Vocab) * 4 * 3  // sampling
		x.OtherBytes += B * P * L * 2 * w.kvdim() * 2 // the cache written
	case PhaseDecode:
		layers(w.layerPass(p, B, B, 0, P+C/2, true, true))
		x.add(w.head(B, false))
		x.OtherBytes += B * float64(w.Vocab) * 4 * 3
	case PhaseReference:
		layers(w.layerPass(p, B*T, B, T, 0, false, false))
		x.add(w.head(B*T, false))
	case PhaseForward:
		layers(w.layerPass(p, B*T, B, T, 0, true, false))
		x.add(w.head(B*T, false))
	case PhaseBackward:
		f := w.layerPass(p, B*T, B, T, 0, true, false)
		// the input gradients through every product (the base's weights read again, the
		// adapters' two gradients), attention's backward products, twice the forward's
		// element-wise work
		fa := w.attnFlops(p, B, T, false)
		f.GEMMFlops = 2*(f.GEMMFlops-fa) + w.attnFlops(p, B, T, true)
		f.GEMMBytes += f.GEMMBytes
		f.OtherBytes *= 2
		layers(f)
		x.add(w.head(B*T, true))
	case PhaseOptimizer:
		x.OtherBytes = L * w.loraParams() * (16 + 12 + 4) // AdamW reads p, g, m, v and writes p, m, v; the norm reads g
	}
	return x
}

// Tokens is the tokens a phase handles (a step's completions for decode: per token, B).
func (w Workload) Tokens(phase string) float64 {
	switch phase {
	case PhasePrefill:
		return float64(w.Seqs * w.Prompt)
	case PhaseDecode:
		return float64(w.Seqs)
	case PhaseOptimizer:
		return 0
	}
	return float64(w.Seqs * (w.Prompt + w.Completion))
}

// Calls is a phase's fixed costs, from a ledger: the host's calls, the graph nodes, the
// syncs, the kernel launches and graph nodes the GPU runs (each at least Node), and the
// launches of each kernel with their chains, for the latency term (in and out of graphs;
// cuBLAS calls under nodeBLAS).
type Calls struct {
	Host, Nodes, Syncs float64
	Kernels            float64
	Chains             map[string]Chains
}

// Chains is a kernel's launches, their chains and their shape, summed (Count's N, Chain,
// WarpChain, Warps, Blocks, Shared).
type Chains struct{ N, Chain, WarpChain, Warps, Blocks, Shared float64 }

func chainsOf(k Count) Chains {
	return Chains{float64(k.N), float64(k.Chain), float64(k.WarpChain), float64(k.Warps), float64(k.Blocks), float64(k.Shared)}
}

func (a Chains) plus(b Chains) Chains {
	return Chains{a.N + b.N, a.Chain + b.Chain, a.WarpChain + b.WarpChain, a.Warps + b.Warps, a.Blocks + b.Blocks, a.Shared + b.Shared}
}

func (a Chains) times(f float64) Chains {
	return Chains{a.N * f, a.Chain * f, a.WarpChain * f, a.Warps * f, a.Blocks * f, a.Shared * f}
}

// CallsOf reads a ledger's calls.
func CallsOf(l Ledger) Calls {
	c := Calls{Host: float64(l.HostCalls()), Nodes: float64(l.GraphNodes()), Syncs: float64(l.Syncs),
		Kernels: float64(l.Launches() + l.BLAS.N + l.GraphNodes()), Chains: map[string]Chains{}}
	add := func(name string, k Count) {
		c.Chains[name] = c.Chains[name].plus(chainsOf(k))
	}
	for k, n := range l.Kernels {
		add(k, n)
	}
	for k, n := range l.Nodes {
		add(k, n)
	}
	if l.BLAS.N > 0 {
		add(nodeBLAS, l.BLAS)
	}
	return c
}

// Scale multiplies the calls (a structural run's layers to the model's, say).
func (c Calls) Scale(f float64) Calls {
	r := Calls{c.Host * f, c.Nodes * f, c.Syncs * f, c.Kernels * f, map[string]Chains{}}
	for k, v := range c.Chains {
		r.Chains[k] = v.times(f)
	}
	return r
}

// Latency is the calls' latency term on card, each kernel at its own occupancy.
func (c Calls) Latency(card Card) float64 {
	var t float64
	for k, v := range c.Chains {
		r, ok := kernelResources[k]
		t += card.chainTime(v.Chain, v.WarpChain, card.resident(r, ok, v.Warps, v.Blocks, v.Shared))
	}
	return t
}

// rowsKernels are the decode attention kernels, by their head-dimension bound D.
var rowsKernels = map[string]int64{"attn_rows64": 64, "attn_rows128": 128, "attn_rows256": 256}

// withKeys is c with attn_rows*' chains those of rows of keys keys each: a ledger's run has
// its own short context; a rollout's decode token attends to P + C/2 keys on average, and
// the chain grows with them (latency.go).
func (c Calls) withKeys(keys int) Calls {
	r := c.Scale(1)
	for k, d := range rowsKernels {
		if a := c.Chains[k]; a.N > 0 && a.Chain > 0 {
			r.Chains[k] = a.atKeys(d, keys)
		}
	}
	return r
}

// atKeys is attn_rows<d>'s launches a with the chain of rows of keys keys each (the warps as
// they were).
func (a Chains) atKeys(d int64, keys int) Chains {
	f := a.N * float64(attnSplitChain(d, int64(keys))) / a.Chain
	a.Chain, a.WarpChain = a.Chain*f, a.WarpChain*f
	return a
}

// PhaseEstimate is one phase's estimated time on a card.
type PhaseEstimate struct {
	Phase                                  string
	Calls                                  Calls
	Work                                   Work
	Memory, Compute, Launches, Syncs, Time float64 // seconds
	Latency, Floors                        float64 // seconds: the latency term, kernels × Node
	Bound                                  string  // memory, compute, latency or launches
	Tokens                                 float64
}

// TokensPerSecond is the phase's tokens over its time.
func (e PhaseEstimate) TokensPerSecond() float64 {
	if e.Time == 0 {
		return 0
	}
	return e.Tokens / e.Time
}

// EstimatePhase turns a phase's calls and work into time on c.
func EstimatePhase(c Card, phase string, calls Calls, w Work, tokens float64) PhaseEstimate {
	e := PhaseEstimate{Phase: phase, Calls: calls, Work: w, Tokens: tokens}
	gemmMem, gemmComp := w.GEMMBytes/c.Bandwidth, w.GEMMFlops/c.BF16
	other := w.OtherBytes / c.Bandwidth
	e.Memory, e.Compute = other, 0
	if gemmMem >= gemmComp {
		e.Memory += gemmMem
	} else {
		e.Compute = gemmComp
	}
	e.Latency = calls.Latency(c)
	e.Floors = max(calls.Kernels, calls.Nodes) * c.Node
	gpu := e.Floors + max(e.Memory+e.Compute, e.Latency)
	e.Launches = calls.Host * c.Launch
	e.Syncs = calls.Syncs * c.Sync
	e.Time = max(gpu, e.Launches) + e.Syncs
	switch {
	case e.Launches >= gpu || e.Floors >= max(e.Memory+e.Compute, e.Latency):
		e.Bound = "launches"
	case e.Latency > e.Memory+e.Compute:
		e.Bound = "latency"
	case e.Memory >= e.Compute:
		e.Bound = "memory"
	default:
		e.Bound = "compute"
	}
	return e
}

// StepEstimate is a step's phases on a card.
type StepEstimate struct {
	Card     Card
	Workload Workload
	Phases   []PhaseEstimate
}

// Rollout is the prefill and every decode token.
func (s StepEstimate) Rollout() float64 {
	var t float64
	for _, p := range s.Phases {
		switch p.Phase {
		case PhasePrefill:
			t += p.Time
		case PhaseDecode:
			t += p.Time * float64(max(0, s.Workload.Completion-1))
		}
	}
	return t
}

// Total is the step: rollout, scoring, training and the update.
func (s StepEstimate) Total() float64 {
	t := s.Rollout()
	for _, p := range s.Phases {
		if p.Phase != PhasePrefill && p.Phase != PhaseDecode {
			t += p.Time
		}
	}
	return t
}

// EstimateStep estimates w's step on c from the calls of each phase (keyed by phase) and
// the path.
func EstimateStep(c Card, w Workload, calls map[string]Calls, p Path) StepEstimate {
	s := StepEstimate{Card: c, Workload: w}
	for _, ph := range Phases {
		cl := calls[ph]
		if ph == PhaseDecode {
			cl = cl.withKeys(w.Prompt + w.Completion/2)
		}
		s.Phases = append(s.Phases, EstimatePhase(c, ph, cl, w.Work(ph, p), w.Tokens(ph)))
	}
	return s
}

// Print writes the estimate as a table.
func (s StepEstimate) Print(out io.Writer) {
	w := s.Workload
	fmt.Fprintf(out, "%s, %d × (%d + %d) tokens, on %s (estimated)\n", w.Name, w.Seqs, w.Prompt, w.Completion, s.Card.Name)
	fmt.Fprintf(out, "  %-18s %10s %9s %9s %10s %10s %9s %9s %9s %9s %9s %12s\n", "phase", "host calls", "nodes", "syncs", "GB moved", "TFLOP", "memory", "compute", "latency", "floors", "time", "tokens/s")
	for _, p := range s.Phases {
		fmt.Fprintf(out, "  %-18s %10.0f %9.0f %9.0f %10.3f %10.3f %9s %9s %9s %9s %9s %12.0f  %s-bound\n", p.Phase, p.Calls.Host, p.Calls.Nodes, p.Calls.Syncs,
			(p.Work.GEMMBytes+p.Work.OtherBytes)/1e9, p.Work.GEMMFlops/1e12, seconds(p.Memory), seconds(p.Compute), seconds(p.Latency), seconds(p.Floors), seconds(p.Time), p.TokensPerSecond(), p.Bound)
	}
	tokens := float64(w.Seqs * (w.Prompt + w.Completion))
	fmt.Fprintf(out, "  rollout %s (%d decode tokens); step %s, %.0f tokens/s\n", seconds(s.Rollout()), max(0, w.Completion-1), seconds(s.Total()), tokens/s.Total())
}

func seconds(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.2f ms", s*1e3)
	}
	return fmt.Sprintf("%.1f µs", s*1e6)
}

// PrintKernels writes each kernel's share of l's time on c (graph nodes and launches alike,
// cuBLAS calls as one), most first: calls, warps a launch, the warps the card holds at once
// (occupancy.go), chain a launch, bytes, time and its bound. keys > 0 takes attn_rows*' chains at keys keys a row (see Calls.withKeys).
func (c Card) PrintKernels(out io.Writer, l Ledger, keys int) {
	type row struct {
		name string
		k    Count
		t    float64
	}
	all := map[string]Count{}
	for _, m := range []map[string]Count{l.Kernels, l.Nodes, {nodeBLAS: l.BLAS}} {
		for k, n := range m {
			if n.N > 0 {
				all[k] = all[k].plus(n, 1)
			}
		}
	}
	var rows []row
	var total float64
	for k, n := range all {
		if d, ok := rowsKernels[k]; ok && keys > 0 && n.Chain > 0 {
			a := chainsOf(n).atKeys(d, keys)
			n.Chain, n.WarpChain = int64(a.Chain), int64(a.WarpChain)
		}
		t := c.KernelTime(k, n)
		total += t
		rows = append(rows, row{k, n, t})
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(b.t, a.t) })
	fmt.Fprintf(out, "  on %s, kernel by kernel (each at least %.1f µs, then the longer of bandwidth and %.2f µs a round trip × chain):\n", c.Name, c.Node*1e6, c.Latency*1e6)
	fmt.Fprintf(out, "  %-26s %7s %12s %9s %12s %10s %10s %6s  %s\n", "kernel", "calls", "warps/call", "resident", "chain/call", "bytes", "time", "share", "bound")
	for _, r := range rows {
		n := float64(r.k.N)
		bound := "latency"
		res, ok := kernelResources[r.name]
		resident := c.resident(res, ok, float64(r.k.Warps), float64(r.k.Blocks), float64(r.k.Shared))
		if float64(r.k.Bytes())/c.Bandwidth >= c.countChainTime(r.k, res, ok) {
			bound = "bandwidth"
		}
		if n*c.Node >= r.t/2 {
			bound = "floor"
		}
		fmt.Fprintf(out, "  %-26s %7.0f %12.0f %9.0f %12.1f %10s %10s %5.1f%%  %s\n", r.name, n, float64(r.k.Warps)/n, resident, float64(r.k.Chain)/n,
			siCount(float64(r.k.Bytes())), seconds(r.t), 100*r.t/total, bound)
	}
	fmt.Fprintf(out, "  %-26s %7s %12s %9s %12s %10s %10s\n", "in all", "", "", "", "", "", seconds(total))
}
