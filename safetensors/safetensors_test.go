package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// craft writes a file from a raw header and buffer, the way a broken writer might.
func craft(t *testing.T, header string, buf []byte) string {
	t.Helper()
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(buf)
	p := filepath.Join(t.TempDir(), "x.safetensors")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func sampleTensors() []Tensor {
	i64 := make([]byte, 16)
	binary.LittleEndian.PutUint64(i64, uint64(7))
	binary.LittleEndian.PutUint64(i64[8:], math.MaxUint64) // -1
	return []Tensor{
		F32Tensor("z.weight", []int{2, 3}, []float32{1, -2, 3.5, 0, float32(math.Inf(1)), 1e-30}),
		F16Tensor("a.half", []int{3}, []float32{1, -0.5, 65504}),
		BF16Tensor("m.bf", []int{2}, []float32{1, -2}),
		F32Tensor("scalar", nil, []float32{42}),
		F32Tensor("empty", []int{0, 4}, nil),
		{Name: "ids", DType: I64, Shape: []int{2}, Data: i64},
		{Name: "mask", DType: U8, Shape: []int{3}, Data: []byte{1, 0, 1}},
	}
}

func TestRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.safetensors")
	meta := map[string]string{"format": "pt", "note": "round trip"}
	if err := Write(p, sampleTensors(), meta); err != nil {
		t.Fatal(err)
	}
	for _, mapped := range []bool{true, false} {
		f, err := open(p, mapped)
		if err != nil {
			t.Fatal(err)
		}
		if mapped != (f.mapping != nil) {
			t.Fatalf("mapped=%v but mapping present=%v", mapped, f.mapping != nil)
		}
		if f.dataStart%8 != 0 {
			t.Errorf("buffer starts at %d, not 8-byte aligned", f.dataStart)
		}
		want := []string{"a.half", "empty", "ids", "m.bf", "mask", "scalar", "z.weight"}
		if got := f.Names(); !reflect.DeepEqual(got, want) {
			t.Errorf("Names = %v, want %v", got, want)
		}
		if !reflect.DeepEqual(f.Metadata, meta) {
			t.Errorf("Metadata = %v", f.Metadata)
		}
		for _, tt := range sampleTensors() {
			b, err := f.Bytes(tt.Name)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, tt.Data) {
				t.Errorf("%s: bytes differ", tt.Name)
			}
			info, _ := f.Info(tt.Name)
			if info.DType != tt.DType || info.NumElements()*tt.DType.Size() != len(tt.Data) {
				t.Errorf("%s: info %+v", tt.Name, info)
			}
		}
		v, shape, err := f.Float32("z.weight")
		if err != nil || !reflect.DeepEqual(shape, []int{2, 3}) ||
			!reflect.DeepEqual(v, []float32{1, -2, 3.5, 0, float32(math.Inf(1)), 1e-30}) {
			t.Errorf("Float32(z.weight) = %v %v %v", v, shape, err)
		}
		part := make([]float32, 3)
		if err := f.Float32RangeInto("z.weight", 2, part); err != nil || !reflect.DeepEqual(part, []float32{3.5, 0, float32(math.Inf(1))}) {
			t.Errorf("Float32RangeInto(z.weight, 2) = %v %v", part, err)
		}
		if err := f.Float32RangeInto("z.weight", 4, part); err == nil || !strings.Contains(err.Error(), "has 6 elements, not [4, 7)") {
			t.Errorf("Float32RangeInto past the end: %v", err)
		}
		if err := f.Float32RangeInto("m.bf", 1, part[:1]); err != nil || part[0] != -2 {
			t.Errorf("Float32RangeInto(m.bf, 1) = %v %v", part[0], err)
		}
		if v, _, _ := f.Float32("a.half"); !reflect.DeepEqual(v, []float32{1, -0.5, 65504}) {
			t.Errorf("Float32(a.half) = %v", v)
		}
		if v, _, _ := f.Float32("m.bf"); !reflect.DeepEqual(v, []float32{1, -2}) {
			t.Errorf("Float32(m.bf) = %v", v)
		}
		if v, shape, err := f.Float32("scalar"); err != nil || len(shape) != 0 || !reflect.DeepEqual(v, []float32{42}) {
			t.Errorf("Float32(scalar) = %v %v %v", v, shape, err)
		}
		if v, _, err := f.Float32("empty"); err != nil || len(v) != 0 {
			t.Errorf("Float32(empty) = %v %v", v, err)
		}
		_, _, err = f.Float32("ids")
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), `"ids"`) || !strings.Contains(err.Error(), "I64") {
			t.Errorf("Float32(ids) error = %v, want one naming file, tensor and dtype", err)
		}
		if _, err := f.Bytes("nope"); err == nil || !strings.Contains(err.Error(), `no tensor "nope"`) {
			t.Errorf("Bytes(nope) error = %v", err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
	// Atomic write leaves nothing beside the file.
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("folder holds %d entries after Write, want 1", len(entries))
	}
}

