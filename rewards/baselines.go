package rewards

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"rlhfstation/internal/atomicfile"
	"rlhfstation/internal/stats"
	"sort"
	"time"
)

// BaselinesFormat names the layout of baselines.json.
const BaselinesFormat = "rlhfstation-baselines/1"

// Percentiles are the p5, p25, p50, p75 and p95 of one level over the samples.
type Percentiles struct {
	P5  float64 `json:"p5"`
	P25 float64 `json:"p25"`
	P50 float64 `json:"p50"`
	P75 float64 `json:"p75"`
	P95 float64 `json:"p95"`
}

// LevelPercentiles holds Percentiles per level.
type LevelPercentiles struct {
	Word     Percentiles `json:"word"`
	Phrase   Percentiles `json:"phrase"`
	Sentence Percentiles `json:"sentence"`
}

// Baselines are the B_l of DESIGN §6.1 and what baselines.json records about them.
type Baselines struct {
	Format        string           `json:"format"`
	Levels        Levels           `json:"baselines"` // B_l: geometric mean of P_l over the samples
	Samples       int              `json:"samples"`
	Std           Levels           `json:"std"` // sample standard deviation of P_l
	Percentiles   LevelPercentiles `json:"percentiles"`
	ModelHash     string           `json:"model_hash"`
	TokenizerHash string           `json:"tokenizer_hash"`
	Created       time.Time        `json:"created"`
	Source        string           `json:"source"` // the reference data the samples came from
	// Text is what was measured (the preset's `[ppl] text`); absent in files that predate it,
	// which measured whole texts.
	Text PPLText `json:"text,omitempty"`
}

// CheckText refuses baselines of another kind of text than want (whole completions against
// a preset that measures the reasoning, or the reverse) unless accept, in which case it
// returns a warning to show instead of an error.
func (b Baselines) CheckText(want PPLText, accept bool) (warning string, err error) {
	got, _ := ParsePPLText(string(b.Text))
	want, _ = ParsePPLText(string(want))
	if got == want {
		return "", nil
	}
	what := fmt.Sprintf("the baselines measured %s but the preset's perplexity reward measures %s", got.describe(), want.describe())
	if accept {
		return "using baselines of another kind of text (--accept-baselines): " + what, nil
	}
	return "", fmt.Errorf("%s; recompute them with `rlhfstation baseline --preset PRESET` or pass --accept-baselines to use them anyway", what)
}

// SampleError names the reference sample whose level cannot make a baseline.
type SampleError struct {
	Sample int    // index into the samples given to ComputeBaselines
	Level  string // word, phrase or sentence
	Value  float64
	Why    string
}

func (e *SampleError) Error() string {
	return fmt.Sprintf("sample %d: %s perplexity %g %s", e.Sample, e.Level, e.Value, e.Why)
}

