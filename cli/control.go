package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"rlhfstation/engine/control"
)

func init() {
	register(command{name: "control", summary: "pause, resume, save or stop a live run from another terminal", order: 22, run: runControl})
}

const controlUsage = `control RUN_DIR pause|resume|save|stop [--reason TEXT] [--json]

Asks a live run to pause (it holds at its next step boundary), resume, save a checkpoint, or
stop (it saves first), by writing the run folder's control file (control.json) atomically.
Runs that read it: rlhfstation's own (--batch and the workstation), and TRL / Hugging Face
Trainer runs written by examples/rlhfstation_callback.py. The trainer acknowledges each
request in its events.jsonl when it takes effect (watch shows it). --json prints the control
file's new content.`

func runControl(s streams, args []string) error {
	fs := newFlagSet("control", controlUsage, s.stderr)
	reason := fs.String("reason", "", "why, recorded with the request")
	asJSON := fs.Bool("json", false, "print the control file's new content as one JSON document")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("control takes a run folder and a request (rlhfstation control RUN_DIR pause|resume|save|stop), got %d arguments", len(pos))
	}
	dir, a := pos[0], control.Action(pos[1])
	valid := false
	for _, x := range control.Actions {
		valid = valid || a == x
	}
	if !valid {
		return usagef("control: %q is not a request: use pause, resume, save or stop", pos[1])
	}
	if _, err := os.Stat(filepath.Join(dir, "events.jsonl")); err != nil {
		return fmt.Errorf("%s: no events.jsonl here: control steers runs in this tool's format (--batch runs, and TRL runs written by examples/rlhfstation_callback.py)", dir)
	}
	st, err := control.Send(dir, a, "rlhfstation control", strings.TrimSpace(*reason))
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(s.stdout, true, st)
	}
	fmt.Fprintf(s.stdout, "asked %s to %s (request %d, %s); the trainer acknowledges it in events.jsonl at its next step boundary\n",
		dir, a, st.Seq, control.Path(dir))
	return nil
}
