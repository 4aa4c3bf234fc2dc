package engine

import (
	"path/filepath"
	"testing"

	"rlhfstation/engine/events"
	"rlhfstation/engine/runs"
)

// [report] to = ["wandb"]: the run folder gets a W&B offline run whose history is the run's
// steps, read back by the W&B reader as the same metrics, ending completed.
func TestRunReportsToWandb(t *testing.T) {
	c := tinyConfig(t, "math", 2)
	c.Report.To = []string{"wandb"}
	evs, e, err := run(t, c, "", "math")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(e.RunDir(), "wandb", "offline-run-*", "run-*.wandb"))
	meta, _ := filepath.Glob(filepath.Join(e.RunDir(), "wandb", "offline-run-*", "files", "wandb-metadata.json"))
	if len(files) != 1 || len(meta) != 1 {
		t.Fatalf("W&B files %v %v", files, meta)
	}
	r, err := runs.Detect(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != runs.KindWandb {
		t.Errorf("kind %q", r.Kind)
	}
	want := stepMetrics(evs)
	var got []events.Event
	var end events.Event
	for ev := range r.Stream(t.Context(), runs.Options{}) {
		switch ev.Type {
		case events.Step:
			got = append(got, ev)
		case events.RunEnd:
			end = ev
		}
	}
	if len(got) != 2 || end.Status != "completed" {
		t.Fatalf("%d steps read back, end %+v", len(got), end)
	}
	for _, ev := range got {
		for k, v := range want[ev.Step] {
			if g, ok := ev.Metrics[k]; !ok || (g != v && !(g != g && v != v)) {
				t.Errorf("step %d %s = %v, wrote %v", ev.Step, k, g, v)
			}
		}
	}
}
