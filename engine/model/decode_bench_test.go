package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"rlhfstation/engine/backend"
	"rlhfstation/quant"
)

// qwen05Shape is Qwen2.5-0.5B's shape (its config.json: q/k/v biases, tied head, rope_theta
// 1e6): 494,032,768 parameters.
var qwen05Shape = Config{ModelType: "qwen2", Vocab: 151936, Dim: 896, Layers: 24, Heads: 14, KVHeads: 2,
	Hidden: 4864, MaxPos: 32768, NormEps: 1e-6, RopeTheta: 1e6, TieEmbed: true, BOS: -1}

// BenchmarkDecodeNF4 times one decode step (Generate's decoder: the forward of one new token
// per sequence over a key/value cache, the logits of the vocabulary and a greedy draw) of a
// random Qwen2.5-0.5B-shaped model whose values are bf16, as in the released checkpoint, with NF4 linears (blocks of 64, double quantization; the tied embedding and LM
// head held in bf16, as bitsandbytes leaves them unquantized in the checkpoint's dtype) and of
// the same model in float32, at 1, 8 and 32 sequences, with the copy bandwidth of this machine
// measured between them. Runs are interleaved (each batch size with both models, the copy
// measured just before each NF4 step; RLHFSTATION_DECODE_REPS rounds, 5 by default;
// RLHFSTATION_DECODE_BATCHES picks the sequence counts) and the figures are medians over
// rounds; the ratios are the medians of each round's f32/NF4 and NF4/copy ratios (this
// machine's bandwidth moves by 2× within minutes as its neighbours load the host, so each
// step is held to the copy measured beside it). GB/s is the bytes of the weights
// (ResidentBytes: each is read once a token) over the step's time; copy GB/s counts the bytes
// read and written (STREAM's convention); read GB/s is readBandwidth's, the fastest this
// machine reads a stream (NF4 / read: how near the step comes to a step that only read; f32 /
// read: the same for the float32 step, whose products do little work a byte and so show where
// that ceiling lies). CPU ms is the process's CPU time a step (both threads), which moves less
// than the wall clock on a loaded machine.
// run: go test ./engine/model -run '^$' -bench DecodeNF4 -benchtime 1x -v -timeout 60m
func BenchmarkDecodeNF4(b *testing.B) {
	reps := 5
	if s := os.Getenv("RLHFSTATION_DECODE_REPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("RLHFSTATION_DECODE_REPS=%q: want a positive count", s)
		}
		reps = n
	}
	f32, err := NewRandom(qwen05Shape, 1)
	if err != nil {
		b.Fatal(err)
	}
	nf4, err := NewRandom(qwen05Shape, 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range []*Model{f32, nf4} { // a bf16 checkpoint's values
		for i, v := range m.data {
			m.data[i] = math.Float32frombits((math.Float32bits(v) + 0x7fff + (math.Float32bits(v)>>16)&1) &^ 0xffff)
		}
	}
	if _, _, err := nf4.Quantize(quant.Default()); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	models := []struct {
		name  string
		m     *Model
		bytes int64
	}{{"f32", f32, f32.ResidentBytes()}, {"nf4", nf4, nf4.ResidentBytes()}}
	batches := []int{1, 8, 32}
	if s := os.Getenv("RLHFSTATION_DECODE_BATCHES"); s != "" { // e.g. "1" beside bench/llamacpp_anchor.sh
		batches = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				b.Fatalf("RLHFSTATION_DECODE_BATCHES=%q: want sequence counts such as 1,8,32", s)
			}
			batches = append(batches, n)
		}
	}
	const promptLen, steps = 16, 2

	// One cache per model and batch size, prefilled once; each timing rewinds it to the
	// prompt, so every round decodes the same positions.
	type run struct {
		m     *Model
		cache *Cache
		feed  [][]int
	}
	runs := map[string]*run{}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, mm := range models {
		for _, B := range batches {
			prompts := make([][]int, B)
			for i := range prompts {
				prompts[i] = make([]int, promptLen)
				for j := range prompts[i] {
					prompts[i][j] = rng.IntN(qwen05Shape.Vocab)
				}
			}
			c := mm.m.NewCache(B, promptLen+steps+1)
			if err := mm.m.prefill(c, prompts, AdaptersOn, func(_ backend.Buf, _ *pass) error { return nil }); err != nil {
				b.Fatal(err)
			}
			feed := make([][]int, B)
			for i := range feed {
				feed[i] = []int{prompts[i][0]}
			}
			runs[fmt.Sprint(mm.name, B)] = &run{mm.m, c, feed}
		}
	}
	// step returns the wall and CPU (user + system, all threads) seconds of one decode step:
	// Generate's own (its decoder, readied before the clock starts), or with
	// RLHFSTATION_DECODE_STEP=forward a forward pass and Sample (the figures before session 9).
	forwardStep := os.Getenv("RLHFSTATION_DECODE_STEP") == "forward"
	step := func(r *run) (wall, cpu float64) {
		for i := range r.cache.Len {
			r.cache.Len[i] = promptLen
		}
		var d *decoder
		if !forwardStep {
			seqs, ids := make([]int, len(r.feed)), make([]int32, len(r.feed))
			for i, f := range r.feed {
				seqs[i], ids[i] = i, int32(f[0])
			}
			var err error
			if d, err = r.m.newDecoder(r.cache, seqs, ids, GenerateOptions{Adapters: AdaptersOn}, backend.Buf{}, func(int) []int { return nil }); err != nil {
				b.Fatal(err)
			}
			defer d.free()
			if _, _, _, err := d.step(nil); err != nil { // its first step makes its scratch
				b.Fatal(err)
			}
			for i := range r.cache.Len {
				r.cache.Len[i]++
			}
		}
		u := make([]float64, len(r.feed))
		c0 := processCPU()
		t0 := time.Now()
		for range steps {
			if d != nil {
				if _, _, _, err := d.step(nil); err != nil {
					b.Fatal(err)
				}
				for i := range r.cache.Len {
					r.cache.Len[i]++
				}
				continue
			}
			lg, p, err := r.m.forward(r.cache, r.feed, true, AdaptersOn)
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := r.m.b.Sample(lg, u, len(p.runs), r.m.Config.Vocab, 0, 0, 0); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0).Seconds() / steps, (processCPU() - c0) / steps
	}
	for _, r := range runs { // warm-up: caches allocated, scratch grown, pages touched
		step(r)
	}

	copyBW := make([]float64, 0, reps*len(batches))
	times, cpus := map[string][]float64{}, map[string][]float64{}
	ratios, cpuRatios, ofCopy, ofRead := map[int][]float64{}, map[int][]float64{}, map[int][]float64{}, map[int][]float64{}
	f32OfRead := map[int][]float64{}
	readBW := make([]float64, 0, reps*len(batches))
	for b.Loop() {
		for range reps {
			for _, B := range batches {
				var t, c [2]float64
				var cb, rb float64
				for k, mm := range models {
					if mm.name == "nf4" { // the machine's bandwidth of the moment, beside the step
						cb, rb = copyBandwidth(), readBandwidth()
						copyBW, readBW = append(copyBW, cb), append(readBW, rb)
					}
					key := fmt.Sprint(mm.name, B)
					t[k], c[k] = step(runs[key])
					times[key] = append(times[key], t[k])
					cpus[key] = append(cpus[key], c[k])
				}
				ratios[B] = append(ratios[B], t[0]/t[1])
				cpuRatios[B] = append(cpuRatios[B], c[0]/c[1])
				ofCopy[B] = append(ofCopy[B], float64(models[1].bytes)/t[1]/cb)
				ofRead[B] = append(ofRead[B], float64(models[1].bytes)/t[1]/rb)
				f32OfRead[B] = append(f32OfRead[B], float64(models[0].bytes)/t[0]/rb)
			}
		}
	}
	bw := median(copyBW)
	var tab strings.Builder
	fmt.Fprintf(&tab, "copy bandwidth %.1f GB/s, read %.1f GB/s (medians of %d); weights: f32 %.0f MB, nf4 %.0f MB a token\n",
		bw/1e9, median(readBW)/1e9, len(copyBW), float64(models[0].bytes)/1e6, float64(models[1].bytes)/1e6)
	fmt.Fprintf(&tab, "| sequences | f32 ms/token | NF4 ms/token | f32 / NF4 | f32 GB/s | NF4 GB/s | NF4 / copy | NF4 / read | f32 / read | f32 CPU ms | NF4 CPU ms | CPU f32 / NF4 |\n")
	fmt.Fprintf(&tab, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, B := range batches {
		tf, tq := median(times[fmt.Sprint("f32", B)]), median(times[fmt.Sprint("nf4", B)])
		cf, cq := median(cpus[fmt.Sprint("f32", B)]), median(cpus[fmt.Sprint("nf4", B)])
		gf, gq := float64(models[0].bytes)/tf, float64(models[1].bytes)/tq
		fmt.Fprintf(&tab, "| %d | %.1f | %.1f | **%.2f×** | %.1f | %.1f | %.0f%% | %.0f%% | %.0f%% | %.1f | %.1f | %.2f× |\n",
			B, 1e3*tf, 1e3*tq, median(ratios[B]), gf/1e9, gq/1e9, 100*median(ofCopy[B]), 100*median(ofRead[B]), 100*median(f32OfRead[B]), 1e3*cf, 1e3*cq, median(cpuRatios[B]))
		b.ReportMetric(1e3*tf, fmt.Sprintf("f32-ms/token@%d", B))
		b.ReportMetric(1e3*tq, fmt.Sprintf("nf4-ms/token@%d", B))
		b.ReportMetric(median(ratios[B]), fmt.Sprintf("f32/nf4@%d", B))
		b.ReportMetric(gq/1e9, fmt.Sprintf("nf4-GB/s@%d", B))
		b.ReportMetric(median(ofCopy[B]), fmt.Sprintf("nf4/copy@%d", B))
	}
	b.ReportMetric(bw/1e9, "copy-GB/s")
	b.ReportMetric(median(readBW)/1e9, "read-GB/s")
	b.Log("\n" + tab.String())
}

