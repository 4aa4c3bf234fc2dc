package engine

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"rlhfstation/engine/config"
	"rlhfstation/engine/model"
	"rlhfstation/internal/diskfree"
	"rlhfstation/internal/human"
)

// The checks here need only the configuration and the model's config.json: New runs them
// before the minutes of loading weights and computing baselines, so a run that could not
// finish fails at once.

// checkContext refuses a completion length that leaves no room for a prompt in the model's
// context (generation would stop at the context's end whatever max_completion_length says).
func checkContext(mc *model.Config, c *config.Config, modelDir string) error {
	if c.MaxCompletionLength >= mc.Context() {
		return &ConfigError{fmt.Errorf("max_completion_length %d leaves no room for a prompt: the model's context is %d tokens (max_position_embeddings in %s); lower max_completion_length",
			c.MaxCompletionLength, mc.Context(), filepath.Join(modelDir, "config.json"))}
	}
	return nil
}

// promptRoom is the most prompt tokens a rollout keeps: max_prompt_length, lowered to what the
// context leaves beside the completion.
func promptRoom(mc *model.Config, c *config.Config) int {
	limit := c.MaxPromptLength
	if room := mc.Context() - c.MaxCompletionLength; room > 0 && (limit <= 0 || room < limit) {
		limit = room
	}
	return limit
}

// checkpointEstimate bounds a checkpoint's size before the adapters exist: LoRA on every
// linear of every layer (r·(in+out) weights each), float32 weights and AdamW's two moments.
func checkpointEstimate(mc *model.Config, r int) uint64 {
	D, Q, KV, F := uint64(mc.Dim), uint64(mc.QDim()), uint64(mc.KVDim()), uint64(mc.Hidden)
	perLayer := (D + Q) + 2*(D+KV) + (Q + D) + 3*(D+F)
	return 12*uint64(r)*perLayer*uint64(mc.Layers) + 64<<10
}

// checkOutput refuses an output folder the run could not keep checkpoints in: not a folder,
// not writable, or on a disk with less free space than two checkpoints.
func checkOutput(dir string, need uint64) error {
	at, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for { // the folder, or the nearest parent that exists (the run creates the rest)
		st, err := os.Stat(at)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("output folder %s: %s is not a folder", dir, at)
			}
			break
		}
		parent := filepath.Dir(at)
		if parent == at {
			break
		}
		at = parent
	}
	if err := unix.Access(at, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("output folder %s: cannot write in %s: %v", dir, at, err)
	}
	if free, ok := diskfree.Bytes(at); ok && free < 2*need {
		return fmt.Errorf("output folder %s: only %s free on its disk; the run's checkpoints need about %s each", dir,
			human.Bytes(int64(free)), human.Bytes(int64(need)))
	}
	return nil
}