// ComputeBaselines aggregates the levels of reference samples: B_l is the geometric mean of
// P_l over the samples, with each level's sample std and percentiles. Samples with a NaN or
// non-positive level (texts with no word) are left out; a sample whose perplexity overflows
// (+Inf), or levels too spread for their std to exist, are a SampleError naming the sample.
func ComputeBaselines(samples []Levels) (Baselines, error) {
	var word, phrase, sentence []float64
	var index []int
	for i, s := range samples {
		for _, l := range []struct {
			name string
			v    float64
		}{{"word", s.Word}, {"phrase", s.Phrase}, {"sentence", s.Sentence}} {
			if math.IsInf(l.v, 0) {
				return Baselines{}, &SampleError{Sample: i, Level: l.name, Value: l.v, Why: "overflows: the model finds this text impossibly unlikely (is it text at all?)"}
			}
		}
		if !positiveFinite(s.Word) || !positiveFinite(s.Phrase) || !positiveFinite(s.Sentence) {
			continue
		}
		word = append(word, s.Word)
		phrase = append(phrase, s.Phrase)
		sentence = append(sentence, s.Sentence)
		index = append(index, i)
	}
	if len(word) == 0 {
		return Baselines{}, errors.New("no sample with words to compute baselines from")
	}
	b := Baselines{
		Format:  BaselinesFormat,
		Levels:  Levels{geometricMean(word), geometricMean(phrase), geometricMean(sentence)},
		Samples: len(word),
		Std:     Levels{sampleStd(word), sampleStd(phrase), sampleStd(sentence)},
		Percentiles: LevelPercentiles{
			Word:     percentiles(word),
			Phrase:   percentiles(phrase),
			Sentence: percentiles(sentence),
		},
	}
	for _, l := range []struct {
		name string
		std  float64
		xs   []float64
	}{{"word", b.Std.Word, word}, {"phrase", b.Std.Phrase, phrase}, {"sentence", b.Std.Sentence, sentence}} {
		if math.IsInf(l.std, 0) || math.IsNaN(l.std) {
			top := 0
			for i, x := range l.xs {
				if x > l.xs[top] {
					top = i
				}
			}
			return Baselines{}, &SampleError{Sample: index[top], Level: l.name, Value: l.xs[top],
				Why: "is so large that the samples' spread overflows: the model finds this text impossibly unlikely (is it text at all?)"}
		}
	}
	return b, nil
}

func positiveFinite(x float64) bool { return x > 0 && !math.IsInf(x, 1) }

func geometricMean(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += math.Log(x)
	}
	return math.Exp(sum / float64(len(xs)))
}

// sampleStd is the standard deviation with Bessel's correction; 0 for one value.
func sampleStd(xs []float64) float64 {
	_, std := stats.MeanStd(xs)
	return std
}

// percentiles interpolates linearly between order statistics (numpy's default).
func percentiles(xs []float64) Percentiles {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	at := func(q float64) float64 {
		pos := q / 100 * float64(len(s)-1)
		lo := int(math.Floor(pos))
		if lo >= len(s)-1 {
			return s[len(s)-1]
		}
		return s[lo] + (pos-float64(lo))*(s[lo+1]-s[lo])
	}
	return Percentiles{at(5), at(25), at(50), at(75), at(95)}
}

// Validate checks that loaded baselines can be divided by.
func (b Baselines) Validate() error {
	if b.Format != BaselinesFormat {
		return fmt.Errorf("format %q, want %q", b.Format, BaselinesFormat)
	}
	for _, v := range []struct {
		name string
		x    float64
	}{{"word", b.Levels.Word}, {"phrase", b.Levels.Phrase}, {"sentence", b.Levels.Sentence}} {
		if !positiveFinite(v.x) {
			return fmt.Errorf("baseline %s = %v: it must be a finite number above 0", v.name, v.x)
		}
	}
	if b.Samples < 1 {
		return fmt.Errorf("samples = %d: baselines need at least one sample", b.Samples)
	}
	return nil
}

// LoadBaselines reads and validates a baselines.json file.
func LoadBaselines(path string) (Baselines, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Baselines{}, err
	}
	var b Baselines
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return Baselines{}, fmt.Errorf("%s: %w", path, jsonErrorLine(data, err))
	}
	if err := b.Validate(); err != nil {
		return Baselines{}, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// Save writes b as indented JSON, atomically: a temporary file in the same folder, fsync,
// rename, so a crash never leaves half a file.
func (b Baselines) Save(path string) error {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(data, '\n'), 0o644)
}

// ErrBaselinesMismatch is wrapped by Check's error when the hashes differ.
var ErrBaselinesMismatch = errors.New("baselines were made with another model or tokenizer")

