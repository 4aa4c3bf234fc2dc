package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"rlhfstation/engine"
	"rlhfstation/internal/testref"
	"rlhfstation/rewards"
)

// syncBuffer is a bytes.Buffer safe for a command writing while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServeReward runs serve-reward in the test process on a free loopback port; stop ends
// it (as SIGTERM would) and returns its error and output.
func startServeReward(t testing.TB, args ...string) (url string, stop func() (error, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serveReward(ctx, streams{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut},
			append([]string{"--addr", "127.0.0.1:0"}, args...), func(addr string) { ready <- addr })
	}()
	select {
	case addr := <-ready:
		url = "http://" + addr
	case err := <-done:
		cancel()
		t.Fatalf("serve-reward ended at start: %v\n%s", err, errOut.String())
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatal("serve-reward did not start")
	}
	var once sync.Once
	var err error
	stop = func() (error, string) {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err, out.String() + errOut.String()
	}
	t.Cleanup(func() { stop() })
	return url, stop
}

// servedModel is the built-in model with baselines made for it (fixed levels of the order of
// its per-word perplexities, without a `baseline` pass) and a user preset "mathlin": math with
// a linear perplexity shape stretched so that its rewards vary continuously (the step table
// gives a handful of values), so that comparisons can fail.
func servedModel(t testing.TB) (dir, baselines string) {
	t.Helper()
	t.Setenv("RLHFSTATION_MODEL", "")
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	if err := os.MkdirAll(filepath.Join(cfg, "rlhfstation", "presets"), 0o755); err != nil {
		t.Fatal(err)
	}
	preset := "extends = \"math\"\n[ppl]\nshape = \"linear\"\nthresholds = [{ improvement = 50.0, reward = 1.0 }]\n"
	if err := os.WriteFile(filepath.Join(cfg, "rlhfstation", "presets", "mathlin.toml"), []byte(preset), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, err := engine.ModelDir("")
	if err != nil {
		t.Fatal(err)
	}
	mh, th, err := rewards.FolderHashes(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := rewards.Baselines{Format: rewards.BaselinesFormat, Levels: rewards.Levels{Word: 20, Phrase: 400, Sentence: 60}, Samples: 1,
		ModelHash: mh, TokenizerHash: th, Source: "test", Text: rewards.ReasoningText}
	baselines = filepath.Join(t.TempDir(), "baselines.json")
	if err := b.Save(baselines); err != nil {
		t.Fatal(err)
	}
	return dir, baselines
}

// servedTexts are (prompt, completion, label) triples: right, wrong and worked answers, an
// empty completion, a missing label, non-ASCII text.
var servedTexts = []struct{ prompt, completion, label string }{
	{"Tom has 3 apples and buys 4 more. How many apples does Tom have?", " #### 7", "7"},
	{"Tom has 3 apples and buys 4 more. How many apples does Tom have?", " #### 8", "7"},
	{"Tom has 3 apples and buys 4 more. How many apples does Tom have?", " Tom has 3 + 4 = 7 apples.\n#### 7", "#### 7"},
	{"Tom has 3 apples and buys 4 more. How many apples does Tom have?", "", "7"},
	{"A box holds 12 pens. Sam takes 5. How many are left?", " 12 - 5 = 7. #### 7", ""},
	{"Write one line.", " Café au lait — ☕ is warm.", ""},
}

// scoreReference is what `score --preset mathlin --baselines F --prompt P --answer A --json T`
// prints for each served text: its total and each function's value.
func scoreReference(t *testing.T, dir, baselines string) (totals []float64, funcs []map[string]*float64) {
	t.Helper()
	for _, x := range servedTexts {
		code, out, errOut := runCaptured(t, "score", "--model", dir, "--preset", "mathlin", "--baselines", baselines,
			"--prompt", x.prompt, "--answer", x.label, "--json", "--", x.completion)
		if code != 0 {
			t.Fatalf("score: exit %d: %s", code, errOut)
		}
		var doc struct {
			Texts []struct {
				Rewards struct {
					Total     *float64            `json:"total"`
					Functions map[string]*float64 `json:"functions"`
				} `json:"rewards"`
			} `json:"texts"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Texts) != 1 || doc.Texts[0].Rewards.Total == nil {
			t.Fatalf("score --json: %v\n%s", err, out)
		}
		totals = append(totals, *doc.Texts[0].Rewards.Total)
		funcs = append(funcs, doc.Texts[0].Rewards.Functions)
	}
	return totals, funcs
}

// clientScript runs examples/openrlhf_reward_client.py's get_rewards and examples/verl_reward.py's
// compute_score against the server, and the client's retries against a port nobody listens on.
const clientScript = `
import json, math, sys
sys.path.insert(0, sys.argv[1])
import openrlhf_reward_client, verl_reward
url, texts = sys.argv[2], json.load(sys.stdin)
def clean(x):  # NaN is not JSON
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    return x
out = {"openrlhf": openrlhf_reward_client.get_rewards(url, [p + c for p, c, l in texts], [p for p, c, l in texts], [l for p, c, l in texts]),
       "verl": [clean(verl_reward.compute_score("test", c, l, extra_info={"prompt": p}, url=url)) for p, c, l in texts]}
try:
    openrlhf_reward_client.get_rewards("http://127.0.0.1:9/get_reward", ["a"], [""], [""], tries=2, pause=0.05)
except RuntimeError as e:
    out["dead"] = str(e)
print(json.dumps(out))
`

// The Python clients written from OpenRLHF's request code and for verl get, from a live
// serve-reward, the rewards `score` gives the same texts, and every function's values.
func TestServeRewardAnswersAsScoreDoes(t *testing.T) {
	py := testref.Python3(t)
	dir, baselines := servedModel(t)
	url, stop := startServeReward(t, "--preset", "mathlin", "--baselines", baselines)
	totals, funcs := scoreReference(t, dir, baselines)

	script := filepath.Join(t.TempDir(), "clients.py")
	if err := os.WriteFile(script, []byte(clientScript), 0o644); err != nil {
		t.Fatal(err)
	}
	examples, _ := filepath.Abs("../examples")
	var in [][3]string
	for _, x := range servedTexts {
		in = append(in, [3]string{x.prompt, x.completion, x.label})
	}
	body, _ := json.Marshal(in)
	cmd := exec.Command(py, script, examples, url+"/get_reward")
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("python clients: %v\n%s", err, stderr.String())
	}
	var got struct {
		OpenRLHF struct {
			Rewards   []*float64            `json:"rewards"`
			Scores    []*float64            `json:"scores"`
			ExtraLogs map[string][]*float64 `json:"extra_logs"`
		} `json:"openrlhf"`
		Verl []map[string]*float64 `json:"verl"`
		Dead string                `json:"dead"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	same := func(a, b *float64) bool {
		if a == nil || b == nil {
			return a == nil && b == nil
		}
		// float32 log-probabilities of a batch and of one text differ in the last bits, and
		// the perplexity exponentiates them: relative 1e-5.
		return math.Abs(*a-*b) <= 1e-6+1e-5*math.Abs(*b)
	}
	names := []string{"ppl", "ntl", "correctness"}
	varied := map[string]map[float64]bool{}
	for i := range servedTexts {
		want := totals[i]
		r := got.OpenRLHF
		if !same(r.Rewards[i], &want) || !same(r.Scores[i], &want) || !same(got.Verl[i]["score"], &want) {
			t.Errorf("text %d: rewards %v, scores %v, verl %v; score says %v", i, deref(r.Rewards[i]), deref(r.Scores[i]), deref(got.Verl[i]["score"]), want)
		}
		for _, f := range names {
			if !same(r.ExtraLogs[f][i], funcs[i][f]) || !same(got.Verl[i][f], funcs[i][f]) {
				t.Errorf("text %d %s: extra_logs %v, verl %v; score says %v", i, f, deref(r.ExtraLogs[f][i]), deref(got.Verl[i][f]), deref(funcs[i][f]))
			}
			if funcs[i][f] != nil {
				if varied[f] == nil {
					varied[f] = map[float64]bool{}
				}
				varied[f][*funcs[i][f]] = true
			}
		}
	}
	// The comparison must be able to fail: the values differ between texts.
	for _, f := range names {
		if len(varied[f]) < 2 {
			t.Errorf("%s takes %d distinct values over the texts", f, len(varied[f]))
		}
	}
	if !strings.Contains(got.Dead, "no reward after 2 attempts") {
		t.Errorf("retries against a dead port: %q", got.Dead)
	}
	if n := strings.Count(stderr.String(), "reward request failed"); n != 2 {
		t.Errorf("%d failed attempts reported, want 2:\n%s", n, stderr.String())
	}
	if err, out := stop(); err != nil || !strings.Contains(out, "serve-reward stopped after") {
		t.Errorf("stop: %v\n%s", err, out)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// Bad requests to a live server get 400 with the reason, and it keeps answering.
func TestServeRewardRefusesBadRequests(t *testing.T) {
	_, baselines := servedModel(t)
	url, _ := startServeReward(t, "--preset", "mathlin", "--baselines", baselines, "--max-body-mb", "8")
	good := func() {
		t.Helper()
		resp, err := http.Post(url+"/get_reward", "application/json", strings.NewReader(`{"query": ["Q: 1+1? A: 2"], "prompts": ["Q: 1+1? A:"], "labels": ["2"]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Rewards []float64 }
		if json.NewDecoder(resp.Body).Decode(&out); resp.StatusCode != 200 || len(out.Rewards) != 1 {
			t.Fatalf("good request: %d %v", resp.StatusCode, out)
		}
	}
	good()
	// A text longer than the model's context (256 tokens) is scored on what fits, not refused.
	long, _ := json.Marshal(map[string]any{"query": []string{"Go." + strings.Repeat(" Then 12 - 5 = 7 pens are left.", 60)}, "prompts": []string{"Go."}, "labels": []any{nil}})
	if resp, err := http.Post(url+"/get_reward", "application/json", bytes.NewReader(long)); err != nil {
		t.Error(err)
	} else if resp.Body.Close(); resp.StatusCode != 200 {
		t.Errorf("long text: %d", resp.StatusCode)
	}
	huge := io.MultiReader(strings.NewReader(`{"query": ["`), io.LimitReader(repeatByte('a'), 100<<20), strings.NewReader(`"]}`))
	for _, c := range []struct {
		name   string
		body   io.Reader
		reason string
	}{
		{"invalid JSON", strings.NewReader(`{"query": ["a"`), "not a JSON object"},
		{"mismatched lists", strings.NewReader(`{"query": ["a", "b"], "prompts": ["a"], "labels": ["1", "2"]}`), "2 queries but 1 prompts"},
		{"no labels for a preset that scores against them", strings.NewReader(`{"query": ["Q: 1+1? A: 2"]}`), "correctness and ntl score(s) each completion against its label"},
		{"a list, not an object", strings.NewReader(`[]`), "the request body is a JSON array; it must be an object"},
		{"100 MB body", huge, "over the limit of 8388608"},
		{"non-UTF-8 text", strings.NewReader("{\"query\": [\"\xff\xfe\"]}"), "not valid UTF-8"},
	} {
		resp, err := http.Post(url+"/get_reward", "application/json", c.body)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), c.reason) {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, b)
		}
		good()
	}
}

type repeatByte byte

func (r repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// SIGTERM stops serve-reward taking requests but lets the one in flight finish; it exits 0.
func TestServeRewardFinishesRequestsOnSIGTERM(t *testing.T) {
	py := testref.Python3(t)
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("RLHFSTATION_MODEL", "")
	slow := filepath.Join(t.TempDir(), "slow.py")
	script := "import json, sys, time\nfor line in sys.stdin:\n    n = len(json.loads(line)[\"completions\"])\n    time.sleep(1.5)\n    print(json.dumps({\"rewards\": [0.5] * n}), flush=True)\n"
	if err := os.WriteFile(slow, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(cfg, "rlhfstation", "presets"), 0o755)
	preset := fmt.Sprintf("[[rewards]]\nkind = \"command\"\nname = \"slow\"\ncommand = [%q, %q]\n", py, slow)
	if err := os.WriteFile(filepath.Join(cfg, "rlhfstation", "presets", "slow.toml"), []byte(preset), 0o644); err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "serve-reward", "--preset", "slow", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "RLHFSTATION_CLI_RUN=1")
	stdout, _ := cmd.StdoutPipe()
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	var url string
	for url == "" && lines.Scan() {
		if _, rest, ok := strings.Cut(lines.Text(), " on http://"); ok {
			url = "http://" + strings.Fields(rest)[0]
		}
	}
	if url == "" {
		t.Fatalf("no address printed; stderr:\n%s", stderr.String())
	}
	answered := make(chan string, 1)
	go func() {
		resp, err := http.Post(url, "application/json", strings.NewReader(`{"query": ["a", "b"]}`))
		if err != nil {
			answered <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}()
	time.Sleep(500 * time.Millisecond) // the request is being scored
	cmd.Process.Signal(syscall.SIGTERM)
	if got := <-answered; got != `200 {"rewards":[0.5,0.5],"scores":[0.5,0.5],"extra_logs":{"slow":[0.5,0.5]}}` {
		t.Errorf("request in flight at SIGTERM: %s", got)
	}
	var rest strings.Builder
	for lines.Scan() {
		rest.WriteString(lines.Text() + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(rest.String(), "serve-reward stopped after 1 requests (2 texts scored)") {
		t.Errorf("stdout after SIGTERM: %q", rest.String())
	}
	if _, err := http.Get(strings.TrimSuffix(url, "/get_reward") + "/health"); err == nil {
		t.Error("still answering after it exited")
	}
}
