// Package pretrain trains a small llama-family language model from scratch, with
// full-parameter gradients: a byte-level BPE tokenizer learned from the corpus (the
// built-in synthetic one or a text file), windows of the tokenized corpus sampled with a
// seed, the mean next-token cross-entropy, AdamW with a cosine schedule after a warm-up,
// clipping by global norm, and a held-out validation loss. It is how the built-in model
// is made, and it is deterministic for a seed on one machine.
package pretrain

import (
	"context"
	"fmt"
	"math"
	"rlhfstation/engine/model"
	"rlhfstation/engine/optim"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/stats"
	"time"
)

// Options describes a pretraining run. Start from Defaults: New fills zero sizes, counts
// and rates from it, but takes WeightDecay, Warmup, EvalEvery and EvalTokens as given (0
// is a meaningful value for each).
type Options struct {
	// Config is the model's shape (llama family). Vocab is the tokenizer's size; it
	// becomes the trained tokenizer's actual size, which is smaller when the corpus runs out
	// of pairs to merge. MaxPos is the context length and the window length.
	Config model.Config

	Corpus         string // Synthetic (default) or a text file
	CorpusBytes    int    // size of the synthetic training corpus
	ValBytes       int    // size of the synthetic validation corpus
	TokenizerBytes int    // the tokenizer learns from this much of the training text

	Steps       int
	Batch       int     // windows per step
	LR          float64 // peak learning rate
	Warmup      int     // warm-up steps (linear from 0); a tenth of Steps when it is not below Steps
	WeightDecay float64 // on matrices (embedding included), never on norm weights
	Clip        float64 // global gradient-norm clip; <0 disables
	Seed        uint64

	EvalEvery  int // validation every this many steps (0: only at the end)
	EvalTokens int // validation tokens per evaluation (0: the whole validation stream)

	// From, when set, is a model folder this run continues to train (its weights, tokenizer
	// and shape; Config and TokenizerBytes are then ignored): continued pretraining.
	From string
}

// Defaults are the settings of the built-in model's recipe, the defaults of
// `rlhfstation pretrain`.
func Defaults() Options {
	return Options{
		Config: model.Config{ModelType: "llama", Vocab: 2048, Dim: 192, Layers: 4, Heads: 6, KVHeads: 2,
			Hidden: 512, MaxPos: 256, NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true, BOS: -1},
		Corpus: Synthetic, CorpusBytes: 20 << 20, ValBytes: 256 << 10, TokenizerBytes: 4 << 20,
		Steps: 3600, Batch: 8, LR: 5e-3, Warmup: 100, WeightDecay: 0.1, Clip: 1, Seed: 1,
		EvalEvery: 300, EvalTokens: 32768,
	}
}

// withDefaults fills the zero fields from Defaults (the shape only when none of it is
// given).
func (o Options) withDefaults() Options {
	d := Defaults()
	c := &o.Config
	if c.ModelType == "" {
		c.ModelType = "llama"
	}
	def := func(v *int, dv int) {
		if *v == 0 {
			*v = dv
		}
	}
	def(&c.Vocab, d.Config.Vocab)
	def(&c.Dim, d.Config.Dim)
	def(&c.Layers, d.Config.Layers)
	def(&c.Heads, d.Config.Heads)
	def(&c.Hidden, d.Config.Hidden)
	def(&c.MaxPos, d.Config.MaxPos)
	if c.NormEps == 0 {
		c.NormEps = d.Config.NormEps
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = d.Config.RopeTheta
	}
	if o.Corpus == "" {
		o.Corpus = Synthetic
	}
	def(&o.CorpusBytes, d.CorpusBytes)
	def(&o.ValBytes, d.ValBytes)
	def(&o.TokenizerBytes, d.TokenizerBytes)
	def(&o.Steps, d.Steps)
	def(&o.Batch, d.Batch)
	if o.LR == 0 {
		o.LR = d.LR
	}
	if o.Clip == 0 {
		o.Clip = d.Clip
	}
	if o.Warmup >= o.Steps {
		o.Warmup = o.Steps / 10
	}
	return o
}

