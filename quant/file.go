package quant

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"rlhfstation/safetensors"
)

// Tensor key suffixes of a bitsandbytes 4-bit weight, after "<module>.weight" (Linear4bit's
// state dict: the packed codes under the weight's own name, the quant state's tensors beside
// it, and its other fields as JSON bytes in one uint8 tensor named after the quant type).
const (
	keyAbsmax         = ".absmax"
	keyQuantMap       = ".quant_map"
	keyNestedAbsmax   = ".nested_absmax"
	keyNestedQuantMap = ".nested_quant_map"
	keyQuantState     = ".quant_state.bitsandbytes__"
)

// Tensors lays the weight out as bitsandbytes saves a Linear4bit whose module path is prefix:
//
//	prefix.weight                                 U8  [(n+1)/2, 1]  packed codes
//	prefix.weight.absmax                          F32 [blocks], or U8 [blocks] when nested
//	prefix.weight.quant_map                       F32 [16]
//	prefix.weight.nested_absmax                   F32 [ceil(blocks/256)]   (nested only)
//	prefix.weight.nested_quant_map                F32 [256]                (nested only)
//	prefix.weight.quant_state.bitsandbytes__nf4   U8  [len]  JSON of the other fields
func (w *Weight) Tensors(prefix string) []safetensors.Tensor {
	base := prefix + ".weight"
	code := w.Type.Code()
	ts := []safetensors.Tensor{
		{Name: base, DType: safetensors.U8, Shape: []int{len(w.Packed), 1}, Data: append([]byte(nil), w.Packed...)},
		safetensors.F32Tensor(base+keyQuantMap, []int{16}, code[:]),
	}
	if w.Nested() {
		ts = append(ts,
			safetensors.Tensor{Name: base + keyAbsmax, DType: safetensors.U8, Shape: []int{len(w.QAbsmax)}, Data: append([]byte(nil), w.QAbsmax...)},
			safetensors.F32Tensor(base+keyNestedAbsmax, []int{len(w.NestedAbsmax)}, w.NestedAbsmax),
			safetensors.F32Tensor(base+keyNestedQuantMap, []int{256}, w.NestedCode[:]),
		)
	} else {
		ts = append(ts, safetensors.F32Tensor(base+keyAbsmax, []int{len(w.Absmax)}, w.Absmax))
	}
	state := w.stateJSON()
	ts = append(ts, safetensors.Tensor{Name: base + keyQuantState + string(w.Type), DType: safetensors.U8,
		Shape: []int{len(state)}, Data: state})
	return ts
}

