package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"rlhfstation/presets"
	"rlhfstation/rewards"
)

func init() {
	register(command{name: "presets", summary: "list the reward presets and where each comes from", order: 90, run: runPresets})
}

func runPresets(s streams, args []string) error {
	fs := newFlagSet("presets", "presets [--json]", s.stderr)
	asJSON := fs.Bool("json", false, "print one JSON document instead of a table")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("presets takes no arguments (got %q)", rest[0])
	}
	return listPresets(s.stdout, s.stderr, *asJSON)
}

// listPresets prints the presets; it fails when a user preset file does not load.
func listPresets(stdout, stderr io.Writer, asJSON bool) error {
	infos, listErr := presets.List()
	if listErr != nil {
		fmt.Fprintln(stderr, "rlhfstation:", listErr)
	}
	broken := 0
	for _, in := range infos {
		if in.Err != nil {
			broken++
		}
	}
	if asJSON {
		if err := printPresetsJSON(stdout, infos); err != nil {
			return err
		}
	} else {
		printPresetsTable(stdout, stderr, infos)
	}
	if broken > 0 {
		return fmt.Errorf("%d preset file(s) failed to load", broken)
	}
	return nil
}

func printPresetsTable(stdout, stderr io.Writer, infos []presets.Info) {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PRESET\tSOURCE\tPPL word/phrase/sentence\tOTHER REWARDS\tDESCRIPTION")
	for _, in := range infos {
		source := in.Source
		if in.Overrides {
			source += " (replaces built-in)"
		}
		if in.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\t(does not load: see below)\t\t\n", in.Name, source)
			continue
		}
		p := in.Preset
		ppl := "—"
		if p.PPL != nil {
			ppl = fmt.Sprintf("%s/%s/%s ×%s %s", num(p.PPL.Levels.Word), num(p.PPL.Levels.Phrase), num(p.PPL.Levels.Sentence), num(p.PPL.Weight), p.PPL.Shape)
			if p.PPL.Text == rewards.ReasoningText {
				ppl += ", reasoning" // the completion without its final #### line
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", in.Name, source, ppl, otherRewards(p), p.Description)
	}
	tw.Flush()
	if dir := presets.UserDir(); dir != "" {
		fmt.Fprintf(stdout, "\nuser presets: %s/NAME.toml (a built-in name replaces that preset)\n", dir)
	}
	for _, in := range infos {
		if in.Err != nil {
			fmt.Fprintln(stderr, in.Err)
		}
	}
}

// presetJSON is one preset in `presets --json`.
type presetJSON struct {
	Name        string         `json:"name"`
	Source      string         `json:"source"`
	Overrides   bool           `json:"overrides_built_in"`
	Description string         `json:"description,omitempty"`
	Rewards     map[string]any `json:"rewards,omitempty"`
	GRPO        map[string]any `json:"grpo,omitempty"`
	Error       string         `json:"error,omitempty"`
}

func printPresetsJSON(w io.Writer, infos []presets.Info) error {
	out := struct {
		UserDir string       `json:"user_dir"`
		Presets []presetJSON `json:"presets"`
	}{UserDir: presets.UserDir(), Presets: []presetJSON{}}
	for _, in := range infos {
		pj := presetJSON{Name: in.Name, Source: in.Source, Overrides: in.Overrides}
		if in.Err != nil {
			pj.Error = in.Err.Error()
			out.Presets = append(out.Presets, pj)
			continue
		}
		p := in.Preset
		pj.Description, pj.GRPO, pj.Rewards = p.Description, p.GRPO, map[string]any{}
		if p.PPL != nil {
			pj.Rewards["ppl"] = struct {
				Weight     float64            `json:"weight"`
				Levels     rewards.Weights    `json:"levels"`
				Shape      rewards.Shape      `json:"shape"`
				Thresholds rewards.Thresholds `json:"thresholds"`
				Text       rewards.PPLText    `json:"text"`
			}{p.PPL.Weight, p.PPL.Levels, p.PPL.Shape, p.PPL.Thresholds, p.PPL.Text}
		}
		if p.NTL != nil {
			pj.Rewards["ntl"] = struct {
				Weight              float64         `json:"weight"`
				Mode                rewards.NTLMode `json:"mode"`
				Loss                rewards.NTLLoss `json:"loss"`
				Tau                 float64         `json:"tau"`
				TauEnd              float64         `json:"tau_end"`
				TemperatureSchedule string          `json:"temperature_schedule"`
				ConfidenceWeight    float64         `json:"confidence_weight"`
				LossWeight          float64         `json:"loss_weight"`
			}{p.NTL.Weight, p.NTL.Mode, p.NTL.Loss, p.NTL.Tau, p.NTL.TauEnd, p.NTL.Schedule, p.NTL.ConfidenceWeight, p.NTL.LossWeight}
		}
		if p.Correctness != nil {
			pj.Rewards["correctness"] = struct {
				Weight     float64            `json:"weight"`
				Extraction rewards.Extraction `json:"extraction"`
			}{p.Correctness.Weight, p.Correctness.Extraction}
		}
		if p.Format != nil {
			pj.Rewards["format"] = struct {
				Weight float64 `json:"weight"`
			}{p.Format.Weight}
		}
		for _, c := range p.Commands {
			pj.Rewards[c.Name] = struct {
				Kind    string   `json:"kind"`
				Weight  float64  `json:"weight"`
				Command []string `json:"command"`
				Timeout float64  `json:"timeout"`
			}{"command", c.Weight, c.Command, c.Timeout.Seconds()}
		}
		out.Presets = append(out.Presets, pj)
	}
	return writeJSON(w, true, out)
}
