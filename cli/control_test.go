package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/control"
	"rlhfstation/engine/runs/runstest"
)

func TestControlCommand(t *testing.T) {
	run := t.TempDir()
	os.WriteFile(filepath.Join(run, "events.jsonl"), []byte(`{"type":"run_start","step":0,"time":"2026-01-01T00:00:00Z"}`+"\n"), 0o644)
	code, out, errs := runCaptured(t, "control", run, "save")
	if code != 0 || !strings.Contains(out, "asked "+run+" to save (request 1") {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	code, out, _ = runCaptured(t, "control", run, "stop", "--reason", "out of budget", "--json")
	var st control.State
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Seq != 2 || st.Saves != 1 || st.Stops != 1 ||
		st.Reason != "out of budget" || st.By != "rlhfstation control" {
		t.Fatalf("exit %d: %s", code, out)
	}
	trl := t.TempDir()
	runstest.WriteTRL(trl, runstest.Plan{Steps: 5, Seed: 1}, runstest.TRLOptions{TensorBoard: true})
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"control", run}, 2, "takes a run folder and a request"},
		{[]string{"control", run, "restart"}, 2, `"restart" is not a request`},
		{[]string{"control", t.TempDir(), "pause"}, 1, "no events.jsonl here"},
		{[]string{"watch", run, "--stop-on", "kl_spik"}, 2, `"kl_spik" is not an alert`},
		{[]string{"watch", trl, "--stop-on", "nan"}, 2, "--stop-on needs a live run in this tool's format"},
		{[]string{"replay", run, "--stop-on", "nan"}, 2, "--stop-on needs a live run"},
	} {
		code, _, errs := runCaptured(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
}
