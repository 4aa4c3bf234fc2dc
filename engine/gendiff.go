package engine

import (
	"fmt"
	"strings"

	"rlhfstation/engine/config"
	"rlhfstation/engine/model"
)

// genDefaultsNote says where a run's sampling differs from the checkpoint's
// generation_config.json: a run samples with its GRPO settings, as TRL does, while `generate`
// and `eval` take the checkpoint's defaults, as transformers does. "" when they agree or the
// folder has no such file.
func genDefaultsNote(dir string, c *config.Config) (string, error) {
	g, err := model.ReadGenDefaults(dir)
	if err != nil || g.Path == "" {
		return "", err
	}
	temp, topP, topK := g.Sampling()
	var diff []string
	if temp != c.Temperature {
		diff = append(diff, fmt.Sprintf("temperature %g (checkpoint %g)", c.Temperature, temp))
	}
	if topP != c.TopP {
		diff = append(diff, fmt.Sprintf("top_p %g (checkpoint %g)", c.TopP, topP))
	}
	if topK != c.TopK {
		diff = append(diff, fmt.Sprintf("top_k %d (checkpoint %d)", c.TopK, topK))
	}
	if len(diff) == 0 {
		return "", nil
	}
	return fmt.Sprintf("sampling with the run's GRPO settings, as TRL does, not %s's: %s", g.Path, strings.Join(diff, ", ")), nil
}
