package tokenizer

import (
	"math/rand"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"rlhfstation/internal/testref"
)

// benchText returns about n bytes of the shared novel, repeated as needed.
func benchText(b *testing.B, n int) string {
	data, err := os.ReadFile(testref.SharedData(b, "corpus/moby-dick.txt"))
	if err != nil {
		b.Fatal(err)
	}
	s := string(data)
	return strings.Repeat(s, n/len(s)+1)[:n]
}

// BenchmarkEncode1MB encodes 1 MB of English prose with a fresh tokenizer (cold
// word cache) each iteration.
func BenchmarkEncode1MB(b *testing.B) {
	for _, name := range []string{"gpt2", "qwen3", "mistral", "gemma3"} {
		b.Run(name, func(b *testing.B) {
			path := testref.SharedData(b, "tokenizers/"+name+"/tokenizer.json")
			text := benchText(b, 1<<20)
			b.SetBytes(int64(len(text)))
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				tok, err := Load(path)
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				b.StartTimer()
				c0 := cpuTime()
				tok.Encode(text, false)
				cpu += cpuTime() - c0
			}
			b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}

// BenchmarkLoad reads each shared tokenizer.json; gemma3's (33 MB, 262,144 entries and
// 514,906 merges) is the largest in use.
func BenchmarkLoad(b *testing.B) {
	for _, name := range []string{"gpt2", "qwen3", "mistral", "gemma3"} {
		b.Run(name, func(b *testing.B) {
			path := testref.SharedData(b, "tokenizers/"+name+"/tokenizer.json")
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := Load(path); err != nil {
					b.Fatal(err)
				}
			}
			// The machine is shared: CPU time (all threads, GC included) is the steadier figure.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}

// cpuTime is the CPU time used by the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTrain4096 trains a 4096-entry vocabulary on about 10 MB of text in
// documents of 4 KB: the shared novel repeated (English prose), and seeded random
// words (a worst case: over a million distinct pre-tokens).
func BenchmarkTrain4096(b *testing.B) {
	novel := benchText(b, 10<<20)
	var prose []string
	for i := 0; i < len(novel); i += 4096 {
		prose = append(prose, novel[i:min(i+4096, len(novel))])
	}
	rng := rand.New(rand.NewSource(1))
	var random []string
	for total := 0; total < 10<<20; {
		var d strings.Builder
		for d.Len() < 4096 {
			d.WriteByte(' ')
			for range 1 + rng.Intn(9) {
				d.WriteByte(byte('a' + int(rng.ExpFloat64()*4)%26))
			}
			if rng.Intn(10) == 0 {
				d.WriteString(". 123\n")
			}
		}
		random = append(random, d.String())
		total += d.Len()
	}
	for _, c := range []struct {
		name string
		docs []string
	}{{"prose", prose}, {"random-words", random}} {
		b.Run(c.name, func(b *testing.B) {
			n := 0
			for _, d := range c.docs {
				n += len(d)
			}
			b.SetBytes(int64(n))
			for b.Loop() {
				if _, err := Train(c.docs, 4096, []string{"<|endoftext|>"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
