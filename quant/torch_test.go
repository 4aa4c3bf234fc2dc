package quant

import (
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"rlhfstation/internal/testref"
)

func writeF32(t *testing.T, path string, v []float32) {
	t.Helper()
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// TestAgainstTorch compares quantization and dequantization, bit for bit, with
// testdata/bnb_reference.py: bitsandbytes' pure-PyTorch algorithm (argmin over the code book, a
// different route to the nearest code than the thresholds used here).
func TestAgainstTorch(t *testing.T) {
	py := testref.Python(t)
	x := gaussian(96*130+1, 11, 0.05) // odd length: a padded last byte
	x[100] = 0                        // exact zero
	for i := 6400; i < 6464; i++ {    // an all-zero block
		x[i] = 0
	}
	dir := t.TempDir()
	writeF32(t, filepath.Join(dir, "x.bin"), x)
	writeF32(t, filepath.Join(dir, "dyn.bin"), DynamicCode[:])
	opts := []Options{{NF4, 64, false}, {FP4, 64, false}, {NF4, 128, true}, {FP4, 32, true}}
	args := []string{filepath.Join("testdata", "bnb_reference.py"), filepath.Join(dir, "x.bin"), filepath.Join(dir, "dyn.bin")}
	outs := make([]string, len(opts))
	for i, opt := range opts {
		outs[i] = t.TempDir()
		dq := "0"
		if opt.DoubleQuant {
			dq = "1"
		}
		args = append(args, outs[i]+":"+string(opt.Type)+":"+strconv.Itoa(opt.BlockSize)+":"+dq)
	}
	if msg, err := exec.Command(py, args...).CombinedOutput(); err != nil {
		t.Fatalf("bnb_reference.py: %v\n%s", err, msg)
	}
	for i, opt := range opts {
		out := outs[i]
		w, err := Quantize(x, 1, len(x), "", opt)
		if err != nil {
			t.Fatal(err)
		}
		packed, _ := os.ReadFile(filepath.Join(out, "packed.bin"))
		// bitsandbytes' CUDA kernel gives a tiny negative value the FP4 code of -0 (8), its
		// argmin route the first zero (0): the same value, so nibbles 0 and 8 compare equal.
		same := func(a, b byte) bool { return a == b || (opt.Type == FP4 && a&7 == 0 && b&7 == 0) }
		diff, zeros := 0, 0
		for i := range packed {
			if packed[i]>>4 != w.Packed[i]>>4 || packed[i]&15 != w.Packed[i]&15 {
				zeros++
			}
			if !same(packed[i]>>4, w.Packed[i]>>4) || !same(packed[i]&15, w.Packed[i]&15) {
				diff++
				if diff < 5 {
					t.Errorf("%v: byte %d = %02x, torch %02x", opt, i, w.Packed[i], packed[i])
				}
			}
		}
		absmax := readF32(t, filepath.Join(out, "absmax.bin"))
		if !opt.DoubleQuant {
			for b := range absmax {
				if absmax[b] != w.Absmax[b] {
					t.Fatalf("%v: absmax[%d] = %v, torch %v", opt, b, w.Absmax[b], absmax[b])
				}
			}
		} else {
			// torch takes the mean in float32; use its offset so that the 8-bit codes compare.
			off := readF32(t, filepath.Join(out, "offset.bin"))[0]
			t.Logf("%v: offset %v, torch %v (%d ulp)", opt, w.Offset, off, int64(math.Float32bits(w.Offset))-int64(math.Float32bits(off)))
			if math.Abs(float64(w.Offset-off)) > 4e-7*math.Abs(float64(off)) {
				t.Errorf("offset %v far from torch's %v", w.Offset, off)
			}
			w.Offset = off
			centred := make([]float32, len(absmax))
			for i, a := range absmax {
				centred[i] = a - off
			}
			Quantize8(w.QAbsmax, w.NestedAbsmax, centred, w.NestedCode, NestedBlockSize)
			qa, _ := os.ReadFile(filepath.Join(out, "qabsmax.bin"))
			na := readF32(t, filepath.Join(out, "nested_absmax.bin"))
			for i := range qa {
				if qa[i] != w.QAbsmax[i] {
					t.Fatalf("%v: absmax code %d = %d, torch %d", opt, i, w.QAbsmax[i], qa[i])
				}
			}
			for i := range na {
				if na[i] != w.NestedAbsmax[i] {
					t.Fatalf("%v: nested absmax %d = %v, torch %v", opt, i, w.NestedAbsmax[i], na[i])
				}
			}
		}
		want := readF32(t, filepath.Join(out, "dequant.bin"))
		got := make([]float32, len(x))
		w.Dequantize(got)
		for i := range got {
			if got[i] != want[i] && !(got[i] == 0 && want[i] == 0) {
				t.Fatalf("%v: dequantized %d = %v, torch %v", opt, i, got[i], want[i])
			}
		}
		t.Logf("%v: %d values; %d bytes differ from torch only in the sign of a zero code", opt, len(x), zeros)
	}
}
