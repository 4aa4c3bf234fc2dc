package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"rlhfstation/engine/backend"
)

// GenerateOptions controls Generate.
type GenerateOptions struct {
	MaxNewTokens int
	Temperature  float32 // 0: greedy (argmax, lowest id on ties)
	TopK         int     // keep the K most likely tokens; 0: all
	TopP         float32 // keep the smallest set whose probability reaches P; 0 or ≥1: all
	// MinP keeps the tokens at least MinP times as likely as the most likely (0: off), and
	// RepetitionPenalty divides the positive logits and multiplies the negative ones of the
	// tokens already in the prompt or completion (0 or 1: off), as transformers does; the
	// backend draws with both (backend.Penalties: in the captured decode step, on the device),
	// and LogProbs stay those of softmax(logits/T).
	MinP              float32
	RepetitionPenalty float32
	// Sequence i samples from its own PCG generator seeded (Seed, Stream+i), so a batch
	// gives each sequence the tokens it would get alone with Stream+i. A trainer draws Seed
	// from a generator of its own whose state it saves with its checkpoints.
	Seed, Stream uint64
	StopIDs      []int // stop tokens besides the config's EOS ids (the stop token is kept)
	NoEOS        bool  // ignore the config's EOS ids
	// OnLogits, when set, sees the raw logits (before temperature) that each new token of
	// sequence seq is drawn from, step counting from 0. The slice is reused afterwards.
	OnLogits func(seq, step int, logits []float32)
	// Adapters: AdaptersOn (the zero value) samples from the policy, AdaptersOff from the base.
	Adapters Adapters
	// Digits, when set with OnDigits, has Generate form NTL's digit distribution of every
	// new token on the backend (Backend.DigitProbs: the softmax over the logits of the
	// tokens Digits.IDs, summed per digit value) and show it to OnDigits: 10 values per
	// sequence cross to the host instead of a logit row. The slice is reused afterwards.
	Digits   *DigitTokens
	OnDigits func(seq, step int, probs []float32)
	// Eager runs the decode step's ops one by one instead of replaying the step as a
	// captured graph (vLLM's enforce_eager): the same tokens, more launches on a GPU.
	Eager bool
}

// DigitTokens are the vocabulary's digit tokens: Values[i] is the digit of token IDs[i].
type DigitTokens struct{ IDs, Values []int }

// place puts the digit tokens on b (I32 ids, then values, in one buffer).
func (d *DigitTokens) place(b backend.Backend) (backend.Buf, error) {
	if len(d.IDs) == 0 || len(d.IDs) != len(d.Values) {
		return backend.Buf{}, fmt.Errorf("%d digit tokens with %d values", len(d.IDs), len(d.Values))
	}
	x := make([]int32, 2*len(d.IDs))
	for i, id := range d.IDs {
		x[i], x[len(d.IDs)+i] = int32(id), int32(d.Values[i])
	}
	return b.Place(x, backend.I32)
}

// Generation is what Generate returns, per sequence.
type Generation struct {
	Tokens [][]int // new tokens, a stop token included
	// LogProbs[i][t] = log p(Tokens[i][t]) under softmax(logits/Temperature) over the whole
	// vocabulary (before top-k/top-p truncation; under T=1 when greedy): the distribution
	// that GRPO's log-probs use.
	LogProbs [][]float32
	Cut      []bool // ended by MaxNewTokens or the context, not by a stop token
	// Prefilled counts the tokens the call ran through its prefill: every prompt token with
	// Generate, only those a cache did not hold yet with GenerateOn.
	Prefilled int
}

// Generate continues each prompt, batched over a key/value cache: one prefill of all
// prompts (in groups of at most maxPassRows tokens), then one decode step per new token for
// the sequences still running. The logits stay on the backend: Sample draws from them
// there, and only the ids and their log-probs cross to the host (and the logits OnLogits
// asks to see).
func (m *Model) Generate(prompts [][]int, o GenerateOptions) (*Generation, error) {
	capacity := 0
	for _, p := range prompts {
		capacity = max(capacity, len(p)+max(0, min(o.MaxNewTokens, m.Config.Context()-len(p))))
	}
	c := m.NewCache(len(prompts), capacity)
	defer c.Free()
	slots := make([]int, len(prompts))
	for i := range slots {
		slots[i] = i
	}
	return m.GenerateOn(c, slots, prompts, o)
}

