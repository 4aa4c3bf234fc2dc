package monitor

import (
	"testing"

	"github.com/BurntSushi/toml"
)

// The engine decodes the run config's monitor table over the defaults.
func TestThresholdsFromTOML(t *testing.T) {
	th := DefaultThresholds()
	md, err := toml.Decode("kl_max = 0.5\nzscore_skip = [\"loss\"]\nreward_stall_window = 50\n", &th)
	if err != nil || len(md.Undecoded()) != 0 {
		t.Fatalf("decode: %v, undecoded %v", err, md.Undecoded())
	}
	def := DefaultThresholds()
	if th.KLMax != 0.5 || len(th.ZSkip) != 1 || th.StallWindow != 50 || th.ZWindow != def.ZWindow || th.GradNormMax != def.GradNormMax {
		t.Fatalf("%+v", th)
	}
	if err := th.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := toml.Decode("kl_steps = 0\n", &th); err != nil {
		t.Fatal(err)
	}
	if err := th.Validate(); err == nil {
		t.Fatal("kl_steps = 0 should not validate")
	}
}

func TestZSkipPatterns(t *testing.T) {
	th := DefaultThresholds()
	for name, want := range map[string]bool{"rewards/ppl/std": true, "rewards/my_cmd/std": true, "rewards/my_cmd/mean": false,
		"reward_std": true, "perf/step_seconds": true, "rewards/a/b/std": false, "kl": false} {
		if got := th.skipZ(name); got != want {
			t.Errorf("skipZ(%q) = %v, want %v", name, got, want)
		}
	}
}
