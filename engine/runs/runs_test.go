package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/events"
	"rlhfstation/engine/runs/runstest"
	"rlhfstation/engine/tensorboard"
	"rlhfstation/internal/testref"
)

// planted has one of each anomaly the issue names: NaN grad_norm at 25, a KL spike at 40–41
// (kl_high needs 2 steps above 0.30: it fires at 41), a reward exactly flat from 45 (the
// reward_stall window of 30 is all plateau at 45+29 = 74).
var planted = runstest.Plan{Steps: 80, Seed: 1, KLSpike: 40, Plateau: 45, NaNGrad: 25}

var wantPlanted = []string{"25 non_finite grad_norm", "41 kl_high kl", "74 reward_stall reward"}

func collect(t *testing.T, r *Run, o Options) []events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []events.Event
	for e := range r.Stream(ctx, o) {
		out = append(out, e)
	}
	if ctx.Err() != nil {
		t.Fatal("the stream did not end")
	}
	return out
}

func anomalies(evs []events.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Type == events.Anomaly {
			out = append(out, fmt.Sprintf("%d %s %s", e.Step, e.Rule, e.Metric))
		}
	}
	return out
}

func ofType(evs []events.Event, t events.Type) []events.Event {
	var out []events.Event
	for _, e := range evs {
		if e.Type == t {
			out = append(out, e)
		}
	}
	return out
}

// layouts writes the plan in every layout read, and returns the path to give Detect with the
// kind it must find.
func layouts(t *testing.T, p runstest.Plan) map[string]struct {
	path string
	kind Kind
} {
	t.Helper()
	out := map[string]struct {
		path string
		kind Kind
	}{}
	root := t.TempDir()
	add := func(name string, kind Kind, path string) {
		out[name] = struct {
			path string
			kind Kind
		}{path, kind}
	}

	for name, enc := range map[string]runstest.Encoding{"simple_value": runstest.SimpleValue,
		"tensor float_val": runstest.TensorFloat, "tensor_content": runstest.TensorContent} {
		d := filepath.Join(root, "trl-tb-"+strings.ReplaceAll(name, " ", "-"))
		if err := runstest.WriteTRL(d, p, runstest.TRLOptions{TensorBoard: true, Encoding: enc}); err != nil {
			t.Fatal(err)
		}
		add("TRL TensorBoard "+name, KindTRL, d)
	}
	d := filepath.Join(root, "trl-state")
	if err := runstest.WriteTRL(d, p, runstest.TRLOptions{Checkpoints: []int{p.Steps / 2, p.Steps}}); err != nil {
		t.Fatal(err)
	}
	add("TRL trainer_state.json", KindTRL, d)

	d = filepath.Join(root, "verl")
	if err := runstest.WriteVerlLog(filepath.Join(d, "gsm8k", "qwen-grpo.jsonl"), p, false); err != nil {
		t.Fatal(err)
	}
	add("verl JSONL", KindVerl, d)

	d = filepath.Join(root, "verl-tb")
	ef, err := runstest.CreateEventFile(filepath.Join(d, "tensorboard_log", "gsm8k", "qwen-grpo"), 1700000000, runstest.SimpleValue)
	if err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= p.Steps; s++ {
		ef.Step(s, runstest.Rename(p.Metrics(s), runstest.Verl), "")
	}
	ef.Close()
	add("verl TensorBoard", KindVerl, d)

	d = filepath.Join(root, "openrlhf")
	ef, err = runstest.CreateEventFile(filepath.Join(d, "logs", "ppo-run"), 1700000000, runstest.TensorFloat)
	if err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= p.Steps; s++ {
		ef.Step(s, runstest.Rename(p.Metrics(s), runstest.OpenRLHF), "train/")
		ef.Text(s, "train/generated_samples", fmt.Sprintf(`Sample:\nQuestion %d? Answer %d\n\nReward: 0.%04d`, s, s, s))
	}
	ef.Close()
	add("OpenRLHF TensorBoard", KindOpenRLHF, d)

	d = filepath.Join(root, "trl-wandb")
	if _, err := runstest.WriteWandb(d, p); err != nil {
		t.Fatal(err)
	}
	add("TRL W&B", KindTRL, d)
	add("TRL W&B latest-run", KindTRL, filepath.Join(d, "wandb", "latest-run"))
	return out
}

