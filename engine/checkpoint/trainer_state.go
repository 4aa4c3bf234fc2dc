package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"rlhfstation/engine/events"
	"rlhfstation/internal/pyjson"
)

// TrainerState is trainer_state.json: what a resume needs besides weights and moments.
//
// Hugging Face's Trainer (and so TRL and Unsloth) writes a file of the same name into its
// checkpoint-N folders; ReadTrainerState reads it too. There global_step and epoch (a float:
// the Trainer counts fractions of an epoch) are top-level keys, max_steps is the planned
// length, and log_history lists every logged step; its last training entry becomes Metrics,
// and its learning_rate LearningRate. Source says which wrote the file.
type TrainerState struct {
	GlobalStep   int     `json:"global_step"`
	LearningRate float64 `json:"learning_rate"`
	DataCursor   int     `json:"data_cursor"`
	Epoch        float64 `json:"epoch"`
	RNGState     string  `json:"rng_state"`
	ConfigHash   string  `json:"config_hash"`
	// The learning-rate schedule as planned when the run started: a resume with more steps
	// keeps it, so the rate stays continuous (0 in checkpoints older than these fields).
	ScheduleSteps int            `json:"schedule_steps,omitempty"`
	WarmupSteps   int            `json:"warmup_steps,omitempty"`
	Metrics       events.Metrics `json:"metrics,omitempty"`
	// NumInputTokensSeen counts the prompt and completion tokens sampled so far (the
	// Trainer's field of the same name; TRL logs it as num_tokens).
	NumInputTokensSeen int64 `json:"num_input_tokens_seen,omitempty"`
	// EntropyCoef and EntropyLast are the adaptive entropy controller's state
	// (use_adaptive_entropy): its coefficient and the last step's entropy (absent before the
	// first step), as TRL saves them.
	EntropyCoef *float64 `json:"entropy_coef,omitempty"`
	EntropyLast *float64 `json:"entropy_last,omitempty"`

	// Source is "" for this tool's own files and SourceTransformers for Hugging Face's.
	Source   string `json:"source,omitempty"`
	MaxSteps int    `json:"max_steps,omitempty"`
	// LogEntries counts the log_history entries (Hugging Face's files).
	LogEntries int `json:"log_entries,omitempty"`
}

// SourceTransformers marks a trainer_state.json written by Hugging Face's Trainer.
const SourceTransformers = "transformers"

// Own reports whether this tool wrote the state (and so whether a resume can use it).
func (s TrainerState) Own() bool { return s.Source == "" }

// LogEntry is one log_history entry of a Hugging Face trainer_state.json: its numeric fields
// (non-finite ones included); other fields are dropped. "step" is the global step it was logged at.
type LogEntry map[string]float64

// IsTraining reports whether the entry is a training log (not an evaluation, nor the summary the
// Trainer writes when training ends).
func (e LogEntry) IsTraining() bool {
	for k := range e {
		if len(k) > 5 && k[:5] == "eval_" || k == "train_runtime" {
			return false
		}
	}
	return true
}

// ReadTrainerState reads a trainer_state.json, this tool's or Hugging Face's.
func ReadTrainerState(path string) (TrainerState, error) {
	var last LogEntry
	s, err := ReadTrainerStateFunc(path, func(e LogEntry) error {
		if e.IsTraining() {
			last = e
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	if last != nil && len(s.Metrics) == 0 {
		s.Metrics = events.Metrics{}
		for k, v := range last {
			if k != "step" {
				s.Metrics[k] = v
			}
		}
		if lr, ok := last["learning_rate"]; ok && s.LearningRate == 0 {
			s.LearningRate = lr
		}
	}
	return s, nil
}

// ReadTrainerStateFunc reads a trainer_state.json streaming: each log_history entry goes to fn
// as it is decoded, in file order, so a long history never sits in memory whole. An error from
// fn stops the reading and is returned. Errors name the file.
func ReadTrainerStateFunc(path string, fn func(LogEntry) error) (TrainerState, error) {
	var s TrainerState
	f, err := os.Open(path)
	if err != nil {
		return s, err
	}
	defer f.Close()
	if err := decodeTrainerState(f, &s, fn); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func decodeTrainerState(r io.Reader, s *TrainerState, fn func(LogEntry) error) error {
	dec := json.NewDecoder(pyjson.NewReader(r))
	if tok, err := dec.Token(); err != nil {
		return syntax(dec, err)
	} else if tok != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	top := map[string]json.RawMessage{}
	history := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return syntax(dec, err)
		}
		key, _ := tok.(string)
		if key != "log_history" {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return fmt.Errorf("%s: %w", key, syntax(dec, err))
			}
			top[key] = raw
			continue
		}
		history = true
		if tok, err := dec.Token(); err != nil {
			return syntax(dec, err)
		} else if tok != json.Delim('[') {
			return errors.New("log_history: not a list")
		}
		for i := 0; dec.More(); i++ {
			var entry map[string]json.RawMessage
			if err := dec.Decode(&entry); err != nil {
				return fmt.Errorf("log_history[%d]: %w", i, syntax(dec, err))
			}
			e := make(LogEntry, len(entry))
			for k, raw := range entry {
				if v, ok := pyjson.Number(raw); ok {
					e[k] = v
				}
			}
			s.LogEntries++
			if fn != nil {
				if err := fn(e); err != nil {
					return err
				}
			}
		}
		if _, err := dec.Token(); err != nil {
			return syntax(dec, err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return syntax(dec, err)
	}
	n := s.LogEntries
	b, _ := json.Marshal(top)
	if err := json.Unmarshal(b, s); err != nil {
		return err
	}
	s.LogEntries = n
	if history {
		s.Source = SourceTransformers
	}
	return nil
}

// syntax adds where the decoder stopped to a decoding error.
func syntax(dec *json.Decoder, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("truncated at byte %d", dec.InputOffset())
	}
	return fmt.Errorf("near byte %d: %w", dec.InputOffset(), err)
}
