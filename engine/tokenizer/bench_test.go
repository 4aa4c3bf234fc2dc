package tokenizer

import (
	"os"
	"strings"
	"testing"

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
	for _, name := range []string{"gpt2", "qwen3"} {
		b.Run(name, func(b *testing.B) {
			path := testref.SharedData(b, "tokenizers/"+name+"/tokenizer.json")
			text := benchText(b, 1<<20)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				b.StopTimer()
				tok, err := Load(path)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				tok.Encode(text, false)
			}
		})
	}
}

func BenchmarkLoad(b *testing.B) {
	for _, name := range []string{"gpt2", "qwen3"} {
		b.Run(name, func(b *testing.B) {
			path := testref.SharedData(b, "tokenizers/"+name+"/tokenizer.json")
			for b.Loop() {
				if _, err := Load(path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTrain4096 trains a 4096-entry vocabulary on about 10 MB of text
// (documents of 4 KB).
func BenchmarkTrain4096(b *testing.B) {
	text := benchText(b, 10<<20)
	var docs []string
	for i := 0; i < len(text); i += 4096 {
		docs = append(docs, text[i:min(i+4096, len(text))])
	}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := Train(docs, 4096, []string{"<|endoftext|>"}); err != nil {
			b.Fatal(err)
		}
	}
}