// TestPlantedAnomaliesFoundOnce: in every layout each planted anomaly is found once, at its
// step, and nothing else is.
func TestPlantedAnomaliesFoundOnce(t *testing.T) {
	for name, l := range layouts(t, planted) {
		t.Run(name, func(t *testing.T) {
			r, err := Detect(l.path)
			if err != nil {
				t.Fatal(err)
			}
			if r.Kind != l.kind {
				t.Fatalf("kind %q, want %q (%s)", r.Kind, l.kind, r.Describe())
			}
			evs := collect(t, r, Options{})
			if got := anomalies(evs); strings.Join(got, "; ") != strings.Join(wantPlanted, "; ") {
				t.Errorf("anomalies %q\nwant        %q", got, wantPlanted)
			}
			steps := ofType(evs, events.Step)
			if len(steps) != planted.Steps {
				t.Fatalf("%d steps, want %d", len(steps), planted.Steps)
			}
			// The values arrive under DESIGN's names, as written (float32 in event files).
			want := planted.Metrics(33)
			got := steps[32].Metrics
			for _, k := range []string{"reward", "kl", "entropy", "grad_norm", "completions/mean_length", "loss"} {
				if _, ok := got[k]; !ok {
					t.Errorf("step 33 lacks %s: %v", k, got)
					continue
				}
				if d := math.Abs(got[k] - want[k]); d > 1e-6*math.Max(1, math.Abs(want[k])) {
					t.Errorf("step 33 %s = %v, want %v", k, got[k], want[k])
				}
			}
			if !math.IsNaN(steps[24].Metrics["grad_norm"]) {
				t.Errorf("step 25 grad_norm = %v, want NaN", steps[24].Metrics["grad_norm"])
			}
			start := ofType(evs, events.RunStart)
			if len(start) != 1 || start[0].Source != l.kind.Label() {
				t.Errorf("run_start %+v", start)
			}
		})
	}
}

func TestCleanRunIsSilent(t *testing.T) {
	for name, l := range layouts(t, runstest.Plan{Steps: 80, Seed: 2}) {
		t.Run(name, func(t *testing.T) {
			r, err := Detect(l.path)
			if err != nil {
				t.Fatal(err)
			}
			evs := collect(t, r, Options{})
			if a := anomalies(evs); len(a) > 0 {
				t.Errorf("a clean run raised %v", a)
			}
			for _, e := range ofType(evs, events.Log) {
				if e.Level != "info" {
					t.Errorf("log %s: %s", e.Level, e.Message)
				}
			}
		})
	}
}

func TestMappingAndUnmapped(t *testing.T) {
	m := newMapper(KindVerl)
	out, ended := m.apply(map[string]float64{"critic/score/mean": 1, "actor/kl_loss": 0.1, "actor/reward_kl_penalty": 0.2,
		"actor/ppo_kl": 0.01, "response_length/mean": 50, "critic/advantages/max": 3})
	if ended || out["reward"] != 1 || out["kl"] != 0.1 || out["actor/reward_kl_penalty"] != 0.2 || out["completions/mean_length"] != 50 || out["actor/ppo_kl"] != 0.01 {
		t.Fatalf("verl: %v", out)
	}
	if u := strings.Join(m.Unmapped(), ","); u != "actor/ppo_kl,actor/reward_kl_penalty,critic/advantages/max" {
		t.Errorf("unmapped %s", u)
	}
	// Without kl_loss, the in-reward KL penalty is the KL.
	if out, _ := newMapper(KindVerl).apply(map[string]float64{"actor/reward_kl_penalty": 0.2}); out["kl"] != 0.2 {
		t.Errorf("reward_kl_penalty: %v", out)
	}
	m = newMapper(KindTRL)
	out, _ = m.apply(map[string]float64{"train/completion_length": 40, "train/rewards/acc": 0.5, "train/rewards/acc/std": 0.1,
		"train/clip_ratio": 0.01, "eval_loss": 2})
	if out["completions/mean_length"] != 40 || out["rewards/acc/mean"] != 0.5 || out["rewards/acc/std"] != 0.1 ||
		out["clip_ratio/region_mean"] != 0.01 || out["eval/loss"] != 2 {
		t.Errorf("older TRL names: %v", out)
	}
	if _, ended := m.apply(map[string]float64{"train_runtime": 1}); !ended {
		t.Error("the end-of-training summary is not seen")
	}
	out, _ = newMapper(KindOpenRLHF).apply(map[string]float64{"train/policy_loss": 1, "train/actor_lr": 1e-6, "train/group_reward_std": 0.2})
	if out["loss"] != 1 || out["learning_rate"] != 1e-6 || out["reward_std"] != 0.2 {
		t.Errorf("OpenRLHF: %v", out)
	}
}