// TestWriteLayout pins the exact bytes: header JSON sorted, space-padded to a multiple of 8,
// then the data in name order.
func TestWriteLayout(t *testing.T) {
	p := filepath.Join(t.TempDir(), "l.safetensors")
	err := Write(p, []Tensor{
		{Name: "b", DType: U8, Shape: []int{2}, Data: []byte{9, 8}},
		{Name: "a", DType: U8, Shape: []int{1}, Data: []byte{7}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	js := `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`
	for (8+len(js))%8 != 0 {
		js += " "
	}
	var want bytes.Buffer
	binary.Write(&want, binary.LittleEndian, uint64(len(js)))
	want.WriteString(js)
	want.Write([]byte{7, 9, 8})
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("file bytes\n got %q\nwant %q", got, want.Bytes())
	}
}

func TestWriteRefuses(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "w.safetensors")
	cases := []struct {
		tensors []Tensor
		want    string
	}{
		{[]Tensor{{Name: "a", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}}, `tensor "a": 4 data bytes but F32 [2] needs 8`},
		{[]Tensor{{Name: "a", DType: "Q4", Shape: []int{1}, Data: []byte{0}}}, `tensor "a": unknown dtype "Q4"`},
		{[]Tensor{F32Tensor("a", []int{1}, []float32{1}), F32Tensor("a", []int{1}, []float32{2})}, `tensor "a" given twice`},
		{[]Tensor{F32Tensor("__metadata__", []int{1}, []float32{1})}, `invalid tensor name "__metadata__"`},
	}
	for _, c := range cases {
		err := Write(p, c.tensors, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("Write error = %v, want %q naming the file", err, c.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed writes left %d files", len(entries))
	}
}

func TestValidation(t *testing.T) {
	buf12 := make([]byte, 12)
	cases := []struct {
		name, header string
		buf          []byte
		tensor, want string
	}{
		{"not json", `{"a":`, nil, "", "header is not JSON"},
		{"not object", `[1,2]`, nil, "", "header is not a JSON object"},
		{"trailing data", `{} x`, nil, "", "data after its JSON object"},
		{"bad utf8", "{\"\xff\":1}", nil, "", "not valid UTF-8"},
		{"unknown dtype", `{"a":{"dtype":"F33","shape":[3],"data_offsets":[0,12]}}`, buf12, "a", `unknown dtype "F33"`},
		{"missing field", `{"a":{"dtype":"F32","shape":[3]}}`, buf12, "a", "entry needs dtype, shape and data_offsets"},
		{"shape not ints", `{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,12]}}`, buf12, "a", "malformed entry"},
		{"negative dim", `{"a":{"dtype":"F32","shape":[-3],"data_offsets":[0,12]}}`, buf12, "a", "shape [-3] has an invalid dimension -3"},
		{"size mismatch", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}}`, buf12, "a", "data_offsets [0, 12] span 12 bytes but F32 [2] needs 8"},
		{"huge shape", `{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,12]}}`, buf12, "a", "needs more than the whole file"},
		{"offsets arity", `{"a":{"dtype":"F32","shape":[3],"data_offsets":[0]}}`, buf12, "a", "data_offsets must be [begin, end]"},
		{"offsets reversed", `{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, buf12, "a", "not an ordered pair"},
		{"overlap", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, buf12, "b", `overlap tensor "a"`},
		{"gap", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, buf12, "b", "leave a gap: bytes [4, 8) belong to no tensor"},
		{"not at zero", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, buf12, "a", "leave a gap: bytes [0, 4)"},
		{"trailing bytes", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, buf12, "", "tensors end at byte 8 of the buffer but the buffer holds 12 bytes"},
		{"truncated", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, buf12, "b", "data ends at byte 16 of the buffer but the file holds only 12 buffer bytes (truncated?)"},
		{"duplicate", `{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}`, buf12, "a", "name appears twice"},
		{"metadata not strings", `{"__metadata__":{"n":1},"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}`, buf12, "", "__metadata__ must map strings to strings"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := craft(t, c.header, c.buf)
			f, err := Open(p)
			if err == nil {
				f.Close()
				t.Fatalf("Open succeeded, want error %q", c.want)
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Path != p || fe.Tensor != c.tensor || !strings.Contains(fe.Msg, c.want) {
				t.Fatalf("error = %v\nwant path %s, tensor %q, message containing %q", err, p, c.tensor, c.want)
			}
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error text %q does not name the file", err)
			}
		})
	}
}

