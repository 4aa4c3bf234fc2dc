package e2e

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/monitor"
	"rlhfstation/safetensors"
	"rlhfstation/tui/fixture"
)

// writeAdapters puts a LoRA adapter (r 16, as the fixture's adapter_config.json says) on the
// attention and MLP projections of a 12-block model into each checkpoint folder of a run,
// each step's weights drifting from the last.
func writeAdapters(t *testing.T, dir string) {
	t.Helper()
	r := rand.New(rand.NewPCG(7, 26))
	const hidden, rank = 32, 16
	values := map[string][]float32{}
	for _, step := range fixture.CheckpointSteps {
		var ts []safetensors.Tensor
		for l := range 12 {
			for _, k := range []string{"self_attn.q_proj", "self_attn.v_proj", "mlp.up_proj", "mlp.down_proj"} {
				for _, f := range []struct {
					suffix string
					shape  []int
					sd     float64
				}{{".lora_A.weight", []int{rank, hidden}, 0.2}, {".lora_B.weight", []int{hidden, rank}, 0.01}} {
					name := fmt.Sprintf("base_model.model.model.layers.%d.%s%s", l, k, f.suffix)
					v := values[name]
					if v == nil {
						v = make([]float32, f.shape[0]*f.shape[1])
					}
					if !(l == 3 && k == "self_attn.v_proj") || step == fixture.CheckpointSteps[0] { // one module frozen
						for i := range v {
							v[i] += float32(f.sd * r.NormFloat64())
						}
					}
					values[name] = v
					ts = append(ts, safetensors.F32Tensor(name, f.shape, v))
				}
			}
		}
		path := filepath.Join(dir, "checkpoints", fmt.Sprintf("step-%06d", step), "adapter_model.safetensors")
		if err := safetensors.Write(path, ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
}

// The inspector with a reference, in a real terminal at 80×24 and at 120×40 (issue 26): the
// report is laid out for its pane (70 columns beside the table at 120, 78 below it at 80), so
// every line on screen is a whole line of the report at that width, no line wrapped and no
// number cut, and each module row shown holds its layer, name, ‖s·B·A‖, drift and change.
func TestInspectorWithReferenceInTmux(t *testing.T) {
	bin := build(t)
	dir := filepath.Join(t.TempDir(), "run")
	if err := fixture.WriteRunDir(dir, fixture.Events(fixture.Options{})); err != nil {
		t.Fatal(err)
	}
	writeAdapters(t, dir)
	ck := filepath.Join(dir, "checkpoints", "step-000060")
	ref := filepath.Join(dir, "checkpoints", "step-000020")
	rep, err := monitor.Analyze(ck, ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []struct{ w, h, pane int }{{80, 24, 78}, {120, 40, 70}} {
		t.Run(fmt.Sprintf("%dx%d", size.w, size.h), func(t *testing.T) {
			var want strings.Builder
			rep.WriteTextFit(&want, 8, "", size.pane) // the command it names differs: those lines are not compared
			lines := map[string]bool{}
			for _, l := range strings.Split(want.String(), "\n") {
				lines[l] = true
			}
			tm := newTmux(t, size.w, size.h, fmt.Sprintf("NO_COLOR=1 %s replay %s; sleep 60", bin, dir))
			tm.waitFor("KL divergence")
			tm.keys("c")
			tm.waitFor("checkpoints · 3")
			tm.keys("Up", "Up", "r", "Down", "Down", "Enter")
			tm.waitFor("score 0.")
			seen := map[string]bool{}
			for range 70 {
				for _, l := range strings.Split(tm.screen(false), "\n") {
					if parts := strings.Split(l, "│"); len(parts) >= 3 {
						seen[strings.TrimRight(parts[len(parts)-2], " ")] = true
					}
				}
				tm.keys("Right")
			}
			checked := 0
			for l := range seen {
				if !strings.Contains(l, "‖") && !strings.Contains(l, "%") && !strings.Contains(l, "_proj") || strings.HasPrefix(l, "  · ") || strings.Contains(l, "rlhfstation inspect") {
					continue // the pane's rows above the report, and prose
				}
				checked++
				if !lines[l] {
					t.Errorf("a line wrapped or cut by the pane (not a line of the report at %d columns): %q", size.pane, l)
				}
			}
			rows := 0
			for _, g := range rep.Groups {
				for _, m := range g.Modules[:min(8, len(g.Modules))] {
					figures := []string{fmt.Sprint(m.Layer), m.Kind, fmt.Sprintf("%.4g", m.NormBA), fmt.Sprintf("%.4g", m.Drift.DeltaBA)}
					if m.Drift.RelChange != nil {
						figures = append(figures, fmt.Sprintf("%+.1f%%", 100**m.Drift.RelChange))
					}
					for l := range seen {
						ok := true
						for _, f := range figures {
							ok = ok && strings.Contains(l, f)
						}
						if ok {
							rows++
							break
						}
					}
				}
			}
			if rows < 16 || checked < 20 {
				t.Errorf("%d of 16 module rows whole on screen, %d report lines checked:\n%v", rows, checked, seen)
			}
			tm.keys("q")
		})
	}
}