func TestKindOfTags(t *testing.T) {
	for _, c := range []struct {
		tags []string
		want Kind
	}{
		{[]string{"critic/score/mean"}, KindVerl},
		{[]string{"train/reward", "train/policy_loss"}, KindOpenRLHF},
		{[]string{"train/reward", "train/loss", "train/learning_rate"}, KindTRL},
		{[]string{"reward", "kl"}, KindTensorBoard},
		{nil, ""},
	} {
		if got := kindOfTags(c.tags); got != c.want {
			t.Errorf("%v: %q, want %q", c.tags, got, c.want)
		}
	}
}

func TestDetectSaysWhatItLookedFor(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello"), 0o644)
	os.WriteFile(filepath.Join(dir, "other.jsonl"), []byte(`{"a": 1}`+"\n"), 0o644)
	_, err := Detect(dir)
	if err == nil || !strings.Contains(err.Error(), "no run found") || !strings.Contains(err.Error(), "trainer_state.json") ||
		!strings.Contains(err.Error(), "events.out.tfevents") || !strings.Contains(err.Error(), `{"step", "data"}`) {
		t.Fatalf("%v", err)
	}
	if _, err := Detect(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing: %v", err)
	}
	if _, err := Detect(filepath.Join(dir, "notes.txt")); err == nil || !strings.Contains(err.Error(), "not a file this tool reads") {
		t.Errorf("a text file: %v", err)
	}
	if _, err := Detect(filepath.Join(dir, "other.jsonl")); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Errorf("other jsonl: %v", err)
	}
	// Several runs of ours under one folder: say which.
	for _, n := range []string{"a", "b"} {
		os.MkdirAll(filepath.Join(dir, "runs", n), 0o755)
		os.WriteFile(filepath.Join(dir, "runs", n, "events.jsonl"), nil, 0o644)
	}
	if _, err := Detect(filepath.Join(dir, "runs")); err == nil || !strings.Contains(err.Error(), "is not a run folder: it holds 2 rlhfstation run(s)") {
		t.Errorf("runs/: %v", err)
	}
}

// A damaged or cut event file: the good records are read, the problem is reported with the
// file and byte, nothing panics.
func TestDamagedEventFiles(t *testing.T) {
	dir := t.TempDir()
	p := runstest.Plan{Steps: 30, Seed: 3}
	ef, err := runstest.CreateEventFile(dir, 1700000000, runstest.SimpleValue)
	if err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= 20; s++ {
		ef.Step(s, p.Metrics(s), "train/")
	}
	// A record whose data CRC is wrong, then more good steps, then a torn record.
	bad := runstest.Record(runstest.ScalarEvent(1, 21, "train/reward", 0.5, runstest.SimpleValue))
	bad[len(bad)-1] ^= 0xff
	ef.WriteRaw(bad)
	for s := 21; s <= 25; s++ {
		ef.Step(s, p.Metrics(s), "train/")
	}
	torn := runstest.Record(runstest.ScalarEvent(1, 26, "train/reward", 0.5, runstest.SimpleValue))
	ef.WriteRaw(torn[:len(torn)-3])
	ef.Close()

	r, err := Detect(dir)
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, r, Options{})
	if n := len(ofType(evs, events.Step)); n != 25 {
		t.Errorf("%d steps read, want 25", n)
	}
	var warns []string
	for _, e := range ofType(evs, events.Log) {
		if e.Level == "warn" {
			warns = append(warns, e.Message)
		}
	}
	all := strings.Join(warns, "\n")
	if !strings.Contains(all, "data CRC mismatch") || !strings.Contains(all, "incomplete") || !strings.Contains(all, ef.Path) {
		t.Errorf("warnings:\n%s", all)
	}

	// Not an event file at all.
	os.WriteFile(filepath.Join(dir, "events.out.tfevents.1700000001.x"), []byte("this is not a TFRecord file at all, no"), 0o644)
	r, _ = Detect(dir)
	evs = collect(t, r, Options{})
	if !strings.Contains(fmt.Sprint(ofType(evs, events.Log)), "length CRC") {
		t.Errorf("garbage file not reported: %v", ofType(evs, events.Log))
	}
}

