package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/control"
	"rlhfstation/engine/events"
)

// TestControlFileSteersRun: the run folder's control file, written from "another terminal"
// (rlhfstation control), saves, pauses, resumes and stops a headless run; the engine
// acknowledges each request in its events when it takes effect.
func TestControlFileSteersRun(t *testing.T) {
	c := tinyConfig(t, "story", 8)
	c.SaveSteps = 0
	e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: prompts(t, "story")})
	if err != nil {
		t.Fatal(err)
	}
	// A file left by an earlier run asks nothing of this one.
	if _, err := control.Send(e.RunDir(), control.Stop, "old", ""); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	var acks []string
	var ckpts []int
	var end events.Event
	last, stepsPaused := 0, -1
	for ev := range e.Events() {
		switch ev.Type {
		case events.Step:
			last = ev.Step
			if stepsPaused >= 0 {
				stepsPaused++
			}
			switch ev.Step {
			case 1:
				control.Send(e.RunDir(), control.Save, "test", "")
			case 3:
				control.Send(e.RunDir(), control.Pause, "test", "")
			}
		case events.Log:
			if ev.Control == "" {
				continue
			}
			acks = append(acks, ev.Control)
			switch ev.Control {
			case "pause":
				stepsPaused = 0
				go func() {
					time.Sleep(600 * time.Millisecond)
					control.Send(e.RunDir(), control.Resume, "test", "")
				}()
			case "resume":
				if stepsPaused != 0 {
					t.Errorf("%d steps ran while paused", stepsPaused)
				}
				stepsPaused = -1
				control.Send(e.RunDir(), control.Stop, "test", "out of budget")
			}
		case events.Checkpoint:
			ckpts = append(ckpts, ev.Step)
		case events.RunEnd:
			end = ev
		}
	}
	err = <-done
	if !errors.Is(err, ErrStopped) || end.Status != "stopped" || end.Reason != "stopped by the user: out of budget" || end.Step != last || last >= 8 {
		t.Fatalf("run ended with %v, %+v after step %d", err, end, last)
	}
	if strings.Join(acks, " ") != "save pause resume stop" {
		t.Errorf("acknowledgements %v", acks)
	}
	if len(ckpts) != 2 || ckpts[0] < 1 || ckpts[0] > 3 || ckpts[1] != last {
		t.Errorf("checkpoints at %v (the asked save, then the stop's at %d)", ckpts, last)
	}
}

// TestStopOnAlert: an alert named in [monitor] stop_on stops the run after its step, saving
// first; the run_end and the error name the rule and the step.
func TestStopOnAlert(t *testing.T) {
	c := tinyConfig(t, "story", 6)
	c.Monitor = map[string]any{"stop_on": []any{"grad_norm"}, "grad_norm_max": 1e-12, "grace_steps": 1}
	evs, _, err := run(t, c, "", "story")
	var stop *AlertStopError
	if !errors.As(err, &stop) || !errors.Is(err, ErrStopped) {
		t.Fatalf("Run returned %v", err)
	}
	end := evs[len(evs)-1]
	want := "stop_on grad_norm: grad_norm on grad_norm at step 2"
	if end.Type != events.RunEnd || end.Status != "stopped" || end.Reason != want || end.Step != 2 || stop.Reason != want {
		t.Fatalf("run_end %+v, error %v; want %q", end, err, want)
	}
	if !strings.HasSuffix(end.Path, "step-000002") {
		t.Errorf("no checkpoint of the stop's step: %q", end.Path)
	}
}