// OptionsError is a bad setting (as opposed to a corpus that cannot be read).
type OptionsError struct{ Msg string }

func (e *OptionsError) Error() string { return "pretrain: " + e.Msg }

func (o *Options) validate() error {
	c := &o.Config
	bad := func(format string, a ...any) error { return &OptionsError{fmt.Sprintf(format, a...)} }
	switch {
	case c.Family() != model.Llama:
		return bad("model type %q is not of the llama family", c.ModelType)
	case c.Vocab < 256+2:
		return bad("vocabulary %d is too small: a byte-level tokenizer needs the 256 bytes, the EOS token and at least one merge", c.Vocab)
	case c.MaxPos < 2:
		return bad("context %d is too short", c.MaxPos)
	case o.Steps < 1 || o.Batch < 1:
		return bad("steps %d and batch %d must be positive", o.Steps, o.Batch)
	case o.LR < 0 || o.WeightDecay < 0 || o.Warmup < 0 || o.EvalEvery < 0 || o.EvalTokens < 0:
		return bad("negative learning rate, weight decay, warm-up or evaluation setting")
	}
	probe := *c
	if err := probe.Validate(); err != nil {
		return bad("%v", err)
	}
	return nil
}

// Progress is what a run reports after each step.
type Progress struct {
	Step, Steps  int     // steps done, of Steps
	Loss         float64 // this step's mean training loss (nats per token)
	LR           float64 // the learning rate of this step's update
	GradNorm     float64 // before clipping
	Tokens       int     // tokens trained on so far
	TokensPerSec float64 // over the training steps so far (evaluations excluded)
	Elapsed, ETA time.Duration
	ValLoss      float64 // the validation loss measured at this step, NaN when not measured
}

// Result is what a finished (or interrupted) run reports.
type Result struct {
	Steps       int     // steps done
	TrainLoss   float64 // mean training loss over the last (up to) 50 steps
	ValLoss     float64 // final validation loss
	UniformLoss float64 // ln V, the loss of a uniform guess
	Tokens      int
	Params      int
	Elapsed     time.Duration
	Interrupted bool
	Skipped     int // steps whose gradient was not finite (no update)
}

// Trainer holds a run: the corpus, the tokenizer, the model and the optimizer.
type Trainer struct {
	Model     *model.Model
	Tokenizer *tokenizer.Tokenizer
	Opts      Options

	train, val *Stream
	sampler    *sampler
	up         *updater
	seqs       [][]int
	step       int
	skipped    int
	losses     []float64
}

// New prepares a run: it makes the corpus, trains the tokenizer, tokenizes the corpus and
// draws the initial weights.
func New(o Options) (*Trainer, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	trainDocs, valDocs, err := Documents(o.Corpus, int64(o.Seed), o.CorpusBytes, o.ValBytes)
	if err != nil {
		return nil, err
	}
	var tok *tokenizer.Tokenizer
	var from *model.Model
	if o.From != "" {
		if from, err = model.Load(o.From); err != nil {
			return nil, err
		}
		if tok, err = tokenizer.Load(o.From); err != nil {
			return nil, err
		}
		o.Config = from.Config
	} else if tok, err = TrainTokenizer(trainDocs, o.Config.Vocab, o.TokenizerBytes); err != nil {
		return nil, err
	}
	t := &Trainer{Tokenizer: tok}
	o.Config.Vocab = tok.VocabSize()
	o.Config.BOS, o.Config.EOS = -1, []int{0}
	t.Opts = o
	t.train, t.val = Tokenize(tok, trainDocs), Tokenize(tok, valDocs)
	if t.sampler, err = newSampler(t.train, o.Config.MaxPos, o.Seed); err != nil {
		return nil, err
	}
	if from != nil {
		if from.Config.Vocab != tok.VocabSize() {
			return nil, &OptionsError{fmt.Sprintf("%s: the model's vocabulary (%d) is not its tokenizer's (%d)", o.From, from.Config.Vocab, tok.VocabSize())}
		}
		t.Model = from
	} else if t.Model, err = NewModel(o.Config, o.Seed); err != nil {
		return nil, err
	}
	if t.up, err = newUpdater(t.Model, o); err != nil {
		return nil, err
	}
	t.seqs = make([][]int, o.Batch)
	for i := range t.seqs {
		t.seqs[i] = make([]int, o.Config.MaxPos)
	}
	return t, nil
}

