package runs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/events"
	"rlhfstation/engine/runs/runstest"
)

// A damaged block costs the steps in it, with a warning naming the file; the rest are read.
func TestWandbDamagedBlockSkipped(t *testing.T) {
	dir := t.TempDir()
	p := runstest.Plan{Steps: 200, Seed: 6}
	path, err := runstest.WriteWandb(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if len(b) < 3*32768 {
		t.Fatalf("%d bytes: want several blocks", len(b))
	}
	b[32768+500] ^= 0x10 // inside the second block
	os.WriteFile(path, b, 0o644)
	r, err := Detect(dir)
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, r, Options{})
	steps := ofType(evs, events.Step)
	if len(steps) >= p.Steps || len(steps) < p.Steps-60 || steps[len(steps)-1].Step != p.Steps {
		t.Errorf("%d steps, last %d: want a block's worth fewer than %d, through the end", len(steps), steps[len(steps)-1].Step, p.Steps)
	}
	msg := fmt.Sprint(ofType(evs, events.Log))
	if !strings.Contains(msg, "checksum mismatch") || !strings.Contains(msg, path) {
		t.Errorf("logs %s", msg)
	}
	if end := lastOf(evs, events.RunEnd); end.Status != "completed" {
		t.Errorf("run_end %+v", end)
	}
}

// Following a .wandb file as it grows, a few bytes at a time, torn chunks included.
func TestFollowWandb(t *testing.T) {
	src := t.TempDir()
	p := runstest.Plan{Steps: 30, Seed: 7}
	full, err := runstest.WriteWandb(src, p)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(full)
	live := filepath.Join(t.TempDir(), "run-live.wandb")
	f, _ := os.Create(live)
	defer f.Close()
	f.Write(data[:len(data)/3])
	r, err := Detect(live)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := r.Stream(ctx, Options{Follow: true, Poll: 10 * time.Millisecond})
	go func() {
		for off := len(data) / 3; off < len(data); off += 301 {
			time.Sleep(2 * time.Millisecond)
			f.Write(data[off:min(off+301, len(data))])
		}
	}()
	var steps []int
	var end events.Event
	for e := range ch {
		switch e.Type {
		case events.Step:
			steps = append(steps, e.Step)
		case events.RunEnd:
			end = e
		}
	}
	if len(steps) != p.Steps || steps[p.Steps-1] != p.Steps || end.Status != "completed" {
		t.Errorf("followed steps %v, end %+v", steps, end)
	}
}

// verl's file logger with keys besides step and data (forks and later versions add timings):
// read, the extra keys ignored.
func TestVerlExtraKeys(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for s := 1; s <= 5; s++ {
		fmt.Fprintf(&b, `{"step":%d,"data":{"critic/score/mean":0.%d,"actor/kl_loss":0.01},"timestamp":1700000000.5,"timing":{"gen":1.5}}`+"\n", s, s)
	}
	path := filepath.Join(dir, "exp.jsonl")
	os.WriteFile(path, []byte(b.String()), 0o644)
	for _, arg := range []string{dir, path} {
		r, err := Detect(arg)
		if err != nil || r.Kind != KindVerl {
			t.Fatalf("%s: %v %+v", arg, err, r)
		}
		steps := ofType(collect(t, r, Options{}), events.Step)
		if len(steps) != 5 || steps[4].Metrics["reward"] != 0.5 || steps[4].Metrics["kl"] != 0.01 {
			t.Errorf("%s: steps %+v", arg, steps)
		}
	}
	// A step that is not a whole number is still not verl's.
	os.WriteFile(path, []byte(`{"step":"x","data":{"a":1},"other":2}`+"\n"), 0o644)
	if _, err := Detect(path); err == nil {
		t.Error("a line with a string step was taken as verl's")
	}
}
