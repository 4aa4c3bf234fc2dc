package engine

import (
	"strings"
	"testing"

	"rlhfstation/engine/config"
)

// reward_weights must match the preset's rewards: refused before the model is read.
func TestNewRefusesGRPOOptions(t *testing.T) {
	for _, tc := range []struct {
		set  func(c *config.Config)
		want string
	}{
		{func(c *config.Config) { c.RewardWeights = []float64{1, 2} }, "reward_weights has 2 values but preset story has 1 rewards (ppl)"},
	} {
		c := tinyConfig(t, "story", 1)
		tc.set(c)
		_, err := New(c, Options{ModelDir: t.TempDir(), ModelName: "none", Prompts: prompts(t, "story")})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}