// NewModel draws the initial weights: N(0, 0.02²) as Hugging Face does, with the
// projections that write into the residual stream (o_proj, down_proj) scaled by
// 1/√(2·Layers) as GPT-2 does, which keeps the stream's variance flat at the start.
func NewModel(c model.Config, seed uint64) (*model.Model, error) {
	m, err := model.NewRandom(c, seed)
	if err != nil {
		return nil, err
	}
	scale := float32(1 / math.Sqrt(2*float64(c.Layers)))
	for _, l := range m.Layers {
		for _, lin := range []*model.Linear{l.O, l.Down} {
			if d, ok := lin.W.(*model.Dense); ok {
				for i := range d.W {
					d.W[i] *= scale
				}
			}
		}
	}
	return m, nil
}

// Tokens reports the sizes of the tokenized training and validation corpora.
func (t *Trainer) Tokens() (train, val int) { return len(t.train.IDs), len(t.val.IDs) }

// Step runs one training step: a batch of windows, forward, backward, clip, AdamW.
func (t *Trainer) Step() (Progress, error) {
	for _, s := range t.seqs {
		t.sampler.window(s)
	}
	lr := t.Opts.LR * schedule(t.Opts).Factor(t.step)
	loss, norm, err := t.up.step(t.seqs, lr)
	if err != nil {
		return Progress{}, err
	}
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		t.skipped++
	}
	t.step++
	t.losses = append(t.losses, loss)
	return Progress{Step: t.step, Steps: t.Opts.Steps, Loss: loss, LR: lr, GradNorm: norm,
		Tokens: t.step * t.Opts.Batch * t.Opts.Config.MaxPos, ValLoss: math.NaN()}, nil
}

func schedule(o Options) optim.Schedule {
	return optim.Schedule{Kind: "cosine", Warmup: o.Warmup, Total: o.Steps}
}

// ValLoss is the mean next-token loss over the validation stream (its first EvalTokens
// tokens), cut into windows of the context length.
func (t *Trainer) ValLoss() (float64, error) {
	return MeanLoss(t.Model, evalWindows(t.val, t.Opts.Config.MaxPos, t.Opts.EvalTokens))
}

