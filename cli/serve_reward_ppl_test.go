package cli

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine"
	"rlhfstation/engine/data"
	"rlhfstation/engine/data/synth"
	"rlhfstation/presets"
	"rlhfstation/rewards"
)

// The math preset's perplexity measures the reasoning (issue 26: a correct worked answer got
// ppl 0, a random model's output ppl 1.0). Served to serve-reward with baselines of the
// built-in references' reasoning (what it computes without --baselines, over fewer samples):
// random output never earns it, worked answers of the model's kind mostly do, and the final
// `#### N` line, right or wrong, does not change it.
func TestServeRewardMathPerplexityOfReasoning(t *testing.T) {
	dir, _ := servedModel(t)
	m, tok, err := engine.LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := presets.Load("math")
	if err != nil {
		t.Fatal(err)
	}
	refs, err := synth.Prompts("math", 1, 96)
	if err != nil {
		t.Fatal(err)
	}
	var ex []data.Example
	for _, r := range refs {
		ex = append(ex, data.Example{Prompt: r.Prompt, Answer: r.Answer, Text: r.Reference})
	}
	b, err := engine.ComputeBaselines(m, tok, ex, engine.BaselineOptions{Format: data.PromptJSONL, Text: p.PPL.Text})
	if err != nil {
		t.Fatal(err)
	}
	if b.ModelHash, b.TokenizerHash, err = rewards.FolderHashes(dir); err != nil {
		t.Fatal(err)
	}
	b.Created, b.Source = time.Now().UTC(), "test"
	path := filepath.Join(t.TempDir(), "baselines.json")
	if err := b.Save(path); err != nil {
		t.Fatal(err)
	}
	url, _ := startServeReward(t, "--preset", "math", "--baselines", path)

	worked, err := synth.Prompts("math", 11, 24) // not the baselines' problems
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(26, 1))
	var vocab []string
	for _, w := range worked {
		vocab = append(vocab, strings.Fields(w.Reference)...)
	}
	var req struct {
		Query   []string `json:"query"`
		Prompts []string `json:"prompts"`
		Labels  []string `json:"labels"`
	}
	add := func(prompt, completion, label string) {
		req.Query, req.Prompts, req.Labels = append(req.Query, prompt+completion), append(req.Prompts, prompt), append(req.Labels, label)
	}
	for _, w := range worked {
		add(w.Prompt, w.Reference, w.Answer)
	}
	for _, w := range worked { // the same reasoning ending in a wrong number
		at := strings.LastIndex(w.Reference, "#### ")
		add(w.Prompt, w.Reference[:at]+"#### 1"+w.Answer, w.Answer)
	}
	for _, w := range worked {
		// Random output: the answers' words shuffled, and tokens drawn uniformly from the
		// vocabulary (what an untrained model writes), each with the right `####` line.
		words := make([]string, 20)
		for k := range words {
			words[k] = vocab[rng.IntN(len(vocab))]
		}
		ids := make([]int, 24)
		for k := range ids {
			ids[k] = rng.IntN(m.Config.Vocab)
		}
		add(w.Prompt, " "+strings.Join(words, " ")+"\n#### "+w.Answer, w.Answer)
		add(w.Prompt, tok.Decode(ids, true)+"\n#### "+w.Answer, w.Answer)
	}
	body, _ := json.Marshal(req)
	resp, err := http.Post(url+"/get_reward", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		ExtraLogs map[string][]*float64 `json:"extra_logs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	ppl, correct := got.ExtraLogs["ppl"], got.ExtraLogs["correctness"]
	n := len(worked)
	if len(ppl) != 4*n || len(correct) != len(ppl) {
		t.Fatalf("extra_logs %v", got.ExtraLogs)
	}
	val := func(i int) float64 {
		if ppl[i] == nil {
			t.Fatalf("%q: ppl not applicable", req.Query[i])
		}
		return *ppl[i]
	}
	earned, sum := 0, 0.0
	for i := range n {
		if correct[i] == nil || *correct[i] != 1 || correct[n+i] == nil || *correct[n+i] != 0 {
			t.Fatalf("worked answer %d: correctness %v right, %v wrong", i, correct[i], correct[n+i])
		}
		if val(i) != val(n+i) {
			t.Errorf("%q: ppl %v, but %v with a wrong final number: the answer line is not reasoning", req.Query[i], val(i), val(n+i))
		}
		sum += val(i)
		if val(i) > 0 {
			earned++
		}
	}
	// The baselines are the geometric mean of such answers and the step shape pays only an
	// improvement on them: answers a little more perplexing than the mean get 0 (about half
	// of those the baselines were made of). Most of the answers must still earn it.
	t.Logf("worked answers: %d of %d earn perplexity reward, mean %.3f", earned, n, sum/float64(n))
	if earned*5 < n*2 || sum/float64(n) < 0.3 {
		t.Errorf("worked answers: %d of %d earn perplexity reward, mean %.3f; want at least 40%% and 0.3", earned, n, sum/float64(n))
	}
	for i := 2 * n; i < len(ppl); i++ {
		if val(i) != 0 {
			t.Errorf("random output %q: ppl %v, want 0", req.Query[i], val(i))
		}
	}
}
