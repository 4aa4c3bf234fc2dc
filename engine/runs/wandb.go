package runs

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"rlhfstation/engine/wandb"
)

// wandbSource reads a W&B transaction log (run-<id>.wandb). Each history record is one
// logged step: its numeric items are the metrics (tables, media and text are left out), its
// step the Trainer's train/global_step when logged (TRL and every Hugging Face Trainer log it
// beside their metrics), else W&B's own step. The exit record ends the run. Damaged blocks
// are skipped with a warning; a file still being written is followed.
type wandbSource struct {
	kindSet bool
}

func (s *wandbSource) run(p *pipeline) error {
	path := p.run.Source
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rd := wandb.NewReader(f, path)
	for p.alive() && !p.ended {
		rec, err := rd.Next()
		var ce *wandb.CorruptError
		switch {
		case err == nil:
			if !s.add(p, rec) {
				return nil
			}
			continue
		case errors.As(err, &ce) && ce.Skipped:
			p.warn("damaged blocks in "+path, ce.Error())
			continue
		case errors.Is(err, wandb.ErrNotWandb):
			return err
		case err != io.EOF && !errors.Is(err, wandb.ErrIncomplete):
			return err
		}
		// The end of what is written so far.
		if !p.o.Follow {
			if errors.Is(err, wandb.ErrIncomplete) {
				p.warn(path+" torn", err.Error()+" (a writer was still appending, or the file was cut); the last record is left out")
			}
			return nil
		}
		if !p.idle() || !p.wait() {
			return nil
		}
	}
	return nil
}

// add takes one record; false when the consumer is gone.
func (s *wandbSource) add(p *pipeline, rec wandb.Record) bool {
	switch rec.Kind {
	case wandb.KindExit:
		p.ended = true
		return true
	case wandb.KindRun:
		if rec.DisplayName != "" {
			p.run.Name = rec.DisplayName
		}
		return true
	case wandb.KindHistory:
	default:
		return true
	}
	st := rawStep{Step: int(rec.Step), Values: map[string]float64{}}
	haveGlobal := false
	for _, it := range rec.Items {
		v, ok := it.Number()
		if !ok {
			continue
		}
		switch {
		case it.Key == "train/global_step":
			st.Step, haveGlobal = int(v), true
		case it.Key == "_timestamp":
			sec, frac := math.Modf(v)
			st.Time = time.Unix(int64(sec), int64(frac*1e9))
		case it.Key == "_step":
			if rec.Step < 0 && !haveGlobal {
				st.Step = int(v)
			}
		case strings.HasPrefix(it.Key, "_"): // W&B's own (_runtime)
		default:
			st.Values[it.Key] = v
		}
	}
	if !s.kindSet && len(st.Values) > 0 {
		s.kindSet = true
		k := kindOfTags(sortedKeys(st.Values))
		if k == KindTensorBoard {
			k = KindWandb
		}
		if p.mapper == nil {
			p.run.Kind = k
			p.mapper = newMapper(k)
		}
	}
	return p.step(st)
}

// verlHead reports whether a JSON line's keys make a verl file-logger record: an integer
// "step" and an object "data"; other keys (timings forks and later versions add) are ignored.
func verlHead(head map[string]json.RawMessage) bool {
	step, data := strings.TrimSpace(string(head["step"])), strings.TrimSpace(string(head["data"]))
	f, err := strconv.ParseFloat(step, 64)
	return err == nil && f == math.Trunc(f) && strings.HasPrefix(data, "{")
}

// wandbKind reads the first records of a W&B run file for the names it logs: which tool wrote
// them ("" when no step is logged yet).
func wandbKind(path string) Kind {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	rd := wandb.NewReader(f, path)
	for i := 0; i < 256; i++ {
		rec, err := rd.Next()
		var ce *wandb.CorruptError
		if err != nil {
			if errors.As(err, &ce) && ce.Skipped {
				continue
			}
			return ""
		}
		if rec.Kind != wandb.KindHistory {
			continue
		}
		var keys []string
		for _, it := range rec.Items {
			if _, ok := it.Number(); ok && !strings.HasPrefix(it.Key, "_") {
				keys = append(keys, it.Key)
			}
		}
		if k := kindOfTags(keys); k == KindTensorBoard {
			return KindWandb
		} else if k != "" {
			return k
		}
	}
	return ""
}
