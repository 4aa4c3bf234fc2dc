package engine

import (
	"strings"
	"testing"

	"rlhfstation/engine/config"
	"rlhfstation/engine/model"
)

// QuantizeLinears follows the [quant] table: "none" leaves the base alone, nf4 replaces every
// linear of the blocks (the head and embeddings stay float32), bad settings are errors.
func TestQuantizeLinears(t *testing.T) {
	c := model.Config{ModelType: "llama", Vocab: 64, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 48,
		MaxPos: 32, NormEps: 1e-5, RopeTheta: 10000, BOS: -1}
	m, err := model.NewRandom(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	fp32 := m.ResidentBytes()
	if d, p, err := QuantizeLinears(m, config.Quant{Type: "none"}); d != 0 || p != 0 || err != nil || m.ResidentBytes() != fp32 {
		t.Fatalf("none: %d %d %v", d, p, err)
	}
	for _, bad := range []config.Quant{{Type: "int4", BlockSize: 64}, {Type: "nf4", BlockSize: 48}} {
		if _, _, err := QuantizeLinears(m, bad); err == nil || !strings.Contains(err.Error(), "[quant]") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	dense, packed, err := QuantizeLinears(m, config.Quant{Type: "nf4", BlockSize: 64, DoubleQuant: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Linears() {
		if _, ok := l.W.(*model.Quantized); !ok {
			t.Errorf("%s not quantized", l.Name)
		}
	}
	if _, ok := m.Param("lm_head.weight"); !ok || dense != 4*int64(2*(32*32*2+32*16*2+3*32*48)) || packed*7 > dense {
		t.Errorf("head kept %v, %d → %d bytes", ok, dense, packed)
	}
	if m.ResidentBytes() >= fp32-dense+2*packed {
		t.Errorf("resident %d of %d after quantizing", m.ResidentBytes(), fp32)
	}
}
