package pretrain

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"

	"rlhfstation/engine/data"
	"rlhfstation/engine/data/synth"
	"rlhfstation/engine/tokenizer"
)

// EOS is the one special token of a trained tokenizer, id 0: it ends every document, so it
// separates documents in the token stream and stops generation.
const EOS = "<|endoftext|>"

// Synthetic names the built-in corpus (engine/data/synth) as a corpus source.
const Synthetic = "synthetic"

// Documents returns the training and validation texts of a corpus. The synthetic corpus
// makes trainBytes of documents from seed and valBytes from another seed (seed+1): the
// same grammars, different documents. A text file gives its documents (blank-line
// separated, or one a line when it has no blank lines; JSONL `text` fields), every 20th
// held out for validation.
func Documents(corpus string, seed int64, trainBytes, valBytes int) (train, val []string, err error) {
	if corpus == "" || corpus == Synthetic {
		return synthTexts(seed, trainBytes), synthTexts(seed+1, valBytes), nil
	}
	if corpus == SyntheticTools {
		return withTools(seed, trainBytes), withTools(seed+1, valBytes), nil
	}
	docs, err := fileDocuments(corpus)
	if err != nil {
		return nil, nil, err
	}
	if len(docs) < 2 {
		return nil, nil, fmt.Errorf("corpus %s: %d document(s); need at least 2 (one for validation)", corpus, len(docs))
	}
	for i, d := range docs {
		if i%20 == 19 || (len(docs) < 20 && i == len(docs)-1) {
			val = append(val, d)
		} else {
			train = append(train, d)
		}
	}
	return train, val, nil
}

// SyntheticTools names the built-in corpus with the calculator's tool-call transcripts
// (synth.ToolTranscripts) making up ToolsShare of its bytes, one every few documents.
const SyntheticTools = "synthetic+tools"

// ToolsShare is the transcripts' share of the bytes of the SyntheticTools corpus.
const ToolsShare = 0.25

func withTools(seed int64, bytes int) []string {
	texts := synthTexts(seed, int(float64(bytes)*(1-ToolsShare)))
	var tools []string
	want := int(float64(bytes) * ToolsShare)
	size := 0
	for _, d := range synth.ToolTranscripts(seed, want/100+8) { // a transcript is over 100 bytes
		if size >= want {
			break
		}
		tools = append(tools, d.Text)
		size += len(d.Text)
	}
	out := make([]string, 0, len(texts)+len(tools))
	for i, j := 0, 0; i < len(texts) || j < len(tools); {
		// interleave in proportion to the counts
		if j < len(tools) && (i >= len(texts) || j*len(texts) <= i*len(tools)) {
			out, j = append(out, tools[j]), j+1
		} else {
			out, i = append(out, texts[i]), i+1
		}
	}
	return out
}

func synthTexts(seed int64, bytes int) []string {
	docs := synth.Generate(seed, bytes)
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i] = d.Text
	}
	return out
}

// fileDocuments reads a corpus file as documents.
func fileDocuments(path string) ([]string, error) {
	ex, format, err := data.ReadDocuments(path)
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	}
	if format == data.Documents && len(ex) == 1 && strings.Count(ex[0].Text, "\n") > 0 {
		// no blank lines: one document a line
		if ex, err = data.ReadFormat(path, data.Lines); err != nil {
			return nil, fmt.Errorf("corpus: %w", err)
		}
	}
	out := make([]string, 0, len(ex))
	for _, e := range ex {
		t := e.Text
		if t == "" {
			t = e.Prompt
		}
		if strings.TrimSpace(t) != "" {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("corpus %s: no text", path)
	}
	return out, nil
}

// TrainTokenizer learns a byte-level BPE tokenizer of vocab entries (EOS first) from the
// leading sampleBytes of texts (all of them when sampleBytes ≤ 0).
func TrainTokenizer(texts []string, vocab, sampleBytes int) (*tokenizer.Tokenizer, error) {
	sample := texts
	if sampleBytes > 0 {
		n := 0
		for i, t := range texts {
			n += len(t)
			if n >= sampleBytes {
				sample = texts[:i+1]
				break
			}
		}
	}
	tok, err := tokenizer.Train(sample, vocab, []string{EOS})
	if err != nil {
		return nil, fmt.Errorf("train tokenizer: %w", err)
	}
	return tok, nil
}

// Stream is a corpus tokenized into one sequence, each document followed by EOS (id 0).
type Stream struct {
	IDs    []int32
	Starts []int // where each document begins
}

// Tokenize encodes texts (in parallel: the tokenizer is safe for concurrent use) into one
// stream.
func Tokenize(tok *tokenizer.Tokenizer, texts []string) *Stream {
	enc := make([][]int, len(texts))
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(texts); i += workers {
				enc[i] = tok.Encode(texts[i], false).IDs
			}
		}()
	}
	wg.Wait()
	s := &Stream{Starts: make([]int, len(texts))}
	for i, ids := range enc {
		s.Starts[i] = len(s.IDs)
		for _, id := range ids {
			s.IDs = append(s.IDs, int32(id))
		}
		s.IDs = append(s.IDs, 0)
	}
	return s
}

// sampler draws training windows of T tokens from a stream. Half of them start at the
// beginning of a random document, so that the model learns to open a text with no context
// before it (how prompts reach it); the other half start anywhere, so that the tails of
// documents longer than T are seen too.
type sampler struct {
	s   *Stream
	T   int
	rng *rand.Rand
}

func newSampler(s *Stream, T int, seed uint64) (*sampler, error) {
	if len(s.IDs) < T+1 {
		return nil, fmt.Errorf("the training corpus has %d tokens, fewer than one window of %d: give more text or a shorter --context", len(s.IDs), T)
	}
	return &sampler{s: s, T: T, rng: rand.New(rand.NewPCG(seed, 0x77696e646f77))}, nil
}

// window fills dst (len T) with the next sampled window.
func (w *sampler) window(dst []int) {
	last := len(w.s.IDs) - w.T // the latest start that fits
	var start int
	if w.rng.IntN(2) == 0 {
		start = w.s.Starts[w.rng.IntN(len(w.s.Starts))]
		if start > last {
			start = w.rng.IntN(last + 1)
		}
	} else {
		start = w.rng.IntN(last + 1)
	}
	for i := range dst {
		dst[i] = int(w.s.IDs[start+i])
	}
}

// evalWindows cuts a stream into consecutive windows of T tokens, at most maxTokens in
// all (the whole stream when maxTokens ≤ 0); a last window shorter than T is kept when it
// has at least 2 tokens.
func evalWindows(s *Stream, T, maxTokens int) [][]int {
	n := len(s.IDs)
	if maxTokens > 0 && maxTokens < n {
		n = maxTokens
	}
	var out [][]int
	for lo := 0; lo+1 < n; lo += T {
		hi := min(lo+T, n)
		w := make([]int, hi-lo)
		for i := range w {
			w[i] = int(s.IDs[lo+i])
		}
		out = append(out, w)
	}
	return out
}