func TestVerlTornAndBadLines(t *testing.T) {
	dir := t.TempDir()
	p := runstest.Plan{Steps: 12, Seed: 4}
	path := filepath.Join(dir, "proj", "exp.jsonl")
	if err := runstest.WriteVerlLog(path, p, true); err != nil {
		t.Fatal(err)
	}
	// A line that is not JSON, in the middle.
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(b), "\n")
	lines = append(lines[:5], append([]string{"{oops\n"}, lines[5:]...)...)
	os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644)
	r, err := Detect(dir)
	if err != nil || r.Kind != KindVerl {
		t.Fatalf("%v %+v", err, r)
	}
	evs := collect(t, r, Options{})
	if n := len(ofType(evs, events.Step)); n != 11 {
		t.Errorf("%d steps, want 11 (the torn 12th left out)", n)
	}
	msg := fmt.Sprint(ofType(evs, events.Log))
	if !strings.Contains(msg, "exp.jsonl:6:") || !strings.Contains(msg, "exp.jsonl:13: the last line has no end") {
		t.Errorf("logs %s", msg)
	}
}

// Following: records appended after the stream started arrive within a second, including a
// step whose record was torn when first read.
func TestFollowTensorBoard(t *testing.T) {
	dir := t.TempDir()
	p := runstest.Plan{Steps: 40, Seed: 5, KLSpike: 30}
	ef, err := runstest.CreateEventFile(filepath.Join(dir, "runs", "x"), 1700000000, runstest.SimpleValue)
	if err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= 10; s++ {
		ef.Step(s, p.Metrics(s), "train/")
	}
	r, err := Detect(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := r.Stream(ctx, Options{Follow: true, Poll: 20 * time.Millisecond})
	lastStep := 0
	var kl []events.Event
	waitStep := func(step int) time.Duration {
		t.Helper()
		start := time.Now()
		deadline := time.After(5 * time.Second)
		for lastStep < step {
			select {
			case e := <-ch:
				if e.Type == events.Step {
					lastStep = e.Step
				}
				if e.Type == events.Anomaly {
					kl = append(kl, e)
				}
			case <-deadline:
				t.Fatalf("step %d did not arrive (last %d)", step, lastStep)
			}
		}
		return time.Since(start)
	}
	waitStep(10)
	for s := 11; s <= 20; s++ {
		ef.Step(s, p.Metrics(s), "train/")
	}
	// Half of step 21's first record: it must wait for the rest, not fail.
	rec := runstest.Record(runstest.ScalarEvent(1, 21, "train/aaa", 1, runstest.SimpleValue))
	ef.WriteRaw(rec[:7])
	if d := waitStep(20); d > time.Second {
		t.Errorf("appended steps took %v to arrive", d)
	}
	ef.WriteRaw(rec[7:])
	for s := 21; s <= 35; s++ {
		ef.Step(s, p.Metrics(s), "train/")
	}
	waitStep(35)
	timeout := time.After(2 * time.Second)
	for len(kl) == 0 {
		select {
		case e := <-ch:
			if e.Type == events.Anomaly {
				kl = append(kl, e)
			}
		case <-timeout:
			t.Fatal("no alert for the KL spike while following")
		}
	}
	if len(kl) != 1 || kl[0].Rule != "kl_high" || kl[0].Step != 31 {
		t.Errorf("alert %+v", kl[0])
	}
	cancel()
	for range ch {
	}
}

func TestFollowTrainerStateCheckpoints(t *testing.T) {
	dir := t.TempDir()
	p := runstest.Plan{Steps: 30, Seed: 6}
	runstest.Checkpoint(dir, p, 10)
	r, err := Detect(dir)
	if err != nil || r.Format != FormatTrainerState {
		t.Fatalf("%v %+v", err, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := r.Stream(ctx, Options{Follow: true, Poll: 20 * time.Millisecond})
	var steps []int
	var ckpts []int
	var end events.Event
	written := false
	for e := range ch {
		switch e.Type {
		case events.Step:
			steps = append(steps, e.Step)
			if e.Step == 10 && !written {
				written = true
				runstest.Checkpoint(dir, p, 20)
				runstest.Checkpoint(dir, p, 30)
			}
		case events.Checkpoint:
			ckpts = append(ckpts, e.Step)
		case events.RunEnd:
			end = e
		}
	}
	if len(steps) != 30 || !sort.IntsAreSorted(steps) {
		t.Errorf("steps %v", steps)
	}
	if end.Status != "completed" {
		t.Errorf("run_end %+v", end)
	}
	if fmt.Sprint(ckpts) != "[10 20 30]" {
		t.Errorf("checkpoints %v", ckpts)
	}
}

func TestSamples(t *testing.T) {
	dir := t.TempDir()
	p := runstest.Plan{Steps: 30, Seed: 7}
	runstest.WriteTRL(dir, p, runstest.TRLOptions{TensorBoard: true, Completions: true})
	r, _ := Detect(dir)
	evs := collect(t, r, Options{})
	ss := ofType(evs, events.Samples)
	if len(ss) != 3 || ss[0].Step != 10 || len(ss[0].Samples) != 2 {
		t.Fatalf("samples %+v", ss)
	}
	s := ss[2].Samples[0]
	if s.Prompt != "What is 2+3?" || s.Completion != "2+3 = 5 (step 30)" || s.Reward != 1 || s.Rewards["accuracy_reward"] != 1 || s.Advantage != 0.5 {
		t.Errorf("sample %+v", s)
	}
	// Completions arrive after their step's metrics.
	for i, e := range evs {
		if e.Type == events.Samples {
			if prev := lastOf(evs[:i], events.Step); prev.Step != e.Step {
				t.Errorf("samples of step %d follow step %d", e.Step, prev.Step)
			}
		}
	}

	// TRL's parquet tables (log_completions), beside TensorBoard events.
	pd := t.TempDir()
	runstest.WriteTRL(pd, p, runstest.TRLOptions{TensorBoard: true})
	runstest.ParquetCompletions(pd, 20, [][3]any{{"What is 6*7?", "6*7 = 42", 1.0}, {"What is 6*7?", "41", 0.0}})
	r, _ = Detect(pd)
	ss = ofType(collect(t, r, Options{}), events.Samples)
	if len(ss) != 1 || ss[0].Step != 20 || len(ss[0].Samples) != 2 {
		t.Fatalf("parquet samples %+v", ss)
	}
	if s := ss[0].Samples[1]; s.Prompt != "What is 6*7?" || s.Completion != "41" || s.Rewards["accuracy_reward"] != 0 ||
		s.Rewards["format_reward"] != 0.5 || s.Reward != 0.5 || s.Advantage != 0.25 {
		t.Errorf("parquet sample %+v", s)
	}
	if !strings.Contains(r.Describe(), "completions (1 TRL parquet tables)") {
		t.Errorf("describe: %s", r.Describe())
	}

	// verl's rollout dumps.
	vd := t.TempDir()
	runstest.WriteVerlLog(filepath.Join(vd, "logs", "exp.jsonl"), p, false)
	runstest.RolloutDump(filepath.Join(vd, "rollouts"), 5, [][3]any{{"Q?", "A.", 0.75}})
	r, _ = Detect(vd)
	ss = ofType(collect(t, r, Options{}), events.Samples)
	if len(ss) != 1 || ss[0].Step != 5 || ss[0].Samples[0].Reward != 0.75 || ss[0].Samples[0].Answer != "42" || ss[0].Samples[0].Rewards["acc"] != 0.75 {
		t.Errorf("verl rollouts %+v", ss)
	}
	if !strings.Contains(r.Describe(), "rollouts (1 verl rollout dumps)") {
		t.Errorf("describe: %s", r.Describe())
	}

	// OpenRLHF's generated sample text.
	s, ok := parseGeneratedSample("train/generated_samples", `Sample:\nWhat is 1+1? 2\n\nReward: 0.2500`)
	if !ok || s.Completion != "What is 1+1? 2" || s.Reward != 0.25 {
		t.Errorf("openrlhf %+v", s)
	}
}

func lastOf(evs []events.Event, t events.Type) events.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == t {
			return evs[i]
		}
	}
	return events.Event{}
}

func TestCheckpointsListing(t *testing.T) {
	dir := t.TempDir()
	p := runstest.Plan{Steps: 20, Seed: 8}
	runstest.Checkpoint(dir, p, 10)
	runstest.Checkpoint(dir, p, 2)
	os.MkdirAll(filepath.Join(dir, "checkpoint-5"), 0o755) // no adapter: a full fine-tune, not listed
	runstest.Adapter(filepath.Join(dir, "ckpts", "global_step_7", "actor", "lora_adapter"), runstest.AdapterOptions{})
	cps, err := Checkpoints(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cps {
		got = append(got, fmt.Sprintf("%d:%s", c.Step, relTo(dir, c.Path)))
	}
	if strings.Join(got, " ") != "2:checkpoint-2 7:ckpts/global_step_7/actor/lora_adapter 10:checkpoint-10" {
		t.Errorf("%v", got)
	}
}

// TestFixtureEventFilesReadByPython: the fixtures' event files, in every scalar encoding and
// with a text summary, read the same with the independent Python reader as with ours.
func TestFixtureEventFilesReadByPython(t *testing.T) {
	py := testref.Python3(t)
	{
		// One file, one step in each scalar encoding (one python start: it is slow here).
		ef, err := runstest.CreateEventFile(t.TempDir(), 1700000000, runstest.SimpleValue)
		if err != nil {
			t.Fatal(err)
		}
		for i, enc := range []runstest.Encoding{runstest.SimpleValue, runstest.TensorFloat, runstest.TensorContent} {
			ef.Enc = enc
			ef.Step(i+1, map[string]float64{"train/reward": 0.625, "train/kl": math.NaN(), "train/loss": -1.5e-7}, "")
		}
		ef.Text(3, "train/generated_samples", "Sample:\\nhi\\n\\nReward: 1.0000")
		ef.Close()
		out, err := exec.Command(py, filepath.Join("..", "tensorboard", "testdata", "read_events.py"), ef.Path).Output()
		if err != nil {
			t.Fatalf("read_events.py: %v", err)
		}
		var doc struct {
			Events []struct {
				Step   int64 `json:"step"`
				Values []struct {
					Tag    string  `json:"tag"`
					Bits   *uint32 `json:"bits"`
					Text   *string `json:"text"`
					Plugin string  `json:"plugin"`
				} `json:"values"`
			} `json:"events"`
		}
		if err := json.Unmarshal(out, &doc); err != nil {
			t.Fatal(err)
		}
		ours, err := tensorboard.ReadFile(ef.Path)
		if err != nil {
			t.Fatal(err)
		}
		if len(ours) != len(doc.Events) || len(ours) != 11 {
			t.Fatalf("%d events here, %d in python", len(ours), len(doc.Events))
		}
		for i, ev := range ours {
			pv := doc.Events[i]
			if pv.Step != ev.Step || len(pv.Values) != len(ev.Values) {
				t.Fatalf("event %d differs: %+v / %+v", i, pv, ev)
			}
			for j, v := range ev.Values {
				p := pv.Values[j]
				switch v.Kind {
				case tensorboard.Scalar:
					if p.Bits == nil || *p.Bits != math.Float32bits(float32(v.Value)) {
						t.Errorf("%s: python bits %v, ours %v", v.Tag, p.Bits, v.Value)
					}
				case tensorboard.Text:
					if p.Text == nil || *p.Text != v.Text || p.Plugin != "text" || v.Plugin != "text" {
						t.Errorf("%s: python %v, ours %q", v.Tag, p.Text, v.Text)
					}
				default:
					t.Errorf("%s: kind %d", v.Tag, v.Kind)
				}
			}
		}
	}
}

// TestFixturesParseWithPython: the trainer_state.json and verl log fixtures are what Python's
// json module reads (and writes): a float epoch, NaN for the planted grad_norm, null in verl's.
func TestFixturesParseWithPython(t *testing.T) {
	py := testref.Python3(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "trainer_state.json")
	if err := runstest.TrainerState(state, planted, 30); err != nil {
		t.Fatal(err)
	}
	verl := filepath.Join(dir, "exp.jsonl")
	runstest.WriteVerlLog(verl, planted, false)
	script := `
import json, math, sys
s = json.load(open(sys.argv[1]))
assert isinstance(s["epoch"], float) and s["global_step"] == 30, s["epoch"]
h = s["log_history"]
assert len(h) == 30 and math.isnan(h[24]["grad_norm"]) and h[24]["step"] == 25
lines = [json.loads(l) for l in open(sys.argv[2])]
assert len(lines) == 80 and lines[24]["data"]["actor/grad_norm"] is None and lines[24]["step"] == 25
print("ok")
`
	out, err := exec.Command(py, "-c", script, state, verl).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("%v\n%s", err, out)
	}
}
