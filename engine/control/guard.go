package control

import (
	"rlhfstation/engine/events"
	"rlhfstation/engine/monitor"
)

// Guard passes a followed run's events through and, at the first alert named in stopOn (or
// in the [monitor] stop_on of the run's own configuration, which the TRL callback records in
// run_start), asks the trainer to stop through dir's control file, naming the rule and the
// step. The trainer saves, stops and acknowledges it in its events. A failure to write the
// request arrives as a log event of level "error".
func Guard(dir string, stopOn []string, in <-chan events.Event) <-chan events.Event {
	out := make(chan events.Event, cap(in))
	go func() {
		defer close(out)
		names := append([]string(nil), stopOn...)
		asked := false
		for e := range in {
			out <- e
			switch {
			case e.Type == events.RunStart:
				names = append(names, StopOnOf(e.Config)...)
			case e.Type == events.RunEnd:
				asked = true
			case !asked:
				name := monitor.StopOn(names, e)
				if name == "" {
					continue
				}
				asked = true
				if _, err := Send(dir, Stop, "stop_on", monitor.StopReason(name, e)); err != nil {
					out <- events.Event{Type: events.Log, Time: e.Time, Step: e.Step, Level: "error",
						Message: "stop_on " + name + ": asking the run to stop: " + err.Error()}
				}
			}
		}
	}()
	return out
}

// StopOnOf reads [monitor] stop_on from a run_start event's configuration (nil when absent).
func StopOnOf(cfg map[string]any) []string {
	mon, _ := cfg["monitor"].(map[string]any)
	list, _ := mon["stop_on"].([]any)
	var out []string
	for _, v := range list {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
