package engine

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/BurntSushi/toml"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/lora"
	"rlhfstation/engine/monitor"
)

// adapter connects a LoRA layer to the model's linear: the model calls Forward after W·x + b
// and Backward after the base's input gradient. It keeps the activations of the last
// training forward, as each linear runs once per training forward.
type adapter struct {
	layer *lora.Layer
	act   lora.Activations
	rng   *rand.Rand // dropout masks; reseeded each step
}

// Forward draws the dropout seed of a training forward from the step's generator.
func (a *adapter) Forward(y, x backend.Buf, rows int, train bool) error {
	if !train {
		return a.layer.Forward(y, x, rows, false, 0, nil)
	}
	var seed uint64
	if a.layer.Dropout > 0 {
		seed = a.rng.Uint64()
	}
	return a.layer.Forward(y, x, rows, true, seed, &a.act)
}

func (a *adapter) Backward(dx, dy, x backend.Buf, rows int) error {
	return a.layer.Backward(dx, dy, x, &a.act)
}

// decodeMonitor sets the [monitor] table's keys onto th one at a time, refusing unknown keys
// and values of the wrong type; the error's key is the offending one.
func decodeMonitor(table map[string]any, th *monitor.Thresholds) (key string, err error) {
	for _, k := range slices.Sorted(maps.Keys(table)) {
		var buf bytes.Buffer
		if err := toml.NewEncoder(&buf).Encode(map[string]any{k: table[k]}); err != nil {
			return k, err
		}
		md, err := toml.Decode(buf.String(), th)
		if err != nil {
			return k, err
		}
		if len(md.Undecoded()) > 0 {
			return k, fmt.Errorf("unknown key %q", k)
		}
	}
	return "", nil
}

// Grads lets the model run the adapter's training passes itself (model.LowRankGrads), but
// not with dropout, whose masks the adapter draws.
func (a *adapter) Grads() (backend.Buf, backend.Buf, bool) {
	return a.layer.GradA, a.layer.GradB, a.layer.Dropout == 0
}

// Factors gives the decode step the LoRA factors (model.LowRank).
func (a *adapter) Factors() (backend.Buf, backend.Buf, int, float32) {
	l := a.layer
	return l.A, l.B, l.R, l.Scale
}
