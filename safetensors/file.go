package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// File is an open safetensors file. The header is read and validated by Open; tensor data is
// memory-mapped where the system allows it, else read on demand. Its methods are safe for
// concurrent use until Close.
type File struct {
	Path     string
	Metadata map[string]string

	infos     map[string]TensorInfo
	names     []string
	f         *os.File
	mapping   []byte // the whole file when mapped, else nil
	data      []byte // the buffer inside mapping
	dataStart int64  // file offset of the buffer
}

// Open reads and validates the header of the file at path.
func Open(path string) (*File, error) { return open(path, true) }

func open(path string, useMmap bool) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	sf, err := readHeader(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	size := sf.dataStart + int64(sf.bufferSize())
	if useMmap && size > sf.dataStart {
		if m, err := mapFile(f, size); err == nil {
			sf.mapping, sf.data = m, m[sf.dataStart:]
		}
	}
	return sf, nil
}

func readHeader(f *os.File, path string) (*File, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	size := st.Size()
	fail := func(format string, a ...any) error {
		return &FormatError{Path: path, Msg: fmt.Sprintf(format, a...)}
	}
	if size < 8 {
		return nil, fail("file is %d bytes, too short for the 8-byte header length (truncated?)", size)
	}
	var lenBuf [8]byte
	if _, err := f.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, fail("header length %d is more than the %d allowed (not a safetensors file?)", n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return nil, fail("header length %d runs past the end of the %d-byte file (truncated?)", n, size)
	}
	hdr := make([]byte, n)
	if _, err := f.ReadAt(hdr, 8); err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	infos, meta, err := ParseHeader(hdr, size)
	if err != nil {
		var fe *FormatError
		if errors.As(err, &fe) {
			fe.Path = path
		}
		return nil, err
	}
	names := make([]string, 0, len(infos))
	for name := range infos {
		names = append(names, name)
	}
	sort.Strings(names)
	return &File{Path: path, Metadata: meta, infos: infos, names: names, f: f, dataStart: 8 + int64(n)}, nil
}

// bufferSize is the end of the last tensor, which validation made the buffer's size.
func (f *File) bufferSize() int {
	var end int64
	for _, t := range f.infos {
		end = max(end, t.End)
	}
	return int(end)
}

// Close releases the mapping and the file. Slices from Bytes are invalid afterwards.
func (f *File) Close() error {
	var err error
	if f.mapping != nil {
		err = unmapFile(f.mapping)
		f.mapping, f.data = nil, nil
	}
	if f.f != nil {
		if cerr := f.f.Close(); err == nil {
			err = cerr
		}
		f.f = nil
	}
	return err
}

// Names lists the tensors, sorted.
func (f *File) Names() []string { return append([]string(nil), f.names...) }

// Info describes one tensor.
func (f *File) Info(name string) (TensorInfo, bool) {
	t, ok := f.infos[name]
	if ok {
		t.Shape = append([]int(nil), t.Shape...)
	}
	return t, ok
}

// Bytes returns a tensor's raw little-endian bytes. When the file is mapped this is a view
// into the mapping (copy-on-write, never written back), valid until Close.
func (f *File) Bytes(name string) ([]byte, error) {
	t, ok := f.infos[name]
	if !ok {
		return nil, fmt.Errorf("safetensors: %s: no tensor %q", f.Path, name)
	}
	if f.data != nil {
		return f.data[t.Begin:t.End:t.End], nil
	}
	if f.f == nil {
		return nil, fmt.Errorf("safetensors: %s: file is closed", f.Path)
	}
	b := make([]byte, t.End-t.Begin)
	if _, err := f.f.ReadAt(b, f.dataStart+t.Begin); err != nil && !(err == io.EOF && len(b) == 0) {
		return nil, fmt.Errorf("safetensors: %s: tensor %q: %w", f.Path, name, err)
	}
	return b, nil
}

// Float32 returns a tensor converted to float32 (from F32, F16, BF16 or F64) and its shape.
func (f *File) Float32(name string) ([]float32, []int, error) {
	t, ok := f.infos[name]
	if !ok {
		return nil, nil, fmt.Errorf("safetensors: %s: no tensor %q", f.Path, name)
	}
	dst := make([]float32, t.NumElements())
	if err := f.Float32Into(name, dst); err != nil {
		return nil, nil, err
	}
	return dst, append([]int(nil), t.Shape...), nil
}

// Float32Into converts a tensor into dst, which must hold exactly its element count.
func (f *File) Float32Into(name string, dst []float32) error {
	t, ok := f.infos[name]
	if !ok {
		return fmt.Errorf("safetensors: %s: no tensor %q", f.Path, name)
	}
	if !isFloat(t.DType) {
		return fmt.Errorf("safetensors: %s: tensor %q has dtype %s; only F32, F16, BF16 and F64 convert to float32", f.Path, name, t.DType)
	}
	if len(dst) != t.NumElements() {
		return fmt.Errorf("safetensors: %s: tensor %q has %d elements, destination %d", f.Path, name, t.NumElements(), len(dst))
	}
	b, err := f.Bytes(name)
	if err != nil {
		return err
	}
	decodeFloats(t.DType, b, dst)
	return nil
}

// Float32RangeInto converts the len(dst) elements of a tensor from element lo on into dst: a
// large tensor can be read a chunk at a time into one buffer.
func (f *File) Float32RangeInto(name string, lo int, dst []float32) error {
	t, ok := f.infos[name]
	if !ok {
		return fmt.Errorf("safetensors: %s: no tensor %q", f.Path, name)
	}
	if !isFloat(t.DType) {
		return fmt.Errorf("safetensors: %s: tensor %q has dtype %s; only F32, F16, BF16 and F64 convert to float32", f.Path, name, t.DType)
	}
	if lo < 0 || lo+len(dst) > t.NumElements() {
		return fmt.Errorf("safetensors: %s: tensor %q has %d elements, not [%d, %d)", f.Path, name, t.NumElements(), lo, lo+len(dst))
	}
	size := t.DType.Size()
	if f.data != nil {
		begin := t.Begin + int64(lo*size)
		decodeFloats(t.DType, f.data[begin:begin+int64(len(dst)*size)], dst)
		return nil
	}
	if f.f == nil {
		return fmt.Errorf("safetensors: %s: file is closed", f.Path)
	}
	b := make([]byte, len(dst)*size)
	if _, err := f.f.ReadAt(b, f.dataStart+t.Begin+int64(lo*size)); err != nil && !(err == io.EOF && len(b) == 0) {
		return fmt.Errorf("safetensors: %s: tensor %q: %w", f.Path, name, err)
	}
	decodeFloats(t.DType, b, dst)
	return nil
}

func isFloat(d DType) bool { return d == F32 || d == F16 || d == BF16 || d == F64 }

// decodeFloats converts little-endian elements of a float dtype; len(b) = len(dst)·size.
func decodeFloats(d DType, b []byte, dst []float32) {
	le := binary.LittleEndian
	switch d {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = F16ToF32(le.Uint16(b[2*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(le.Uint16(b[2*i:]))
		}
	case F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(le.Uint64(b[8*i:])))
		}
	}
}
