package cli

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"rlhfstation/engine/model"
)

// generate --num-sequences N decodes N completions together, sequence i the one a single
// generate with its stream would give (sequence 0: the plain command's), printed in order or
// as a JSON list; --ignore-eos makes each exactly --max-new-tokens long, past the model's EOS.
func TestGenerateNumSequencesIgnoreEOS(t *testing.T) {
	cfg := model.Config{ModelType: "llama", Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 64, MaxPos: 256,
		NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true, BOS: -1}
	dir, m, tok := familyDir(t, cfg)
	// an EOS the model emits often: the most likely first token after the prompt, greedy
	prompt := "Once upon a time"
	ids := tok.Encode(prompt, true).IDs
	g, err := m.Generate([][]int{ids}, model.GenerateOptions{MaxNewTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	m.Config.EOS = []int{g.Tokens[0][0]}
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	type doc struct {
		IDs      []int     `json:"ids"`
		LogProbs []float32 `json:"logprobs"`
		Cut      bool      `json:"cut"`
		Text     string    `json:"text"`
	}
	run := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCaptured(t, append([]string{"generate", "--model", dir, "--device", "cpu"}, args...)...)
		if code != 0 {
			t.Fatalf("generate %q: exit %d: %s", args, code, errOut)
		}
		return out
	}
	// greedy: EOS first, so plain generation stops at once; --ignore-eos goes on to 6 tokens
	var one doc
	if err := json.Unmarshal([]byte(run("--temperature", "0", "--max-new-tokens", "6", "--json", prompt)), &one); err != nil {
		t.Fatal(err)
	}
	if len(one.IDs) != 1 || one.Cut {
		t.Errorf("greedy generation with the first token as EOS: %v (cut %v), want that token alone", one.IDs, one.Cut)
	}
	var list []doc
	if err := json.Unmarshal([]byte(run("--seed", "9", "--max-new-tokens", "6", "--ignore-eos", "--num-sequences", "3", "--json", prompt)), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("--num-sequences 3 --json gave %d documents", len(list))
	}
	for i, d := range list {
		if len(d.IDs) != 6 || len(d.LogProbs) != 6 || !d.Cut {
			t.Errorf("sequence %d: %d ids, %d log-probs, cut %v; want exactly 6 with --ignore-eos", i, len(d.IDs), len(d.LogProbs), d.Cut)
		}
	}
	if reflect.DeepEqual(list[0].IDs, list[1].IDs) && reflect.DeepEqual(list[1].IDs, list[2].IDs) {
		t.Errorf("three sampled sequences are identical: %v", list[0].IDs)
	}
	// sequence 0 is what the single command draws with the same seed
	var single doc
	if err := json.Unmarshal([]byte(run("--seed", "9", "--max-new-tokens", "6", "--ignore-eos", "--json", prompt)), &single); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(single.IDs, list[0].IDs) {
		t.Errorf("sequence 0 of the group %v differs from the single generation %v", list[0].IDs, single.IDs)
	}
	// text: each completion under its header, in order
	out := run("--seed", "9", "--max-new-tokens", "6", "--ignore-eos", "--num-sequences", "3", prompt)
	for i, d := range list {
		h := "--- sequence " + string(rune('1'+i)) + "\n" + d.Text + "\n"
		if !strings.Contains(out, h) {
			t.Errorf("text output lacks %q:\n%s", h, out)
		}
	}
	if code, _, errOut := runCaptured(t, "generate", "--model", dir, "--num-sequences", "0", prompt); code != 2 || !strings.Contains(errOut, "--num-sequences") {
		t.Errorf("--num-sequences 0: exit %d, %s; want 2 naming the flag", code, errOut)
	}
}
