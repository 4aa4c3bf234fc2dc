package cli

import (
	"flag"
	"fmt"
	"io"

	"rlhfstation/engine/model"
)

// applyGenDefaults gives the sampling flags not set on the command line the values of the
// model folder's generation_config.json, as transformers' generate does (absent keys take
// transformers' defaults: temperature 1, top_p 1, top_k 50; do_sample false is greedy), and
// says so on stderr. A folder without the file keeps the flags' defaults.
func applyGenDefaults(fs *flag.FlagSet, dir string, stderr io.Writer, temp, topP *float64, topK *int) error {
	g, err := model.ReadGenDefaults(dir)
	if err != nil || g.Path == "" {
		return err
	}
	t, p, k := g.Sampling()
	var used []string
	if temp != nil && !flagSet(fs, "temperature") {
		*temp = t
		used = append(used, fmt.Sprintf("temperature %g", t))
	}
	if topP != nil && !flagSet(fs, "top-p") {
		*topP = p
		used = append(used, fmt.Sprintf("top_p %g", p))
	}
	if topK != nil && !flagSet(fs, "top-k") {
		*topK = k
		used = append(used, fmt.Sprintf("top_k %d", k))
	}
	if len(used) > 0 {
		fmt.Fprintf(stderr, "sampling defaults from %s: %v (flags override them)\n", g.Path, used)
	}
	return nil
}