// copyBandwidth copies 256 MB split over the cores, twice, and returns the faster rate in
// bytes read and written a second.
func copyBandwidth() float64 {
	src, dst := copyBufs()
	return overCores(2*4*len(src), func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
}

// readBandwidth reads the same 256 MB split over the cores, twice, and returns the faster
// rate in bytes read a second: each core copies its half 4 KB at a time into a buffer that
// stays in its L1 (the fastest stream of reads found on these machines, about 0.6–0.75 of
// copyBandwidth's reads plus writes; a plain vector read loop is slower). It is the ceiling
// a step that only read its weights would meet.
func readBandwidth() float64 {
	src, _ := copyBufs()
	return overCores(4*len(src), func(lo, hi int) {
		var buf [1024]float32
		for o := lo; o < hi; o += len(buf) {
			copy(buf[:], src[o:min(o+len(buf), hi)])
		}
	})
}

// overCores runs f over copyBufs' 64M floats split over the cores, twice, and returns the
// faster rate of bytes a run.
func overCores(bytes int, f func(lo, hi int)) float64 {
	const n = 64 << 20
	best := 0.0
	for range 2 {
		t0 := time.Now()
		w := runtime.GOMAXPROCS(0)
		var wg sync.WaitGroup
		for i := range w {
			lo, hi := i*n/w, (i+1)*n/w
			wg.Go(func() { f(lo, hi) })
		}
		wg.Wait()
		best = max(best, float64(bytes)/time.Since(t0).Seconds())
	}
	return best
}

// processCPU is the CPU time of the process (user + system, all threads) in seconds: on a
// shared machine the wall clock also counts the time other processes held the cores.
func processCPU() float64 {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return float64(u.Utime.Nano()+u.Stime.Nano()) / 1e9
}

var copyBufs = sync.OnceValues(func() ([]float32, []float32) {
	src, dst := make([]float32, 64<<20), make([]float32, 64<<20)
	for i := range src {
		src[i] = float32(i)
	}
	clear(dst)
	return src, dst
})

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkDecodeQ4Head times one-sequence decode steps (as BenchmarkDecodeNF4) of the
// Qwen2.5-0.5B-shaped NF4 model with its tied head held bf16 (the default) and 4-bit ([quant]
// head: the embedding read from the same tensor), interleaved step by step,
// RLHFSTATION_DECODE_REPS rounds (5 by default); medians of wall and CPU ms a token, and the
// weights' bytes each reads a token.
// run: go test ./engine/model -run '^$' -bench DecodeQ4Head -benchtime 1x -v -timeout 30m
func BenchmarkDecodeQ4Head(b *testing.B) {
	reps := 5
	if n, err := strconv.Atoi(os.Getenv("RLHFSTATION_DECODE_REPS")); err == nil && n > 0 {
		reps = n
	}
	var models [2]*Model
	for k := range models {
		m, err := NewRandom(qwen05Shape, 1)
		if err != nil {
			b.Fatal(err)
		}
		for i, v := range m.data { // a bf16 checkpoint's values
			m.data[i] = math.Float32frombits((math.Float32bits(v) + 0x7fff + (math.Float32bits(v)>>16)&1) &^ 0xffff)
		}
		if _, _, err := m.Quantize(quant.Default()); err != nil {
			b.Fatal(err)
		}
		if k == 1 {
			if _, _, err := m.QuantizeHead(quant.Default()); err != nil {
				b.Fatal(err)
			}
		}
		models[k] = m
		runtime.GC()
	}
	const promptLen, steps = 16, 4
	rng := rand.New(rand.NewPCG(7, 7))
	prompt := make([]int, promptLen)
	for j := range prompt {
		prompt[j] = rng.IntN(qwen05Shape.Vocab)
	}
	caches := [2]*Cache{}
	for k, m := range models {
		caches[k] = m.NewCache(1, promptLen+steps)
		if err := m.prefill(caches[k], [][]int{prompt}, AdaptersOn, func(backend.Buf, *pass) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	step := func(k int) (wall, cpu float64) {
		m, c := models[k], caches[k]
		c.Len[0] = promptLen
		c0, t0 := processCPU(), time.Now()
		for range steps {
			lg, p, err := m.forward(c, [][]int{{prompt[0]}}, true, AdaptersOn)
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := m.b.Sample(lg, []float64{0}, len(p.runs), m.Config.Vocab, 0, 0, 0); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0).Seconds() / steps, (processCPU() - c0) / steps
	}
	step(0)
	step(1)
	var wall, cpu [2][]float64
	for b.Loop() {
		for range reps {
			for k := range models {
				w, c := step(k)
				wall[k], cpu[k] = append(wall[k], w), append(cpu[k], c)
			}
		}
	}
	names := [2]string{"bf16-head", "q4-head"}
	for k, m := range models {
		b.ReportMetric(1e3*median(wall[k]), names[k]+"-ms/token")
		b.ReportMetric(1e3*median(cpu[k]), names[k]+"-cpu-ms/token")
		b.Logf("%s: resident %.0f MB, %.1f ms a token, %.1f ms of CPU", names[k], float64(m.ResidentBytes())/1e6, 1e3*median(wall[k]), 1e3*median(cpu[k]))
	}
	b.ReportMetric(median(cpu[0])/median(cpu[1]), "cpu-bf16/q4")
}