func TestValidationLength(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		return p
	}
	huge := make([]byte, 16)
	binary.LittleEndian.PutUint64(huge, 200_000_000)
	past := make([]byte, 16)
	binary.LittleEndian.PutUint64(past, 100)
	cases := []struct {
		path, want string
	}{
		{write("short", []byte{1, 2, 3}), "file is 3 bytes, too short for the 8-byte header length"},
		{write("huge", huge), "header length 200000000 is more than the 100000000 allowed"},
		{write("past", past), "header length 100 runs past the end of the 16-byte file"},
	}
	for _, c := range cases {
		_, err := Open(c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("Open(%s) error = %v, want %q", filepath.Base(c.path), err, c.want)
		}
	}
	if _, err := Open(filepath.Join(dir, "absent")); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("Open(absent) error = %v", err)
	}
}

// TestTruncatedWrittenFile cuts a valid file short by one byte.
func TestTruncatedWrittenFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t.safetensors")
	if err := Write(p, sampleTensors(), nil); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	os.Truncate(p, st.Size()-1)
	_, err := Open(p)
	if err == nil || !strings.Contains(err.Error(), `tensor "z.weight"`) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("error = %v, want the last tensor named as truncated", err)
	}
}

func TestEmptyFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "e.safetensors")
	if err := Write(p, nil, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(f.Names()) != 0 || f.Metadata["k"] != "v" {
		t.Errorf("got names %v metadata %v", f.Names(), f.Metadata)
	}
}

func TestF16ToF32(t *testing.T) {
	cases := []struct {
		h    uint16
		want float64
	}{
		{0x0000, 0}, {0x3c00, 1}, {0xc000, -2}, {0x3555, 0.333251953125}, {0x3bff, 0.99951171875},
		{0x7bff, 65504}, {0x0400, 6.103515625e-05}, // smallest normal 2^-14
		{0x0001, 5.9604644775390625e-08}, // smallest subnormal 2^-24
		{0x03ff, 6.097555160522461e-05},  // largest subnormal 1023·2^-24
		{0x8001, -5.9604644775390625e-08}, {0x0200, 3.0517578125e-05},
		{0x7c00, math.Inf(1)}, {0xfc00, math.Inf(-1)},
	}
	for _, c := range cases {
		if got := F16ToF32(c.h); float64(got) != c.want {
			t.Errorf("F16ToF32(%#04x) = %g, want %g", c.h, got, c.want)
		}
	}
	if got := F16ToF32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("F16ToF32(0x8000) = %g, want -0", got)
	}
	for _, h := range []uint16{0x7e00, 0x7c01, 0xfe00} {
		if got := F16ToF32(h); !math.IsNaN(float64(got)) {
			t.Errorf("F16ToF32(%#04x) = %g, want NaN", h, got)
		}
	}
	// Every non-NaN half survives half → float32 → half, and float32 → half of the
	// converted value is exact; the float32 values increase monotonically with the code.
	prev := float32(math.Inf(-1))
	for h := 0; h < 0x10000; h++ {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := F32ToF16(f); back != uint16(h) {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)=%g) = %#04x", h, f, back)
		}
		if h >= 0x0001 && h <= 0x7c00 && !(f > prev) {
			t.Fatalf("half %#04x = %g not above previous %g", h, f, prev)
		}
		if h <= 0x7c00 {
			prev = f
		}
	}
}

