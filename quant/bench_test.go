package quant

import (
	"runtime"
	"testing"
)

// BenchmarkDequantize expands a 4096×4096 NF4 weight (double-quantized, blocks of 64) to
// float32; the bytes are the float32 output, compared with a plain copy of as many bytes.
// run: go test ./quant -run X -bench Dequantize -benchtime 20x
func BenchmarkDequantize(b *testing.B) {
	const rows, cols = 4096, 4096
	x := gaussian(rows*cols, 1, 0.02)
	w, err := Quantize(x, rows, cols, "", Default())
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]float32, rows*cols)
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(4 * rows * cols)
		for b.Loop() {
			copy(dst, x)
		}
	})
	b.Run("nf4-1thread", func(b *testing.B) {
		b.SetBytes(4 * rows * cols)
		for b.Loop() {
			w.expandRange(dst, 0)
		}
	})
	b.Run("nf4-parallel", func(b *testing.B) {
		b.SetBytes(4 * rows * cols)
		for b.Loop() {
			w.Dequantize(dst)
		}
	})
	b.Run("nf4-rows-of-64", func(b *testing.B) { // the tile-by-tile use
		b.SetBytes(4 * rows * cols)
		for b.Loop() {
			for r := 0; r < rows; r += 64 {
				w.DequantizeRange(dst[r*cols:(r+64)*cols], r*cols)
			}
		}
	})
}

// BenchmarkResidentMemory quantizes a random llama-shaped weight set of about 100M parameters
// (hidden 768, MLP 2048, 12 layers, vocabulary 10000, untied head) and reports the bytes its
// weights hold: all float32 against NF4 linears (double quantization, blocks of 64) with
// float32 embeddings, head and norms, as a quantized model keeps them.
// run: go test ./quant -run X -bench ResidentMemory -benchtime 1x
func BenchmarkResidentMemory(b *testing.B) {
	const hidden, mlp, layers, vocab = 768, 2048, 12, 10000
	shapes := [][2]int{{hidden, hidden}, {hidden, hidden}, {hidden, hidden}, {hidden, hidden},
		{mlp, hidden}, {mlp, hidden}, {hidden, mlp}}
	for b.Loop() {
		var linearParams, otherParams int64
		var q []*Weight
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		for l := 0; l < layers; l++ {
			for i, s := range shapes {
				x := gaussian(s[0]*s[1], uint64(l*10+i), 0.02)
				w, err := Quantize(x, s[0], s[1], "bfloat16", Default())
				if err != nil {
					b.Fatal(err)
				}
				q = append(q, w)
				linearParams += int64(len(x))
			}
			otherParams += 2 * hidden // the two norms
		}
		otherParams += 2*vocab*hidden + hidden // embeddings, head, final norm
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		var qBytes int64
		for _, w := range q {
			qBytes += int64(w.Bytes())
		}
		fp32 := 4 * (linearParams + otherParams)
		nf4 := qBytes + 4*otherParams
		b.ReportMetric(float64(linearParams+otherParams)/1e6, "Mparams")
		b.ReportMetric(float64(fp32)/(1<<20), "fp32-MiB")
		b.ReportMetric(float64(nf4)/(1<<20), "nf4-MiB")
		b.ReportMetric(float64(qBytes)/(1<<20), "nf4-linear-MiB")
		b.ReportMetric(8*float64(qBytes)/float64(linearParams), "bits/linear-param")
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20), "heap-linear-MiB")
		runtime.KeepAlive(q)
	}
}
