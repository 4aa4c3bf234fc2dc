package model

import (
	"bytes"
	"slices"
	"testing"

	"rlhfstation/quant"
	"rlhfstation/safetensors"
)

// TestLoadQuantizedTensorByTensor: quantizing each linear as it is read gives the same 4-bit
// weights, byte for byte, as loading densely and quantizing after, the same logits, and
// leaves no float32 copy of the linears.
func TestLoadQuantizedTensorByTensor(t *testing.T) {
	c := tinyConfigs()["qwen2-bias"]
	dir := saveAs(t, randomModel(t, c, 11), safetensors.BF16)
	opt := quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true}
	dense, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dense.Quantize(opt); err != nil {
		t.Fatal(err)
	}
	at, err := LoadWith(dir, LoadOptions{Quantize: &opt})
	if err != nil {
		t.Fatal(err)
	}
	if at.QuantizedAtLoad[0] == 0 || len(at.data) != len(dense.data) || at.NumParams() != dense.NumParams() {
		t.Fatalf("quantized at load: %v, %d float32 parameters against %d", at.QuantizedAtLoad, len(at.data), len(dense.data))
	}
	for i, l := range at.Linears() {
		a, ok1 := l.W.(*Quantized)
		b, ok2 := dense.Linears()[i].W.(*Quantized)
		if !ok1 || !ok2 || !bytes.Equal(a.W.Packed, b.W.Packed) || !slices.Equal(a.W.NestedAbsmax, b.W.NestedAbsmax) ||
			!bytes.Equal(a.W.QAbsmax, b.W.QAbsmax) || a.W.Offset != b.W.Offset {
			t.Fatalf("%s: the 4-bit weight differs", l.Name)
		}
	}
	seq := [][]int{{3, 1, 4, 1, 5, 9, 2, 6}}
	c1, c2 := at.NewCache(1, 8), dense.NewCache(1, 8)
	defer c1.Free()
	defer c2.Free()
	x, err := at.Forward(c1, seq, false, AdaptersOn)
	if err != nil {
		t.Fatal(err)
	}
	x = slices.Clone(x)
	y, err := dense.Forward(c2, seq, false, AdaptersOn)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(x, y) {
		t.Errorf("logits differ: %.2e relative", relErr(x, y))
	}
}