// GenerateOn is Generate on a cache the caller keeps from one call to the next, as a
// multi-turn episode does: inputs[i], the whole history of sequence i, continues cache slot
// slots[i], and only what the slot does not hold yet is prefilled (the last token of the
// previous call, never fed, and what was appended since). The slot's held tokens are checked
// against the history: from the first that differs (or in a slot this function did not fill)
// the history is prefilled again. A sequence may make at most c.Capacity tokens in all.
// Sequence i draws from the generator (Seed, Stream+i), whatever its slot, so the tokens are
// those that Generate gives for the same histories.
func (m *Model) GenerateOn(c *Cache, slots []int, inputs [][]int, o GenerateOptions) (g *Generation, err error) {
	B, V := len(inputs), m.Config.Vocab
	if o.MaxNewTokens < 0 || o.Temperature < 0 || o.TopK < 0 || o.TopP < 0 || o.MinP < 0 || o.RepetitionPenalty < 0 {
		return nil, fmt.Errorf("generate: negative option (max new tokens %d, temperature %g, top-k %d, top-p %g, min-p %g, repetition penalty %g)",
			o.MaxNewTokens, o.Temperature, o.TopK, o.TopP, o.MinP, o.RepetitionPenalty)
	}
	if len(slots) != B {
		return nil, fmt.Errorf("generate: %d cache slots for %d sequences", len(slots), B)
	}
	if c.ids == nil {
		c.ids = make([][]int, c.Batch)
	}
	seqOf := make([]int, c.Batch) // the sequence in slot s, -1 when it takes no part
	for s := range seqOf {
		seqOf[s] = -1
	}
	for i, s := range slots {
		if s < 0 || s >= c.Batch || seqOf[s] >= 0 {
			return nil, fmt.Errorf("generate: cache slot %d of sequence %d is outside the cache of %d or taken twice", s, i, c.Batch)
		}
		seqOf[s] = i
	}
	g = &Generation{Tokens: make([][]int, B), LogProbs: make([][]float32, B), Cut: make([]bool, B)}
	limit := make([]int, B)
	for i, p := range inputs {
		if len(p) == 0 {
			return nil, fmt.Errorf("generate: prompt %d is empty", i)
		}
		if len(p) > m.Config.Context() {
			return nil, fmt.Errorf("generate: prompt %d has %d tokens, more than the model's context of %d", i, len(p), m.Config.Context())
		}
		if len(p) > c.Capacity {
			return nil, fmt.Errorf("generate: prompt %d has %d tokens, more than its cache holds (%d)", i, len(p), c.Capacity)
		}
		limit[i] = min(o.MaxNewTokens, c.Capacity-len(p))
	}
	// What the slots fed hold afterwards; a failed call leaves it unknown, and the next one
	// prefills them anew.
	defer func() {
		for i, s := range slots {
			switch {
			case limit[i] <= 0: // not fed: as it was
			case err != nil:
				c.ids[s] = nil
			default:
				c.ids[s] = append(append(c.ids[s][:0:0], inputs[i]...), g.Tokens[i]...)[:c.Len[s]]
			}
		}
	}()
	// Callbacks and generators speak of sequences; the passes below, of slots.
	if f := o.OnLogits; f != nil {
		o.OnLogits = func(s, step int, l []float32) { f(seqOf[s], step, l) }
	}
	if f := o.OnDigits; f != nil {
		o.OnDigits = func(s, step int, p []float32) { f(seqOf[s], step, p) }
	}
	stop := slices.Clone(o.StopIDs)
	if !o.NoEOS {
		stop = append(stop, m.Config.EOS...)
	}
	rngs := make([]*rand.Rand, c.Batch)
	for i, s := range slots {
		rngs[s] = rand.New(rand.NewPCG(o.Seed, o.Stream+uint64(i)))
	}
	feed := make([][]int, c.Batch)
	active := 0
	for i, p := range inputs {
		s := slots[i]
		if limit[i] <= 0 {
			g.Cut[i] = true
			continue
		}
		// keep the held prefix, but feed at least the last token: its logits are the first draw's
		keep := min(c.Len[s], len(p)-1, len(c.ids[s]))
		for k := 0; k < keep; k++ {
			if c.ids[s][k] != p[k] {
				keep = k
				break
			}
		}
		c.Len[s], feed[s] = keep, p[keep:]
		g.Prefilled += len(feed[s])
		active++
	}
	var host []float32 // OnLogits' row
	pen := backend.Penalties{MinP: o.MinP, Repetition: o.RepetitionPenalty}
	penalties := pen.MinP > 0 || pen.Penalised()
	// seenOf(s): the tokens the sequence in slot s has so far, for repetition_penalty
	seenOf := func(s int) []int { return append(slices.Clone(inputs[seqOf[s]]), g.Tokens[seqOf[s]]...) }
	var digits backend.Buf // the digit tokens' ids, then their values (I32), with OnDigits
	if o.Digits != nil && o.OnDigits != nil {
		var err error
		if digits, err = o.Digits.place(m.b); err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		defer m.b.Free(digits)
	}
	// take records the new token of the sequence in slot s and decides whether it continues.
	take := func(s, tok int, lp float32) {
		i := seqOf[s]
		g.Tokens[i] = append(g.Tokens[i], tok)
		g.LogProbs[i] = append(g.LogProbs[i], lp)
		switch {
		case slices.Contains(stop, tok):
			feed[s] = nil
		case len(g.Tokens[i]) >= limit[i]:
			feed[s], g.Cut[i] = nil, true
		default:
			feed[s] = []int{tok}
		}
		if feed[s] == nil {
			active--
		}
	}
	// draw samples the next token of every sequence with a run in p from logits (one row
	// per run, in the order of p.runs) and decides which continue.
	draw := func(logits backend.Buf, p *pass, step int) error {
		rows := len(p.runs)
		if o.OnLogits != nil {
			if len(host) < V {
				host = make([]float32, V)
			}
			for k, r := range p.runs {
				if err := m.b.Download(host, logits.Slice(k*V, V)); err != nil {
					return err
				}
				o.OnLogits(r.seq, step, host)
			}
		}
		if digits.Len() > 0 {
			k := digits.Len() / 2
			probs := make([]float32, rows*10)
			out, err := m.b.Alloc(backend.F32, rows*10)
			if err != nil {
				return err
			}
			err = first(m.b.DigitProbs(out, logits, digits.Slice(0, k), digits.Slice(k, k), rows, V),
				func() error { return m.b.Download(probs, out) })
			m.b.Free(out)
			if err != nil {
				return err
			}
			for j, r := range p.runs {
				o.OnDigits(r.seq, step, probs[j*10:(j+1)*10])
			}
		}
		u := make([]float64, rows)
		if o.Temperature != 0 {
			for k, r := range p.runs {
				u[k] = rngs[r.seq].Float64()
			}
		}
		var toks []int32
		var lps []float32
		var err error
		if penalties {
			seqs := make([]int, rows)
			for k, r := range p.runs {
				seqs[k] = r.seq
			}
			toks, lps, err = m.samplePenalised(logits, u, seqs, seenOf, &o)
		} else {
			toks, lps, err = m.b.Sample(logits, u, rows, V, o.Temperature, o.TopK, o.TopP)
		}
		if err != nil {
			return err
		}
		for k, r := range p.runs {
			take(r.seq, int(toks[k]), lps[k])
		}
		return nil
	}
	_, capture := m.b.(backend.Capturer)
	var dec *decoder
	defer func() {
		if dec != nil {
			dec.free()
		}
	}()
	for step := 0; active > 0; step++ {
		var err error
		switch {
		case step == 0:
			err = m.prefill(c, feed, o.Adapters, func(lg backend.Buf, p *pass) error { return draw(lg, p, 0) })
		case capture:
			dec, err = m.decodeStep(dec, c, feed, active, o, digits, rngs, step, take, seenOf)
		default:
			var lg backend.Buf
			var p *pass
			if lg, p, err = m.forward(c, feed, true, o.Adapters); err == nil {
				err = draw(lg, p, step)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
	}
	return g, nil
}

// samplePenalised draws row k of logits for sequence seqs[k] through the backend's
// SampleInto with min_p and repetition_penalty (seen(s): the tokens sequence s has so far,
// uploaded as bits): the draws outside the captured decode step (the first token, Eager).
func (m *Model) samplePenalised(logits backend.Buf, u []float64, seqs []int, seen func(s int) []int, o *GenerateOptions) ([]int32, []float32, error) {
	b, rows, V := m.b, len(seqs), m.Config.Vocab
	w := backend.SeenWords(V)
	bits := make([]int32, rows*w)
	for k, s := range seqs {
		for _, t := range seen(s) {
			if t >= 0 && t < V {
				bits[k*w+t>>5] |= 1 << (t & 31)
			}
		}
	}
	var bufs []backend.Buf
	defer func() {
		for _, x := range bufs {
			b.Free(x)
		}
	}()
	place := func(x any, dt backend.DType) backend.Buf {
		y, err := b.Place(x, dt)
		if err == nil {
			bufs = append(bufs, y)
		}
		return y
	}
	sb, ub := place(bits, backend.I32), place(u, backend.F64)
	out := place(make([]int32, 2*rows), backend.I32) // the tokens, then their log-probs' bits
	if len(bufs) != 3 {
		return nil, nil, fmt.Errorf("out of memory for a draw of %d rows", rows)
	}
	pen := backend.Penalties{MinP: o.MinP, Repetition: o.RepetitionPenalty, Seen: sb}
	host := make([]int32, 2*rows)
	err := first(b.SampleInto(out.Slice(0, rows), out.Slice(rows, rows).As(backend.F32), logits, ub, rows, V, o.Temperature, o.TopK, o.TopP, pen),
		func() error { return b.Download(host, out) })
	if err != nil {
		return nil, nil, err
	}
	lps := make([]float32, rows)
	for k := range lps {
		lps[k] = math.Float32frombits(uint32(host[rows+k]))
	}
	return host[:rows], lps, nil
}

// decodeStep runs one decode step of Generate on the fixed-buffer step (decoder), which it
// (re)builds when there is none or when at most half of its rows still run: finished
// sequences stay as padded rows until then, so a batch costs a few captures, not one per
// finished sequence. Sequence s continues when feed[s] is not nil; take records its token.
func (m *Model) decodeStep(dec *decoder, c *Cache, feed [][]int, active int, o GenerateOptions, digits backend.Buf, rngs []*rand.Rand, step int,
	take func(i, tok int, lp float32), seen func(s int) []int) (*decoder, error) {
	if dec == nil || active <= dec.rows/2 {
		var seqs []int
		var ids []int32
		for s, f := range feed {
			if f != nil {
				seqs, ids = append(seqs, s), append(ids, int32(f[0]))
			}
		}
		if dec != nil {
			dec.free()
		}
		var err error
		if dec, err = m.newDecoder(c, seqs, ids, o, digits, seen); err != nil {
			return nil, err
		}
	}
	var u []float64
	if o.Temperature != 0 {
		u = make([]float64, dec.rows)
		for r, s := range dec.seqs {
			if feed[s] != nil {
				u[r] = rngs[s].Float64()
			}
		}
	}
	toks, lps, probs, err := dec.step(u)
	if err != nil {
		return dec, err
	}
	if probs != nil {
		for r, s := range dec.seqs {
			if feed[s] != nil {
				o.OnDigits(s, step, probs[r*10:(r+1)*10])
			}
		}
	}
	if o.OnLogits != nil {
		V := m.Config.Vocab
		host := make([]float32, V)
		for r, s := range dec.seqs {
			if feed[s] != nil {
				if err := m.b.Download(host, dec.logits.Slice(r*V, V)); err != nil {
					return dec, err
				}
				o.OnLogits(s, step, host)
			}
		}
	}
	for r, s := range dec.seqs {
		if feed[s] != nil {
			c.Len[s]++
			take(s, int(toks[r]), lps[r])
		}
	}
	return dec, nil
}

// prefill runs the prompts through the cache in groups of at most maxPassRows tokens, so
// that the activations of a large batch of long prompts need not exist all at once, and
// hands each group's last logits (one row per prompt of the group) to use.
func (m *Model) prefill(cache *Cache, prompts [][]int, ad Adapters, use func(logits backend.Buf, p *pass) error) error {
	group := make([][]int, len(prompts))
	for lo := 0; lo < len(prompts); {
		clear(group)
		hi, rows := lo, 0
		for hi < len(prompts) && (rows == 0 || rows+len(prompts[hi]) <= maxPassRows) {
			group[hi] = prompts[hi]
			rows += len(prompts[hi])
			hi++
		}
		logits, p, err := m.forward(cache, group, true, ad)
		if err != nil {
			return err
		}
		if p.rows > 0 {
			if err := use(logits, p); err != nil {
				return err
			}
		}
		lo = hi
	}
	return nil
}