// MeanLoss is the mean of −log p(token | the tokens before it in its sequence) over every
// token but each sequence's first.
func MeanLoss(m *model.Model, seqs [][]int) (float64, error) {
	lp, err := m.LogProbs(seqs, 1, model.AdaptersOn)
	if err != nil {
		return 0, err
	}
	sum, n := 0.0, 0
	for _, s := range lp {
		for _, v := range s[1:] {
			sum -= float64(v)
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("loss: no tokens to predict")
	}
	return sum / float64(n), nil
}

// Run trains for the remaining steps, calling progress after each one (when not nil). When
// ctx ends it stops after the step in flight and returns the result so far, Interrupted
// set; the model is then usable as it stands.
func (t *Trainer) Run(ctx context.Context, progress func(Progress)) (*Result, error) {
	start := time.Now()
	var trainTime time.Duration
	firstStep := t.step
	res := &Result{Params: t.Model.NumParams(), UniformLoss: math.Log(float64(t.Opts.Config.Vocab))}
	for t.step < t.Opts.Steps {
		if ctx.Err() != nil {
			res.Interrupted = true
			break
		}
		s0 := time.Now()
		p, err := t.Step()
		if err != nil {
			return nil, err
		}
		trainTime += time.Since(s0)
		done := t.step - firstStep
		p.TokensPerSec = float64(done*t.Opts.Batch*t.Opts.Config.MaxPos) / trainTime.Seconds()
		p.ETA = time.Duration(float64(trainTime) / float64(done) * float64(t.Opts.Steps-t.step))
		if t.Opts.EvalEvery > 0 && t.step%t.Opts.EvalEvery == 0 && t.step < t.Opts.Steps {
			if p.ValLoss, err = t.ValLoss(); err != nil {
				return nil, err
			}
		}
		p.Elapsed = time.Since(start)
		if progress != nil {
			progress(p)
		}
	}
	var err error
	if res.ValLoss, err = t.ValLoss(); err != nil {
		return nil, err
	}
	res.Steps, res.Skipped = t.step, t.skipped
	res.Tokens = t.step * t.Opts.Batch * t.Opts.Config.MaxPos
	res.TrainLoss = recentMean(t.losses, 50)
	res.Elapsed = time.Since(start)
	return res, nil
}

// recentMean is the mean of the last n values of v; NaN for none.
func recentMean(v []float64, n int) float64 {
	mean, _ := stats.MeanStd(v[max(0, len(v)-n):])
	return mean
}

// updater turns batches into parameter updates: the mean cross-entropy's gradient over
// all parameters, clipped, applied by AdamW with weight decay on the matrices only.
type updater struct {
	m      *model.Model
	tape   *model.Tape
	grads  *model.Grads
	all    []*optim.Param
	decay  *optim.AdamW // matrices
	plain  *optim.AdamW // norm weights and biases
	clip   float64
	dlogp  [][]float32
	target int // tokens the loss is averaged over
}

func newUpdater(m *model.Model, o Options) (*updater, error) {
	grads, err := m.NewGrads()
	if err != nil {
		return nil, err
	}
	u := &updater{m: m, tape: m.NewTape(), grads: grads, clip: o.Clip}
	var mats, vecs []*optim.Param
	for _, p := range m.Params {
		data, err := m.Buf(p)
		if err != nil {
			return nil, err
		}
		op := &optim.Param{Name: p.Name, Data: data, Grad: u.grads.Of(p)}
		u.all = append(u.all, op)
		if len(p.Shape) >= 2 {
			mats = append(mats, op)
		} else {
			vecs = append(vecs, op)
		}
	}
	if u.decay, err = optim.NewAdamW(m.Backend(), mats, 0.9, 0.95, 1e-8, o.WeightDecay); err != nil {
		return nil, err
	}
	if u.plain, err = optim.NewAdamW(m.Backend(), vecs, 0.9, 0.95, 1e-8, 0); err != nil {
		return nil, err
	}
	return u, nil
}

// step trains on seqs with learning rate lr and returns the batch's mean loss and the
// gradient norm before clipping; a non-finite norm skips the update.
func (u *updater) step(seqs [][]int, lr float64) (loss, norm float64, err error) {
	if len(u.dlogp) != len(seqs) || len(u.dlogp[0]) != len(seqs[0]) {
		u.dlogp = make([][]float32, len(seqs))
		u.target = 0
		for i, s := range seqs {
			u.dlogp[i] = make([]float32, len(s))
			u.target += len(s) - 1
		}
		for _, d := range u.dlogp {
			for j := 1; j < len(d); j++ {
				d[j] = -1 / float32(u.target)
			}
		}
	}
	if err := u.m.ForwardTrain(u.tape, seqs, model.TrainOptions{}); err != nil {
		return 0, 0, err
	}
	for _, s := range u.tape.LogProbs {
		for _, v := range s[1:] {
			loss -= float64(v)
		}
	}
	loss /= float64(u.target)
	u.grads.Zero()
	if err := u.m.Backward(u.tape, u.dlogp, u.grads); err != nil {
		return 0, 0, err
	}
	if norm, err = optim.ClipGradNorm(u.m.Backend(), u.all, u.clip); err != nil {
		return 0, 0, err
	}
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return loss, norm, nil
	}
	if err := u.decay.Update(lr); err != nil {
		return 0, 0, err
	}
	return loss, norm, u.plain.Update(lr)
}
