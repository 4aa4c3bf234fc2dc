package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"rlhfstation/engine/events"
	"rlhfstation/rewards"
)

// commandRewards are the run's reward functions of kind "command".
func (e *Engine) commandRewards() []*rewards.Command {
	var out []*rewards.Command
	for _, f := range e.funcs {
		if c, ok := f.Func.(*rewards.Command); ok {
			out = append(out, c)
		}
	}
	return out
}

// startCommands checks that the data's other columns can be passed to the command rewards,
// starts their processes, and reports each failure as an anomaly event.
func (e *Engine) startCommands() error {
	cmds := e.commandRewards()
	if len(cmds) == 0 {
		return nil
	}
	for _, x := range e.prompts {
		for _, k := range rewards.ReservedColumns {
			if _, ok := x.Extra[k]; ok {
				return fmt.Errorf("%s: the column %q has the name of a key of the command rewards' requests: rename it", x.Where(), k)
			}
		}
	}
	for _, c := range cmds {
		c.OnFailure = e.commandFailed
	}
	return rewards.StartCommands(e.funcs)
}

// logCommands copies each command's standard error to rewards/<name>.stderr in the run folder,
// appending (a resumed run continues the file).
func (e *Engine) logCommands() error {
	for _, c := range e.commandRewards() {
		dir := filepath.Join(e.runDir, "rewards")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(dir, c.Name()+".stderr"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		c.SetLog(f)
		e.commandLogs = append(e.commandLogs, f)
	}
	return nil
}

// closeCommands ends the command processes and their logs.
func (e *Engine) closeCommands() {
	rewards.CloseCommands(e.funcs)
	for _, f := range e.commandLogs {
		f.Close()
	}
	e.commandLogs = nil
}

// commandFailed turns a command reward's failure into an anomaly event: a warning when the
// command is restarted, critical when the run stops.
func (e *Engine) commandFailed(f rewards.CommandFailure) {
	sev := events.Critical
	if f.Retry {
		sev = events.Warning
	}
	e.emit(events.Event{Type: events.Anomaly, Step: f.Step, Rule: "reward_command", Severity: sev, Message: f.Message()})
}

// stopForCommand ends the run after a command reward failed twice: the last complete step is
// saved, and the error says how to continue.
func (e *Engine) stopForCommand(err error) (bool, error) {
	var ce *rewards.CommandError
	if !errors.As(err, &ce) {
		return false, nil
	}
	reason := ce.Error() + "; the run stopped"
	if e.step == 0 {
		reason += " before its first step: nothing to save"
	} else {
		reason += fmt.Sprintf(" after step %d, saving it: fix the command and continue with --resume %s", e.step, e.runDir)
	}
	if ferr := e.finish("failed", reason, nil); ferr != nil {
		return true, ferr
	}
	return true, &RewardStopError{Reason: reason, Checkpoint: e.lastCkpt, Err: ce}
}

// RewardStopError is returned by Run when a command reward failed twice in a row: Checkpoint
// is the last complete step's checkpoint ("" when the run stopped before its first step).
type RewardStopError struct {
	Reason     string
	Checkpoint string
	Err        *rewards.CommandError
}

func (e *RewardStopError) Error() string { return e.Reason }
func (e *RewardStopError) Unwrap() error { return e.Err }
