package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"

	"rlhfstation/internal/atomicfile"
)

// Tensor is one tensor to write: Data holds its little-endian bytes.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// F32Tensor encodes v as an F32 tensor.
func F32Tensor(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return Tensor{Name: name, DType: F32, Shape: append([]int(nil), shape...), Data: b}
}

// F16Tensor encodes v as an F16 tensor, rounding to nearest even.
func F16Tensor(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], F32ToF16(x))
	}
	return Tensor{Name: name, DType: F16, Shape: append([]int(nil), shape...), Data: b}
}

// BF16Tensor encodes v as a BF16 tensor, rounding to nearest even.
func BF16Tensor(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], F32ToBF16(x))
	}
	return Tensor{Name: name, DType: BF16, Shape: append([]int(nil), shape...), Data: b}
}

type headerEntry struct {
	DType       DType    `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// Write stores tensors (laid out in name order) and metadata at path atomically: a temporary
// file in the same folder is written, synced and renamed over path. The header is padded with
// spaces so that the buffer starts 8-byte aligned.
func Write(path string, tensors []Tensor, metadata map[string]string) error {
	sorted := append([]Tensor(nil), tensors...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	header := make(map[string]any, len(sorted)+1)
	if len(metadata) > 0 {
		header[metadataKey] = metadata
	}
	var off int64
	for i, t := range sorted {
		if err := checkTensor(t); err != nil {
			return fmt.Errorf("safetensors: %s: %w", path, err)
		}
		if i > 0 && sorted[i-1].Name == t.Name {
			return fmt.Errorf("safetensors: %s: tensor %q given twice", path, t.Name)
		}
		shape := append([]int{}, t.Shape...) // [] rather than null for scalars
		header[t.Name] = headerEntry{DType: t.DType, Shape: shape, DataOffsets: [2]int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	js, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("safetensors: %s: %w", path, err)
	}
	for (8+len(js))%8 != 0 {
		js = append(js, ' ')
	}
	err = atomicfile.Write(path, 0o644, func(w io.Writer) error {
		var lenBuf [8]byte
		binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(js)))
		w.Write(lenBuf[:])
		w.Write(js)
		for _, t := range sorted {
			if _, err := w.Write(t.Data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

func checkTensor(t Tensor) error {
	if t.Name == "" || t.Name == metadataKey {
		return fmt.Errorf("invalid tensor name %q", t.Name)
	}
	if !t.DType.Known() {
		return fmt.Errorf("tensor %q: unknown dtype %q", t.Name, t.DType)
	}
	n := 1
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("tensor %q: negative dimension in shape %v", t.Name, t.Shape)
		}
		n *= d
	}
	if len(t.Data) != n*t.DType.Size() {
		return fmt.Errorf("tensor %q: %d data bytes but %s %v needs %d", t.Name, len(t.Data), t.DType, t.Shape, n*t.DType.Size())
	}
	return nil
}
