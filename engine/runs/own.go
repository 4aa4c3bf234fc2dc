package runs

import (
	"context"
	"io"
	"os"
	"time"

	"rlhfstation/engine/events"
	"rlhfstation/engine/monitor"
)

// observe runs the monitor over a step or samples event and sends its alerts.
func observe(mon *monitor.Monitor, e events.Event, send func(events.Event) bool) bool {
	var alerts []events.Event
	mon.Now = func() time.Time { return e.Time }
	switch e.Type {
	case events.Step:
		alerts = mon.Observe(e.Step, e.Metrics)
	case events.Samples:
		alerts = mon.ObserveSamples(e.Step, e.Samples)
	}
	for _, a := range alerts {
		if !send(a) {
			return false
		}
	}
	return true
}

// streamOwn sends the events of an rlhfstation events.jsonl: those written, then, when
// following, those appended later until run_end. A read or parse error ends the stream with a
// log event of level "error" naming the file and line.
func streamOwn(ctx context.Context, path string, o Options, send func(events.Event) bool) {
	f, err := os.Open(path)
	if err != nil {
		send(events.Event{Type: events.Log, Time: time.Now(), Level: "error", Message: err.Error()})
		return
	}
	defer f.Close()
	r := events.NewReader(f, path)
	// Another tool's trainer writing this format (examples/rlhfstation_callback.py) logs its
	// metrics and completions but no alerts: they are computed here, as for its own files.
	var mon *monitor.Monitor
	for {
		e, err := r.Next()
		switch {
		case err == io.EOF:
			if !o.Follow {
				return
			}
			select {
			case <-time.After(o.poll()):
				continue
			case <-ctx.Done():
				return
			}
		case err != nil:
			send(events.Event{Type: events.Log, Time: time.Now(), Level: "error", Message: err.Error()})
			return
		}
		if !send(e) || e.Type == events.RunEnd {
			return
		}
		if e.Type == events.RunStart && e.Source != "" && mon == nil {
			mon = foreignMonitor(o)
		}
		if mon != nil && !observe(mon, e, send) {
			return
		}
	}
}
