package cli

// How commands describe things to people: a preset's rewards, a token.

import (
	"fmt"
	"strconv"
	"strings"

	"rlhfstation/engine/tokenizer"
	"rlhfstation/presets"
	"rlhfstation/rewards"
)

// otherRewards describes the rewards besides perplexity, e.g.
// "ntl ×1 (final_answer, wasserstein, tau 1), correctness ×1 (flexible)".
func otherRewards(p presets.Preset) string {
	var parts []string
	if p.NTL != nil {
		mode, tau := string(p.NTL.Mode), "tau "+num(p.NTL.Tau)
		if p.NTL.Mode == rewards.HybridMode {
			mode += " " + num(p.NTL.ConfidenceWeight)
		}
		if p.NTL.Schedule != "" && p.NTL.Schedule != rewards.ScheduleConstant {
			tau += "→" + num(p.NTL.TauEnd) + " " + p.NTL.Schedule
		}
		parts = append(parts, fmt.Sprintf("ntl ×%s (%s, %s, %s)", num(p.NTL.Weight), mode, p.NTL.Loss, tau))
		if p.NTL.LossWeight > 0 {
			parts = append(parts, fmt.Sprintf("ntl loss ×%s", num(p.NTL.LossWeight)))
		}
	}
	if p.Correctness != nil {
		parts = append(parts, fmt.Sprintf("correctness ×%s (%s)", num(p.Correctness.Weight), p.Correctness.Extraction))
	}
	if p.Format != nil {
		parts = append(parts, fmt.Sprintf("format ×%s", num(p.Format.Weight)))
	}
	for _, c := range p.Commands {
		parts = append(parts, fmt.Sprintf("%s ×%s (command %s)", c.Name, num(c.Weight), strings.Join(c.Command, " ")))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

func num(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// readableToken shows what a token stands for: its bytes as a quoted Go string (so
// spaces, newlines and partial UTF-8 characters are visible), or a special token's
// name unquoted.
func readableToken(tok *tokenizer.Tokenizer, id int) string {
	if tok.IsSpecial(id) {
		return tok.Token(id) + " (special)"
	}
	return strconv.Quote(string(tok.TokenBytes(id)))
}