func TestF32ToF16Rounding(t *testing.T) {
	cases := []struct {
		f    float64
		want uint16
	}{
		{1 + 1.0/2048, 0x3c00},        // tie between 1 and 1+2^-10: even (1)
		{1 + 3.0/2048, 0x3c02},        // tie between 1+2^-10 and 1+2^-9: even
		{1 + 1.0/2048 + 1e-7, 0x3c01}, // just above the tie
		{65519.99, 0x7bff},            // below the overflow tie 65520
		{65520, 0x7c00},               // tie at the top rounds to even: infinity
		{1e6, 0x7c00}, {-1e6, 0xfc00}, // overflow
		{math.Ldexp(1, -25), 0x0000},    // half the smallest subnormal: tie to even (0)
		{math.Ldexp(1.5, -25), 0x0001},  // above it
		{math.Ldexp(3, -25), 0x0002},    // 1.5 subnormal steps: tie to even (2)
		{math.Ldexp(1, -26), 0},         // underflow
		{math.Ldexp(2047, -25), 0x0400}, // rounds up from the largest subnormal into the smallest normal
		{-0.0, 0x0000},
	}
	for _, c := range cases {
		if got := F32ToF16(float32(c.f)); got != c.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
	if got := F32ToF16(float32(math.NaN())); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Errorf("F32ToF16(NaN) = %#04x, not a NaN", got)
	}
}

func TestBF16(t *testing.T) {
	cases := []struct {
		h    uint16
		want float64
	}{
		{0x3f80, 1}, {0xc000, -2}, {0x3eab, 0.333984375}, {0x7f7f, 3.3895313892515355e38},
		{0x0001, 9.183549615799121e-41}, // smallest subnormal 2^-133
		{0x0080, 1.1754943508222875e-38},
		{0x7f80, math.Inf(1)}, {0xff80, math.Inf(-1)},
	}
	for _, c := range cases {
		if got := BF16ToF32(c.h); float64(got) != c.want {
			t.Errorf("BF16ToF32(%#04x) = %g, want %g", c.h, got, c.want)
		}
		if back := F32ToBF16(float32(c.want)); back != c.h {
			t.Errorf("F32ToBF16(%g) = %#04x, want %#04x", c.want, back, c.h)
		}
	}
	if !math.IsNaN(float64(BF16ToF32(0x7fc0))) || F32ToBF16(float32(math.NaN()))&0x7fff <= 0x7f80 {
		t.Error("bf16 NaN not kept")
	}
	rounding := []struct {
		bits uint32
		want uint16
	}{
		{0x3f808000, 0x3f80}, // tie, even below
		{0x3f818000, 0x3f82}, // tie, even above
		{0x3f808001, 0x3f81}, // above the tie
		{0x7f7fffff, 0x7f80}, // overflows to infinity
	}
	for _, c := range rounding {
		if got := F32ToBF16(math.Float32frombits(c.bits)); got != c.want {
			t.Errorf("F32ToBF16(%#08x) = %#04x, want %#04x", c.bits, got, c.want)
		}
	}
}

