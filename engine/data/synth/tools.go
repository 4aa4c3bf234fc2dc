package synth

import (
	"fmt"
	"strings"
)

// Tool-call transcripts: the math preset's small word problems played as episodes of the
// calculator environment (engine/env's Calculator) in rlhfstation's plain template (what a
// model without a chat template of its own is rendered with: engine/env.PlainTemplate): the
// question as the user's message, then the assistant's turns, each ended by the EOS token.
// In ToolCallShare of them the assistant calls calc once per step of the problem, each result
// coming back as a tool message, and ends with "#### N"; in the others it works the steps in
// words as the math documents do. A model pretrained on them sometimes calls the tool when a
// math-tools run asks it a question, which is what GRPO can then reinforce.

// EOS is the text of the end-of-text token that ends an assistant turn in a transcript.
const EOS = "<|endoftext|>"

// ToolCallShare is the share of transcripts in which the assistant calls the tool.
const ToolCallShare = 0.5

// toolStream separates the transcripts' generators from the domains'.
const toolStream = 7

// ToolTranscripts returns n transcripts made from seed (the k-th always the same).
func ToolTranscripts(seed int64, n int) []Doc {
	docs := make([]Doc, n)
	parallel(n, func(i int) {
		docs[i] = Doc{Domain: "math", Text: newGen(uint64(seed)^docSalt, toolStream<<56|uint64(i)).toolTranscript()}
	})
	return docs
}

func (g *gen) toolTranscript() string {
	var p *mathProblem
	for p == nil || p.answer <= 0 {
		p = mathSmall(g)
	}
	var b strings.Builder
	b.WriteString("Question: " + p.question + "\nAnswer:\n")
	if !g.chance(ToolCallShare) {
		b.WriteString(strings.Join(p.lines, "\n"))
		fmt.Fprintf(&b, "\n#### %d", p.answer)
		return b.String()
	}
	for _, s := range p.steps {
		fmt.Fprintf(&b, `<tool_call>{"name": "calc", "arguments": {"expression": "%d %c %d"}}</tool_call>`, s.a, s.op, s.b)
		fmt.Fprintf(&b, "%s<tool_response>%d</tool_response>\n", EOS, s.r)
	}
	fmt.Fprintf(&b, "#### %d", p.answer)
	return b.String()
}