// Check refuses baselines made with another model or tokenizer (content hashes differ) unless
// accept is true, in which case it returns a warning to show instead of an error.
func (b Baselines) Check(modelHash, tokenizerHash string, accept bool) (warning string, err error) {
	var what string
	switch {
	case b.ModelHash != modelHash:
		what = fmt.Sprintf("the model's hash is %s but the baselines were made with model %s", short(modelHash), short(b.ModelHash))
	case b.TokenizerHash != tokenizerHash:
		what = fmt.Sprintf("the tokenizer's hash is %s but the baselines were made with tokenizer %s", short(tokenizerHash), short(b.TokenizerHash))
	default:
		return "", nil
	}
	if accept {
		return "using baselines made with another model or tokenizer (--accept-baselines): " + what, nil
	}
	return "", fmt.Errorf("%w: %s; recompute them with `rlhfstation baseline` or pass --accept-baselines to use them anyway", ErrBaselinesMismatch, what)
}

func short(hash string) string {
	if hash == "" {
		return "(none)"
	}
	if len(hash) > 19 {
		return hash[:19] + "…"
	}
	return hash
}

// ContentHash is "sha256:<hex>" over the contents of the files in order, each preceded by
// its length so that different splits of the same bytes differ. Use it for model weights
// (all safetensors shards, sorted) and for tokenizer.json.
func ContentHash(paths ...string) (string, error) {
	h := sha256.New()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		st, err := f.Stat()
		if err == nil {
			fmt.Fprintf(h, "%d\n", st.Size())
			_, err = io.Copy(h, f)
		}
		f.Close()
		if err != nil {
			return "", fmt.Errorf("hashing %s: %w", p, err)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// FolderHashes are the content hashes baselines.json records for a Hugging Face model folder:
// the model's over config.json and every *.safetensors file (sorted by name), the
// tokenizer's over tokenizer.json ("sha256:" + the hex SHA-256 of its bytes).
func FolderHashes(dir string) (model, tokenizer string, err error) {
	shards, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return "", "", err
	}
	if len(shards) == 0 {
		return "", "", fmt.Errorf("%s: no *.safetensors file to hash", dir)
	}
	sort.Strings(shards)
	if model, err = ContentHash(append([]string{filepath.Join(dir, "config.json")}, shards...)...); err != nil {
		return "", "", err
	}
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return "", "", err
	}
	sum := sha256.Sum256(data)
	return model, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// jsonErrorLine adds the line number to a JSON syntax or type error.
func jsonErrorLine(data []byte, err error) error {
	var off int64 = -1
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	}
	if off < 0 || off > int64(len(data)) {
		return err
	}
	return fmt.Errorf("line %d: %w", 1+bytes.Count(data[:off], []byte("\n")), err)
}

// Chunk is a range [Start, End) of token indexes.
type Chunk struct{ Start, End int }

// SplitChunks cuts a reference document's tokens into baseline samples of at most maxTokens
// tokens (DESIGN §6.1: "each document, or chunk of at most 256 tokens, is one sample"). A cut
// goes before a token that starts a word when the chunk has one past its first half, so that
// words stay whole; otherwise at maxTokens.
func SplitChunks(text string, spans []Span, maxTokens int) []Chunk {
	if maxTokens < 1 {
		maxTokens = 1
	}
	var out []Chunk
	for start := 0; start < len(spans); {
		end := start + maxTokens
		if end >= len(spans) {
			out = append(out, Chunk{start, len(spans)})
			break
		}
		for cut := end; cut > start+maxTokens/2; cut-- {
			if startsWord(text, spans, cut) {
				end = cut
				break
			}
		}
		out = append(out, Chunk{start, end})
		start = end
	}
	return out
}

// startsWord reports whether token i begins with a space or follows one: no word straddles
// a cut before it.
func startsWord(text string, spans []Span, i int) bool {
	s := spans[i]
	if s.Start < s.End && isSpaceByte(text[s.Start]) {
		return true
	}
	return s.Start > 0 && isSpaceByte(text[s.Start-1])
}

func isSpaceByte(b byte) bool {
	return b == ' ' || b == '\n' || b == '\t' || b == '\r' || b == '\v' || b == '\f'
}
