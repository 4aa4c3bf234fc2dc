// Package replay reads a run folder (DESIGN §9) back for the dashboard: its events.jsonl,
// followed as it grows while the run is live, and the checkpoints saved in it. It also writes
// the plain-text summary that `rlhfstation replay` prints when its output is not a terminal.
package replay

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"time"

	"rlhfstation/engine/events"
)

// EventsFile is the events file of a run folder.
func EventsFile(runDir string) string { return filepath.Join(runDir, "events.jsonl") }

// Check says, before any screen opens, why runDir cannot be replayed: a missing folder, a
// folder without events.jsonl, or an events file that does not parse (with its line).
func Check(runDir string) error {
	fi, err := os.Stat(runDir)
	if err != nil {
		if os.IsNotExist(err) {
			return fmt.Errorf("run folder %s does not exist", runDir)
		}
		return fmt.Errorf("run folder %s: %v", runDir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a run folder (it is a file; give the folder that holds events.jsonl)", runDir)
	}
	p := EventsFile(runDir)
	if _, err := os.Stat(p); err != nil {
		if os.IsNotExist(err) {
			return fmt.Errorf("%s has no events.jsonl: not a run folder, or the run has not started", runDir)
		}
		return fmt.Errorf("%s: %v", p, err)
	}
	_, err = events.ReadFile(p)
	return err
}

// Stream sends the events of path on the returned channel: those already written, then, when
// follow is set, those appended later (the file is polled every poll) until run_end or ctx
// ends. The channel closes at the end. A read or parse error ends the stream with a log event
// of level "error" naming the file and line, so the dashboard can say what went wrong.
func Stream(ctx context.Context, path string, follow bool, poll time.Duration) <-chan events.Event {
	ch := make(chan events.Event, 256)
	go func() {
		defer close(ch)
		send := func(e events.Event) bool {
			select {
			case ch <- e:
				return true
			case <-ctx.Done():
				return false
			}
		}
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
				if !follow {
					return
				}
				select {
				case <-time.After(poll):
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
	}()
	return ch
}

// FolderCheckpoint is a checkpoint folder found on disk.
type FolderCheckpoint struct {
	Step int
	Path string
}

var stepDir = regexp.MustCompile(`^step-(\d+)$`)

// Checkpoints lists runDir/checkpoints/step-NNNNNN folders by step. A run without a
// checkpoints folder has none; other errors are returned.
func Checkpoints(runDir string) ([]FolderCheckpoint, error) {
	dir := filepath.Join(runDir, "checkpoints")
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []FolderCheckpoint
	for _, e := range ents {
		m := stepDir.FindStringSubmatch(e.Name())
		if !e.IsDir() || m == nil {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		out = append(out, FolderCheckpoint{Step: n, Path: filepath.Join(dir, e.Name())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out, nil
}
