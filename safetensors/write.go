package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

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
	streamed := make([]Streamed, len(tensors))
	for i, t := range tensors {
		if err := checkTensor(t); err != nil {
			return fmt.Errorf("safetensors: %s: %w", path, err)
		}
		streamed[i] = Streamed{Name: t.Name, DType: t.DType, Shape: t.Shape, Fill: func(w io.Writer) error {
			_, err := w.Write(t.Data)
			return err
		}}
	}
	return WriteStreamed(path, streamed, metadata)
}

// Streamed is a tensor whose bytes WriteStreamed asks for when it reaches it: Fill writes
// exactly the little-endian bytes of Shape in DType.
type Streamed struct {
	Name  string
	DType DType
	Shape []int
	Fill  func(w io.Writer) error
}

// WriteStreamed is Write for tensors that need not be held in memory: each one's bytes go from
// its Fill straight to the file (tensors larger than memory, random weights made as written).
func WriteStreamed(path string, tensors []Streamed, metadata map[string]string) error {
	sorted := slices.Clone(tensors)
	slices.SortFunc(sorted, func(a, b Streamed) int { return strings.Compare(a.Name, b.Name) })
	header := make(map[string]any, len(sorted)+1)
	if len(metadata) > 0 {
		header[metadataKey] = metadata
	}
	sizes := make([]int64, len(sorted))
	var off int64
	for i, t := range sorted {
		if t.Name == "" || t.Name == metadataKey {
			return fmt.Errorf("safetensors: %s: invalid tensor name %q", path, t.Name)
		}
		if i > 0 && sorted[i-1].Name == t.Name {
			return fmt.Errorf("safetensors: %s: tensor %q given twice", path, t.Name)
		}
		if !t.DType.Known() {
			return fmt.Errorf("safetensors: %s: tensor %q: unknown dtype %q", path, t.Name, t.DType)
		}
		n := int64(t.DType.Size())
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("safetensors: %s: tensor %q: negative dimension in shape %v", path, t.Name, t.Shape)
			}
			n *= int64(d)
		}
		shape := append([]int{}, t.Shape...) // [] rather than null for scalars
		header[t.Name] = headerEntry{DType: t.DType, Shape: shape, DataOffsets: [2]int64{off, off + n}}
		sizes[i], off = n, off+n
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
		for i, t := range sorted {
			cw := &countWriter{w: w}
			if err := t.Fill(cw); err != nil {
				return fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			if cw.n != sizes[i] {
				return fmt.Errorf("tensor %q: %d data bytes but %s %v needs %d", t.Name, cw.n, t.DType, t.Shape, sizes[i])
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// countWriter counts what passes through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
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
