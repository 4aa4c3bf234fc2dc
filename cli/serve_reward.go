package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"rlhfstation/engine"
	"rlhfstation/presets"
	"rlhfstation/rewards"
	"rlhfstation/rewards/serve"
)

func init() {
	register(command{name: "serve-reward", summary: "a preset's rewards over HTTP for OpenRLHF and verl (OpenRLHF's remote reward model)", order: 55, run: runServeReward})
}

const serveRewardHelp = `serve-reward [--preset P] [--model DIR] [--baselines F] [--addr 127.0.0.1:5000]

Serves the preset's rewards over HTTP in OpenRLHF's remote reward model shape, so that a run
that outgrows one GPU moves to OpenRLHF or verl and keeps its rewards:

  POST /get_reward  {"query": [prompt+response, ...], "prompts": [...], "labels": [...]}
               ->   {"rewards": [...], "scores": [...], "extra_logs": {"ppl": [...], ...}}
  GET  /health      {"status": "ok", "preset", "model", "functions"}

Each completion is its query with its prompt taken off the front; a label is the ground truth
of the correctness and NTL rewards. rewards (= scores) are the preset's r = Σ_f w_f r_f, the
values score --preset P --baselines F --prompt PROMPT --answer LABEL prints; extra_logs holds
each function's values (null where it does not apply). Requests that arrive while a batch is
scored are scored together as the next batch. A malformed request gets 400 with the reason;
SIGINT or SIGTERM stops taking requests, answers those in flight, and exits 0.

OpenRLHF: --reward.remote_url http://HOST:5000/get_reward (--remote_rm_url up to v0.10.1).
verl: custom_reward_function.path=examples/verl_reward.py custom_reward_function.name=compute_score.
Without --baselines a perplexity preset's baselines are computed at start from the built-in
reference texts of its domain, as a run without --data does.`

func runServeReward(s streams, args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveReward(ctx, s, args, nil)
}

// serveReward runs the server until ctx ends; ready, when set, is told the address it listens on.
func serveReward(ctx context.Context, s streams, args []string, ready func(addr string)) error {
	fs := newFlagSet("serve-reward", serveRewardHelp, s.stderr)
	mf := addModelFlags(fs)
	presetName := fs.String("preset", presets.Default, "reward preset `P` (story, technical, code, math or a user preset)")
	baselinesPath := fs.String("baselines", "", "baselines.json `FILE` (from rlhfstation baseline) of the perplexity reward")
	accept := fs.Bool("accept-baselines", false, "use baselines made with another model or tokenizer")
	addr := fs.String("addr", "127.0.0.1:5000", "`HOST:PORT` to listen on (port 0: any free port); 0.0.0.0 to serve other machines")
	maxBody := fs.Int64("max-body-mb", serve.DefaultMaxBodyBytes>>20, "largest request body in `MiB`")
	maxBatch := fs.Int("max-batch", 512, "most texts scored in one batch")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("serve-reward takes no positional arguments (got %q)", rest[0])
	}
	if *maxBody < 1 || *maxBatch < 1 {
		return usagef("--max-body-mb and --max-batch must be at least 1")
	}
	p, err := presets.Load(*presetName)
	if err != nil {
		return usageError{err.Error()}
	}
	dir, m, tok, err := mf.load(s.stderr, "")
	if err != nil {
		return err
	}
	var levels rewards.Levels
	if p.PPL != nil && p.PPL.Weight > 0 {
		if *baselinesPath != "" {
			b, err := loadBaselines(dir, *baselinesPath, p, *accept, s.stderr)
			if err != nil {
				return err
			}
			levels = b.Levels
		} else {
			fmt.Fprintf(s.stderr, "no --baselines: computing the perplexity baselines from the built-in %s reference texts (rlhfstation baseline --data YOUR_DATA makes baselines of your own data)\n", p.Root)
			b, err := engine.BuiltinBaselines(m, tok, dir, p, nil)
			if err != nil {
				return err
			}
			levels = b.Levels
			fmt.Fprintf(s.stderr, "baselines: word %.4g, phrase %.4g, sentence %.4g over %d samples\n", b.Levels.Word, b.Levels.Phrase, b.Levels.Sentence, b.Samples)
		}
	}
	scorer, err := engine.NewScorer(m, tok, p, levels)
	if err != nil {
		return err
	}
	defer scorer.Close()
	var names []string
	for _, f := range scorer.Funcs() {
		names = append(names, f.Func.Name())
	}

	var requests, texts atomic.Int64
	srv := serve.New(func(items []serve.Item) (rewards.Result, error) {
		in := make([]engine.Text, len(items))
		for i, it := range items {
			in[i] = engine.Text{Prompt: it.Prompt, Completion: it.Completion, Answer: it.Answer}
		}
		texts.Add(int64(len(items)))
		return scorer.Score(in)
	}, serve.Options{
		MaxBodyBytes: *maxBody << 20,
		MaxBatch:     *maxBatch,
		Health:       map[string]any{"preset": p.Name, "model": dir, "functions": names},
		Log:          s.stderr,
		NeedLabels:   labelled(p),
	})
	defer srv.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", *addr, err)
	}
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			requests.Add(1)
			srv.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
	}
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(s.stdout, "serving preset %s (%s) of %s on %s/get_reward (health: %s/health)\n",
		p.Name, describeFuncs(scorer.Funcs()), dir, url, url)
	if ready != nil {
		ready(ln.Addr().String())
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	// Stop taking requests and answer those in flight (OpenRLHF waits up to 180 s for one).
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err = hs.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		hs.Close()
	}
	fmt.Fprintf(s.stdout, "serve-reward stopped after %d requests (%d texts scored)\n", requests.Load(), texts.Load())
	return err
}

// labelled names the preset's rewards that score against the label: correctness and NTL.
func labelled(p presets.Preset) []string {
	var out []string
	if p.Correctness != nil && p.Correctness.Weight > 0 {
		out = append(out, "correctness")
	}
	if p.NTL != nil && p.NTL.Weight > 0 && p.NTL.Mode != rewards.AllTokensMode {
		out = append(out, "ntl")
	}
	return out
}

// describeFuncs is "ppl ×1, ntl ×1, correctness ×1".
func describeFuncs(fs []rewards.Weighted) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = fmt.Sprintf("%s ×%s", f.Func.Name(), num(f.Weight))
	}
	return strings.Join(parts, ", ")
}