func TestF64Float32(t *testing.T) {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b, math.Float64bits(0.1))
	binary.LittleEndian.PutUint64(b[8:], math.Float64bits(-3))
	p := filepath.Join(t.TempDir(), "d.safetensors")
	if err := Write(p, []Tensor{{Name: "d", DType: F64, Shape: []int{2}, Data: b}}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if v, _, err := f.Float32("d"); err != nil || v[0] != float32(0.1) || v[1] != -3 {
		t.Errorf("Float32(d) = %v %v", v, err)
	}
	if err := f.Float32Into("d", make([]float32, 3)); err == nil || !strings.Contains(err.Error(), "has 2 elements, destination 3") {
		t.Errorf("Float32Into wrong length error = %v", err)
	}
}

func writeShards(t *testing.T, dir string) {
	t.Helper()
	if err := Write(filepath.Join(dir, "model-00001-of-00002.safetensors"), []Tensor{
		F32Tensor("layers.0.w", []int{2}, []float32{1, 2}),
		F32Tensor("embed", []int{1}, []float32{3}),
	}, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(dir, "model-00002-of-00002.safetensors"), []Tensor{
		BF16Tensor("layers.1.w", []int{2}, []float32{4, 5}),
	}, nil); err != nil {
		t.Fatal(err)
	}
}

func writeIndex(t *testing.T, dir, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, IndexFile), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestShardedSet(t *testing.T) {
	dir := t.TempDir()
	writeShards(t, dir)
	writeIndex(t, dir, `{"metadata":{"total_size":16},"weight_map":{
		"embed":"model-00001-of-00002.safetensors",
		"layers.0.w":"model-00001-of-00002.safetensors",
		"layers.1.w":"model-00002-of-00002.safetensors"}}`)
	s, err := OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Names(); !reflect.DeepEqual(got, []string{"embed", "layers.0.w", "layers.1.w"}) {
		t.Errorf("Names = %v", got)
	}
	if len(s.Files) != 2 || s.Meta["total_size"] != float64(16) {
		t.Errorf("files %d meta %v", len(s.Files), s.Meta)
	}
	if v, shape, err := s.Float32("layers.1.w"); err != nil || !reflect.DeepEqual(v, []float32{4, 5}) || !reflect.DeepEqual(shape, []int{2}) {
		t.Errorf("Float32(layers.1.w) = %v %v %v", v, shape, err)
	}
	if info, ok := s.Info("layers.0.w"); !ok || info.DType != F32 {
		t.Errorf("Info = %+v %v", info, ok)
	}
	if f, ok := s.File("layers.1.w"); !ok || filepath.Base(f.Path) != "model-00002-of-00002.safetensors" {
		t.Errorf("File(layers.1.w) = %v", f)
	}
	if _, err := s.Bytes("nope"); err == nil || !strings.Contains(err.Error(), IndexFile) {
		t.Errorf("Bytes(nope) error = %v", err)
	}
}

func TestSetErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenSet(dir); err == nil || !strings.Contains(err.Error(), "no model.safetensors or model.safetensors.index.json") {
		t.Errorf("empty folder error = %v", err)
	}
	writeShards(t, dir)
	cases := []struct{ index, want string }{
		{`{"weight_map":{"embed":"missing.safetensors"}}`, "missing.safetensors"},
		{`{"weight_map":{"layers.1.w":"model-00001-of-00002.safetensors"}}`, `tensor "layers.1.w" is mapped to`},
		{`{"weight_map":{"embed":"../x.safetensors"}}`, `shard "../x.safetensors" is not a file name inside`},
		{`{"weight_map":{}}`, "weight_map is missing or empty"},
		{`{"weight_map":`, "model.safetensors.index.json"},
	}
	for _, c := range cases {
		writeIndex(t, dir, c.index)
		s, err := OpenSet(dir)
		if err == nil {
			s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("index %s: error = %v, want %q", c.index, err, c.want)
		}
	}
	// A broken shard is reported with its own path.
	shard := filepath.Join(dir, "model-00002-of-00002.safetensors")
	st, _ := os.Stat(shard)
	os.Truncate(shard, st.Size()-2)
	writeIndex(t, dir, `{"weight_map":{"layers.1.w":"model-00002-of-00002.safetensors"}}`)
	if _, err := OpenSet(dir); err == nil || !strings.Contains(err.Error(), shard) || !strings.Contains(err.Error(), `"layers.1.w"`) {
		t.Errorf("truncated shard error = %v", err)
	}
}

