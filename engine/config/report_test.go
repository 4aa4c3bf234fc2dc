package config

import (
	"strings"
	"testing"
)

// [report] to, from the file (a list or one string) and from --report-to; a tracker not
// written here is refused with the key and its origin; the encoded file reads back the same.
func TestReportTo(t *testing.T) {
	for _, text := range []string{"[report]\nto = [\"wandb\"]\n", "[report]\nto = \"wandb\"\n"} {
		c, err := newFlags(t, "--config", writeTOML(t, text)).Resolve(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Reports("wandb") || len(c.Report.To) != 1 {
			t.Errorf("%q: report.to %v", text, c.Report.To)
		}
		back, err := Load(writeTOML(t, string(c.Encode())))
		if err != nil || !back.Reports("wandb") {
			t.Errorf("encoded and read back: %v %v", back.Report.To, err)
		}
	}
	c, err := newFlags(t, "--report-to", "wandb, none").Resolve(nil)
	if err != nil || !c.Reports("wandb") || !c.Reports("none") || c.Origin("report.to") != "--report-to" {
		t.Errorf("--report-to: %v %v (%s)", c.Report.To, err, c.Origin("report.to"))
	}
	if c, _ := newFlags(t).Resolve(nil); c.Reports("wandb") {
		t.Error("wandb written by default")
	}
	_, err = newFlags(t, "--config", writeTOML(t, "[report]\nto = [\"trackio\"]\n")).Resolve(nil)
	if err == nil || !strings.Contains(err.Error(), `report.to = [trackio]`) || !strings.Contains(err.Error(), `"trackio" is not written here`) {
		t.Errorf("trackio: %v", err)
	}
	_, err = newFlags(t, "--config", writeTOML(t, "[report]\nto = [1]\n")).Resolve(nil)
	if err == nil || !strings.Contains(err.Error(), "report.to") {
		t.Errorf("a number: %v", err)
	}
}