// stateJSON is the quant state's non-tensor fields as bitsandbytes' pack_dict_to_tensor writes
// them (Python's json.dumps: ", " and ": " separators, as_dict's key order).
func (w *Weight) stateJSON() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"quant_type": %q, "blocksize": %d, "dtype": %q, "shape": [%d, %d]`,
		w.Type, w.BlockSize, w.DType, w.Rows, w.Cols)
	if w.Nested() {
		fmt.Fprintf(&b, `, "nested_blocksize": %d, "nested_dtype": "float32", "nested_offset": %s`,
			w.NestedBlockSize, pyFloat(float64(w.Offset)))
	}
	b.WriteString("}")
	return b.Bytes()
}

// pyFloat formats v as Python's repr does: shortest round-trip digits, positional notation for
// decimal exponents in [-4, 16), with ".0" on whole numbers.
func pyFloat(v float64) string {
	e := strconv.FormatFloat(v, 'e', -1, 64)
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if exp < -4 || exp >= 16 {
		return e
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}

// quantState is the JSON of a quant state; pointers tell missing fields from zeros.
type quantState struct {
	QuantType       string   `json:"quant_type"`
	BlockSize       *int     `json:"blocksize"`
	DType           string   `json:"dtype"`
	Shape           []int    `json:"shape"`
	NestedBlockSize *int     `json:"nested_blocksize"`
	NestedDType     *string  `json:"nested_dtype"`
	NestedOffset    *float64 `json:"nested_offset"`
}

// tensorSource is what LoadWeight reads from: a safetensors.Set.
type tensorSource interface {
	Names() []string
	Info(name string) (safetensors.TensorInfo, bool)
	Bytes(name string) ([]byte, error)
	Float32(name string) ([]float32, []int, error)
}

// LoadWeight reads the 4-bit weight of the module at prefix (prefix.weight and its quant state)
// from set. It reports false, with no error, when prefix.weight is not a bitsandbytes 4-bit
// weight (no quant_state tensor beside it). A truncated or inconsistent state is an error that
// names the tensor at fault.
func LoadWeight(set *safetensors.Set, prefix string) (*Weight, bool, error) {
	where := func(name string) string {
		if f, ok := set.File(name); ok {
			return f.Path
		}
		if set.Index != "" || len(set.Files) == 0 {
			return cmp.Or(set.Index, set.Dir)
		}
		return set.Files[0].Path
	}
	return loadWeight(set, prefix, where)
}

func loadWeight(src tensorSource, prefix string, where func(string) string) (*Weight, bool, error) {
	base := prefix + ".weight"
	var stateKey string
	var typ Type
	for _, t := range []Type{NF4, FP4} {
		if _, ok := src.Info(base + keyQuantState + string(t)); ok {
			if stateKey != "" {
				return nil, true, fmt.Errorf("quant: %s: %s has both nf4 and fp4 quant states", where(base), base)
			}
			stateKey, typ = base+keyQuantState+string(t), t
		}
	}
	fail := func(name, format string, a ...any) error {
		return fmt.Errorf("quant: %s: tensor %q: %s", where(name), name, fmt.Sprintf(format, a...))
	}
	if stateKey == "" {
		// A quant state of a type this package does not know is an error, not a plain weight.
		for _, name := range src.Names() {
			if t, ok := strings.CutPrefix(name, base+keyQuantState); ok {
				return nil, true, fail(name, "unknown quant_type %q (nf4 or fp4)", t)
			}
		}
		return nil, false, nil
	}
	raw, err := src.Bytes(stateKey)
	if err != nil {
		return nil, true, err
	}
	var st quantState
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, true, fail(stateKey, "quant state is not valid JSON: %v", err)
	}
	switch {
	case st.QuantType != string(typ):
		return nil, true, fail(stateKey, "quant_type %q does not match the key's %q", st.QuantType, typ)
	case st.BlockSize == nil:
		return nil, true, fail(stateKey, "quant state has no blocksize")
	case !validBlockSize(*st.BlockSize):
		return nil, true, fail(stateKey, "blocksize %d not allowed (one of %v)", *st.BlockSize, BlockSizes)
	case len(st.Shape) != 2 || st.Shape[0] <= 0 || st.Shape[1] <= 0:
		return nil, true, fail(stateKey, "shape %v is not a 2-D weight [out, in]", st.Shape)
	}
	switch st.DType {
	case "float32", "float16", "bfloat16":
	default:
		return nil, true, fail(stateKey, "dtype %q not one of float32, float16, bfloat16", st.DType)
	}
	w := &Weight{Type: typ, BlockSize: *st.BlockSize, Rows: st.Shape[0], Cols: st.Shape[1], DType: st.DType}
	n, nb := w.Len(), w.Blocks()

	// The packed codes.
	if err := expectTensor(src, base, safetensors.U8, (n+1)/2, fail); err != nil {
		return nil, true, err
	}
	if w.Packed, err = copyBytes(src, base); err != nil {
		return nil, true, err
	}
	// The 16-entry code book must be the type's (bitsandbytes' kernels use the built-in one).
	qm, err := floatTensor(src, base+keyQuantMap, 16, fail)
	if err != nil {
		return nil, true, err
	}
	code := typ.Code()
	for i, v := range qm {
		if math.Abs(float64(v-code[i])) > 1e-6 || math.IsNaN(float64(v)) {
			return nil, true, fail(base+keyQuantMap, "value %d is %v, not the %s code book's %v", i, v, typ, code[i])
		}
	}
	// The scales, plain or nested.
	_, hasNested := src.Info(base + keyNestedAbsmax)
	nestedState := st.NestedBlockSize != nil || st.NestedOffset != nil || st.NestedDType != nil
	switch {
	case hasNested && !nestedState:
		return nil, true, fail(stateKey, "has %s but no nested_blocksize/nested_offset", base+keyNestedAbsmax)
	case nestedState && !hasNested:
		return nil, true, fail(base+keyNestedAbsmax, "missing, but the quant state is nested")
	case !hasNested:
		if w.Absmax, err = floatTensor(src, base+keyAbsmax, nb, fail); err != nil {
			return nil, true, err
		}
		if err := checkFiniteScales(w.Absmax, "absmax"); err != nil {
			return nil, true, fail(base+keyAbsmax, "%v", err)
		}
		return w, true, nil
	}
	if st.NestedBlockSize == nil || st.NestedOffset == nil {
		return nil, true, fail(stateKey, "nested quant state needs nested_blocksize and nested_offset")
	}
	if !validBlockSize(*st.NestedBlockSize) {
		return nil, true, fail(stateKey, "nested_blocksize %d not allowed (one of %v)", *st.NestedBlockSize, BlockSizes)
	}
	if st.NestedDType != nil && *st.NestedDType != "float32" {
		return nil, true, fail(stateKey, "nested_dtype %q is not float32", *st.NestedDType)
	}
	off := *st.NestedOffset
	if math.IsNaN(off) || math.IsInf(off, 0) {
		return nil, true, fail(stateKey, "nested_offset %v is not finite", off)
	}
	w.Offset = float32(off)
	w.NestedBlockSize = *st.NestedBlockSize
	if err := expectTensor(src, base+keyAbsmax, safetensors.U8, nb, fail); err != nil {
		return nil, true, err
	}
	if w.QAbsmax, err = copyBytes(src, base+keyAbsmax); err != nil {
		return nil, true, err
	}
	if w.NestedAbsmax, err = floatTensor(src, base+keyNestedAbsmax, NumBlocks(nb, w.NestedBlockSize), fail); err != nil {
		return nil, true, err
	}
	if err := checkFiniteScales(w.NestedAbsmax, "nested_absmax"); err != nil {
		return nil, true, fail(base+keyNestedAbsmax, "%v", err)
	}
	nqm, err := floatTensor(src, base+keyNestedQuantMap, 256, fail)
	if err != nil {
		return nil, true, err
	}
	if err := checkFiniteScales(nqm, "nested_quant_map"); err != nil {
		return nil, true, fail(base+keyNestedQuantMap, "%v", err)
	}
	var nc [256]float32
	copy(nc[:], nqm)
	if nc == DynamicCode {
		w.NestedCode = &DynamicCode // share the common table
	} else {
		w.NestedCode = &nc
	}
	return w, true, nil
}

type failFunc func(name, format string, a ...any) error

// expectTensor checks that a tensor exists with the given dtype and element count.
func expectTensor(src tensorSource, name string, dt safetensors.DType, count int, fail failFunc) error {
	info, ok := src.Info(name)
	if !ok {
		return fail(name, "missing")
	}
	if info.DType != dt {
		return fail(name, "dtype %s, want %s", info.DType, dt)
	}
	if info.NumElements() != count {
		return fail(name, "has %d values (shape %v), want %d", info.NumElements(), info.Shape, count)
	}
	return nil
}

// floatTensor reads a float tensor of count values.
func floatTensor(src tensorSource, name string, count int, fail failFunc) ([]float32, error) {
	info, ok := src.Info(name)
	if !ok {
		return nil, fail(name, "missing")
	}
	if info.NumElements() != count {
		return nil, fail(name, "has %d values (shape %v), want %d", info.NumElements(), info.Shape, count)
	}
	v, _, err := src.Float32(name)
	return v, err
}

func copyBytes(src tensorSource, name string) ([]byte, error) {
	b, err := src.Bytes(name)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

// QuantStateKeys lists every tensor name a 4-bit weight at prefix may own besides
// prefix.weight, so that a loader can tell them from unexpected tensors.
func QuantStateKeys(prefix string) []string {
	base := prefix + ".weight"
	return []string{base + keyAbsmax, base + keyQuantMap, base + keyNestedAbsmax, base + keyNestedQuantMap,
		base + keyQuantState + string(NF4), base + keyQuantState + string(FP4)}
}

// IsStateKey reports whether name is one of a 4-bit weight's quant state tensors (not the
// packed weight itself).
func IsStateKey(name string) bool {
	for _, s := range []string{keyAbsmax, keyQuantMap, keyNestedAbsmax, keyNestedQuantMap} {
		if strings.HasSuffix(name, ".weight"+s) {
			return true
		}
	}
	return strings.Contains(name, ".weight"+keyQuantState)
}