func TestSingleSet(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, SingleFile)
	if err := Write(p, sampleTensors(), nil); err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{dir, p} {
		s, err := OpenSet(arg)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Names()) != 7 || s.Index != "" {
			t.Errorf("OpenSet(%s): names %v index %q", arg, s.Names(), s.Index)
		}
		if _, err := s.Bytes("nope"); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("Bytes(nope) error = %v, want the file named", err)
		}
		s.Close()
	}
}

// FuzzParseHeader: any header either parses into a layout that tiles the buffer, or is
// refused with a *FormatError; it never panics.
func FuzzParseHeader(f *testing.F) {
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), uint16(8))
	f.Add([]byte(`{"__metadata__":{"k":"v"},"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]},"b":{"dtype":"BF16","shape":[0,3],"data_offsets":[1,1]}}`), uint16(1))
	f.Add([]byte(`{"a":{"dtype":"F16","shape":[9223372036854775807,2],"data_offsets":[0,4]}}  `), uint16(4))
	f.Add([]byte(`{"a":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},"a":{}}`), uint16(16))
	f.Fuzz(func(t *testing.T, header []byte, bufSize uint16) {
		infos, _, err := ParseHeader(header, 8+int64(len(header))+int64(bufSize))
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FormatError", err)
			}
			return
		}
		var total int64
		for name, info := range infos {
			if info.Name != name || info.Begin < 0 || info.End > int64(bufSize) {
				t.Fatalf("accepted bad entry %+v", info)
			}
			if int64(info.NumElements()*info.DType.Size()) != info.End-info.Begin {
				t.Fatalf("accepted size mismatch %+v", info)
			}
			total += info.End - info.Begin
		}
		if total != int64(bufSize) {
			t.Fatalf("accepted tensors covering %d of %d bytes", total, bufSize)
		}
	})
}

// TestWriteStreamed: tensors whose bytes come from Fill are laid out as Write lays them out,
// and a Fill that writes the wrong number of bytes fails the write and leaves no file.
func TestWriteStreamed(t *testing.T) {
	dir := t.TempDir()
	want, got := filepath.Join(dir, "want.safetensors"), filepath.Join(dir, "got.safetensors")
	if err := Write(want, sampleTensors(), map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	var streamed []Streamed
	for _, tt := range sampleTensors() {
		data := tt.Data
		streamed = append(streamed, Streamed{Name: tt.Name, DType: tt.DType, Shape: tt.Shape, Fill: func(w io.Writer) error {
			for len(data) > 0 { // a byte at a time: Fill may write in any pieces
				if _, err := w.Write(data[:1]); err != nil {
					return err
				}
				data = data[1:]
			}
			return nil
		}})
	}
	if err := WriteStreamed(got, streamed, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(want)
	b, _ := os.ReadFile(got)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Errorf("WriteStreamed wrote %d bytes unlike Write's %d", len(b), len(a))
	}
	short := filepath.Join(dir, "short.safetensors")
	err := WriteStreamed(short, []Streamed{{Name: "a", DType: F32, Shape: []int{2}, Fill: func(w io.Writer) error {
		_, err := w.Write(make([]byte, 4))
		return err
	}}}, nil)
	if err == nil || !strings.Contains(err.Error(), `tensor "a": 4 data bytes but F32 [2] needs 8`) || !strings.Contains(err.Error(), short) {
		t.Errorf("WriteStreamed with a short Fill: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%d files in the folder, want 2", len(entries))
	}
}
