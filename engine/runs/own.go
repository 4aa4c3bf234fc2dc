package runs

import (
	"context"
	"io"
	"os"
	"time"

	"rlhfstation/engine/events"
)

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
	}
}
