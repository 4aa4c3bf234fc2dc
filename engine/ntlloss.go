package engine

import (
	"rlhfstation/engine/events"
	"rlhfstation/engine/model"
	"rlhfstation/rewards"
)

// NTL as an auxiliary loss ([ntl] loss_weight λ, DESIGN §6.2): λ times the mean NTL (the
// preset's mse or wasserstein) of the policy's digit distributions at the aligned answer
// positions of the step's completions is added to the GRPO loss. The distributions are the
// softmax over the digit tokens of the training pass's raw logits (temperature 1, as NTL the
// reward reads them), and the gradient flows through that softmax into the LM head and the
// adapters. The positions are final_answer's alignment of the completion's answer with the
// ground truth, on digit tokens only (rewards.NTL.AnswerDigits), whatever the reward's mode:
// a completion without a numeric ground truth or an answer adds nothing, nor does one that
// mask_truncated_completions drops. The mean is over every such position of the step's
// micro-batches, so the micro-batches' terms add up to it, as dapo's do.

// ntlLossWeight is λ, 0 when NTL is no loss.
func (e *Engine) ntlLossWeight() float64 {
	if e.preset.NTL == nil || e.digits == nil {
		return 0
	}
	return e.preset.NTL.LossWeight
}

// alignAnswers sets each rollout's answer digits: completion token index and target.
func (e *Engine) alignAnswers(b *batch) {
	if e.ntlLossWeight() == 0 {
		return
	}
	n := rewards.NTL{Vocab: e.digits}
	for _, r := range b.rollouts {
		r.answerDigits = nil
		for _, d := range n.AnswerDigits(rewards.NTLInput{Text: r.text, IDs: r.textIDs, Spans: r.spans, Answer: r.example.Answer}) {
			r.answerDigits = append(r.answerDigits, rewards.AnswerDigit{Pos: r.textPos[d.Pos], Target: d.Target})
		}
	}
}

// ntlAux is the auxiliary loss of a step: its positions and the sum of their NTL.
type ntlAux struct {
	positions int
	sum       float64
}

// ntlPositions counts the positions the step's micro-batches train (a micro-batch served
// twice counts twice, as its GRPO terms do).
func (e *Engine) ntlPositions(batches []*batch) int {
	params := lossParams(e.cfg)
	n := 0
	for _, b := range batches {
		for _, r := range b.rollouts {
			if !params.Masked(r.cut) {
				n += len(r.answerDigits)
			}
		}
	}
	return n
}

// ntlQuery asks the training pass for the digit logits at b's answer digits.
func (e *Engine) ntlQuery(b *batch) *model.DigitQuery {
	params := lossParams(e.cfg)
	q := &model.DigitQuery{IDs: e.digits.IDs, At: make([][]int, len(b.rollouts))}
	for i, r := range b.rollouts {
		if params.Masked(r.cut) {
			continue
		}
		for _, d := range r.answerDigits {
			q.At[i] = append(q.At[i], len(r.prompt)+d.Pos)
		}
	}
	return q
}

// ntlLoss adds the micro-batch's share of the auxiliary loss, λ·Σ NTL / total, to aux and
// sets the tape's digit gradients for the backward. It returns the share.
func (e *Engine) ntlLoss(tape *model.Tape, b *batch, total int, aux *ntlAux) (float64, error) {
	lambda, loss := e.ntlLossWeight(), e.preset.NTL.Loss
	params := lossParams(e.cfg)
	tape.DigitGrad = make([][][]float32, len(b.rollouts))
	share := 0.0
	grad := make([]float64, len(e.digits.IDs))
	for i, r := range b.rollouts {
		if params.Masked(r.cut) {
			continue
		}
		for j, d := range r.answerDigits {
			clear(grad)
			cost, err := e.digits.CostGrad(loss, tape.DigitLogits[i][j], d.Target, grad)
			if err != nil {
				return 0, err
			}
			aux.sum += cost
			share += lambda * cost / float64(total)
			g := make([]float32, len(grad))
			for k, v := range grad {
				g[k] = float32(lambda * v / float64(total))
			}
			tape.DigitGrad[i] = append(tape.DigitGrad[i], g)
		}
	}
	return share, nil
}

// metrics are ntl/aux_loss (the mean NTL at the positions, before λ) and ntl/aux_positions.
func (a ntlAux) metrics(m events.Metrics) {
	if a.positions == 0 {
		return
	}
	m["ntl/aux_loss"] = a.sum / float64(a.positions)
	m["ntl/aux_positions"] = float64(a.positions)
}
