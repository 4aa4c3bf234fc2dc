package tensorboard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// Reading event files written by other tools: PyTorch's SummaryWriter (simple_value, or a
// tensor with float_val when new_style is set), TensorFlow 2 (a tensor with tensor_content),
// TensorBoardX, and text summaries (a DT_STRING tensor of the "text" plugin). The fields read:
//
//	Event          { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//	Summary.Value  { string tag = 1; float simple_value = 2; TensorProto tensor = 8; SummaryMetadata metadata = 9; }
//	SummaryMetadata{ PluginData plugin_data = 1; }   PluginData { string plugin_name = 1; }
//	TensorProto    { DataType dtype = 1; TensorShapeProto tensor_shape = 2; bytes tensor_content = 4;
//	                 repeated float float_val = 5; repeated double double_val = 6; repeated int32 int_val = 7;
//	                 repeated bytes string_val = 8; repeated int64 int64_val = 10; repeated bool bool_val = 11;
//	                 repeated int32 half_val = 13; }
//	TensorShapeProto { repeated Dim dim = 2; }   Dim { int64 size = 1; }
//
// Repeated numbers may be packed or not, as protobuf allows. Images, histograms, audio, graphs
// and tensors of more than one number are skipped (Kind Other).

// Kinds of values.
const (
	Scalar = iota // a number: Value.Value
	Text          // a string: Value.Text
	Other         // anything else (image, histogram, audio, a tensor of several numbers)
)

// TensorFlow's DataType enum (tensorflow/core/framework/types.proto), the values read here.
const (
	dtFloat    = 1
	dtDouble   = 2
	dtInt32    = 3
	dtString   = 7
	dtInt64    = 9
	dtBool     = 10
	dtBfloat16 = 14
	dtHalf     = 19
)

// MaxRecord bounds a record's announced length: a larger one is taken as a damaged file rather
// than read into memory.
const MaxRecord = 64 << 20

// ErrIncomplete is returned (wrapped) by Reader.Next when the data ends inside a record: a
// writer is still appending it, or the file was cut. A later Next, once more data is there,
// reads the record from its start.
var ErrIncomplete = errors.New("the file ends inside a record")

// CorruptError is a record whose checksum or content is wrong. When Skipped is set the reader
// has stepped over the record and Next may go on; otherwise the framing itself is lost.
type CorruptError struct {
	Name    string
	Offset  int64
	Reason  string
	Skipped bool
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s: record at byte %d: %s", e.Name, e.Offset, e.Reason)
}

// Reader reads events one record at a time from an event file, holding only the record in
// hand: a file of any size streams through it in constant memory. It follows a file that is
// still being written: after io.EOF or ErrIncomplete, a later Next reads what was appended.
type Reader struct {
	r    io.Reader
	name string
	off  int64  // file offset of pend[0]
	pend []byte // bytes read but not yet consumed (the start of the next record)
	buf  []byte
	lost bool // the framing is lost: every Next fails
}

// NewReader reads events from r; name is used in errors (usually the file's path).
func NewReader(r io.Reader, name string) *Reader {
	return &Reader{r: r, name: name, buf: make([]byte, 64<<10)}
}

// Offset is the byte offset of the next record.
func (r *Reader) Offset() int64 { return r.off }

// fill makes pend hold at least n bytes; it returns false when the data ends first.
func (r *Reader) fill(n int) (bool, error) {
	for len(r.pend) < n {
		k, err := r.r.Read(r.buf)
		r.pend = append(r.pend, r.buf[:k]...)
		if err == io.EOF || (k == 0 && err == nil) {
			if len(r.pend) >= n {
				return true, nil
			}
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w", r.name, err)
		}
	}
	return true, nil
}

// Next returns the next event. At the end of the data it returns io.EOF when the last record
// was complete, and an error wrapping ErrIncomplete when the data stops inside a record.
func (r *Reader) Next() (Event, error) {
	if r.lost {
		return Event{}, &CorruptError{Name: r.name, Offset: r.off, Reason: "unreadable after an earlier error"}
	}
	ok, err := r.fill(12)
	if err != nil {
		return Event{}, err
	}
	if !ok {
		if len(r.pend) == 0 {
			return Event{}, io.EOF
		}
		return Event{}, fmt.Errorf("%s: byte %d: %w (%d of 12 header bytes)", r.name, r.off, ErrIncomplete, len(r.pend))
	}
	n := binary.LittleEndian.Uint64(r.pend)
	if got, want := binary.LittleEndian.Uint32(r.pend[8:]), maskedCRC(r.pend[:8]); got != want {
		r.lost = true
		return Event{}, &CorruptError{Name: r.name, Offset: r.off, Reason: fmt.Sprintf("length CRC %08x, want %08x (not an event file, or damaged)", got, want)}
	}
	if n > MaxRecord {
		r.lost = true
		return Event{}, &CorruptError{Name: r.name, Offset: r.off, Reason: fmt.Sprintf("announces %d bytes, more than the %d this reader takes", n, MaxRecord)}
	}
	total := 12 + int(n) + 4
	if ok, err = r.fill(total); err != nil {
		return Event{}, err
	}
	if !ok {
		return Event{}, fmt.Errorf("%s: byte %d: %w (%d of %d bytes)", r.name, r.off, ErrIncomplete, len(r.pend), total)
	}
	data := r.pend[12 : 12+n]
	at := r.off
	crcOK := binary.LittleEndian.Uint32(r.pend[12+n:]) == maskedCRC(data)
	var ev Event
	var derr error
	if crcOK {
		ev, derr = decodeEvent(data)
	}
	// Consume the record; keep what follows it.
	rest := copy(r.pend, r.pend[total:])
	r.pend = r.pend[:rest]
	r.off += int64(total)
	if !crcOK {
		return Event{}, &CorruptError{Name: r.name, Offset: at, Reason: "data CRC mismatch", Skipped: true}
	}
	if derr != nil {
		return Event{}, &CorruptError{Name: r.name, Offset: at, Reason: derr.Error(), Skipped: true}
	}
	return ev, nil
}

// ReadFile decodes every event of an event file, checking both CRCs of each record.
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	defer f.Close()
	var evs []Event
	r := NewReader(f, path)
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, fmt.Errorf("tensorboard: %w", err)
		}
		evs = append(evs, ev)
	}
}

// Decode parses the TFRecord stream b into events; a torn end or a bad checksum is an error.
func Decode(b []byte) ([]Event, error) {
	var evs []Event
	r := NewReader(bytes.NewReader(b), "data")
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func decodeEvent(b []byte) (Event, error) {
	var ev Event
	err := fields(b, func(field, wire int, v uint64, raw []byte) error {
		switch {
		case field == fieldWallTime && wire == wireFixed64:
			ev.WallTime = math.Float64frombits(v)
		case field == fieldStep && wire == wireVarint:
			ev.Step = int64(v)
		case field == fieldFileVersion && wire == wireBytes:
			ev.FileVersion = string(raw)
		case field == fieldSummary && wire == wireBytes:
			return fields(raw, func(field, wire int, _ uint64, raw []byte) error {
				if field != fieldValue || wire != wireBytes {
					return nil
				}
				val, err := decodeValue(raw)
				if err != nil {
					return err
				}
				ev.Values = append(ev.Values, val)
				return nil
			})
		}
		return nil
	})
	return ev, err
}

// Summary.Value fields besides tag and simple_value.
const (
	fieldOldHisto = 3
	fieldImage    = 4
	fieldHisto    = 5
	fieldAudio    = 6
	fieldTensor   = 8
	fieldMetadata = 9
)

func decodeValue(b []byte) (Value, error) {
	val := Value{Kind: Other}
	var tensor []byte
	hasSimple := false
	err := fields(b, func(field, wire int, v uint64, raw []byte) error {
		switch {
		case field == fieldTag && wire == wireBytes:
			val.Tag = string(raw)
		case field == fieldSimpleValue && wire == wireFixed32:
			val.Value = float64(math.Float32frombits(uint32(v)))
			hasSimple = true
		case field == fieldTensor && wire == wireBytes:
			tensor = raw
		case field == fieldMetadata && wire == wireBytes:
			// SummaryMetadata.plugin_data (1) → PluginData.plugin_name (1)
			return fields(raw, func(field, wire int, _ uint64, raw []byte) error {
				if field == 1 && wire == wireBytes {
					return fields(raw, func(field, wire int, _ uint64, raw []byte) error {
						if field == 1 && wire == wireBytes {
							val.Plugin = string(raw)
						}
						return nil
					})
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return val, fmt.Errorf("value %q: %w", val.Tag, err)
	}
	switch {
	case hasSimple:
		val.Kind = Scalar
	case tensor != nil:
		if err := decodeTensor(tensor, &val); err != nil {
			return val, fmt.Errorf("value %q: tensor: %w", val.Tag, err)
		}
	}
	return val, nil
}

// decodeTensor reads a TensorProto holding one number (Kind Scalar) or strings (Kind Text).
func decodeTensor(b []byte, val *Value) error {
	var dtype int
	var content []byte
	var nums []float64
	var strs []string
	elems := int64(1)
	err := fields(b, func(field, wire int, v uint64, raw []byte) error {
		switch field {
		case 1: // dtype
			if wire == wireVarint {
				dtype = int(v)
			}
		case 2: // tensor_shape
			if wire != wireBytes {
				return nil
			}
			return fields(raw, func(field, wire int, _ uint64, raw []byte) error {
				if field != 2 || wire != wireBytes {
					return nil
				}
				return fields(raw, func(field, wire int, v uint64, _ []byte) error {
					if field == 1 && wire == wireVarint {
						elems *= int64(v)
					}
					return nil
				})
			})
		case 4: // tensor_content
			if wire == wireBytes {
				content = raw
			}
		case 5: // float_val
			return repeated(wire, v, raw, 4, func(x uint64) { nums = append(nums, float64(math.Float32frombits(uint32(x)))) })
		case 6: // double_val
			return repeated(wire, v, raw, 8, func(x uint64) { nums = append(nums, math.Float64frombits(x)) })
		case 7, 11: // int_val, bool_val
			return repeated(wire, v, raw, 0, func(x uint64) { nums = append(nums, float64(int32(x))) })
		case 10: // int64_val
			return repeated(wire, v, raw, 0, func(x uint64) { nums = append(nums, float64(int64(x))) })
		case 13: // half_val: the 16 bits of a half or a bfloat16 in an int32
			return repeated(wire, v, raw, 0, func(x uint64) {
				if dtype == dtBfloat16 {
					nums = append(nums, float64(math.Float32frombits(uint32(x)<<16)))
				} else {
					nums = append(nums, halfToFloat(uint16(x)))
				}
			})
		case 8: // string_val
			if wire == wireBytes {
				strs = append(strs, string(raw))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if dtype == dtString {
		val.Kind, val.Text = Text, strings.Join(strs, "\n")
		return nil
	}
	if content != nil && len(nums) == 0 {
		switch dtype {
		case dtFloat:
			for i := 0; i+4 <= len(content); i += 4 {
				nums = append(nums, float64(math.Float32frombits(binary.LittleEndian.Uint32(content[i:]))))
			}
		case dtDouble:
			for i := 0; i+8 <= len(content); i += 8 {
				nums = append(nums, math.Float64frombits(binary.LittleEndian.Uint64(content[i:])))
			}
		case dtHalf:
			for i := 0; i+2 <= len(content); i += 2 {
				nums = append(nums, halfToFloat(binary.LittleEndian.Uint16(content[i:])))
			}
		case dtBfloat16:
			for i := 0; i+2 <= len(content); i += 2 {
				nums = append(nums, float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(content[i:]))<<16)))
			}
		case dtInt32:
			for i := 0; i+4 <= len(content); i += 4 {
				nums = append(nums, float64(int32(binary.LittleEndian.Uint32(content[i:]))))
			}
		case dtInt64:
			for i := 0; i+8 <= len(content); i += 8 {
				nums = append(nums, float64(int64(binary.LittleEndian.Uint64(content[i:]))))
			}
		case dtBool:
			for _, c := range content {
				nums = append(nums, float64(c))
			}
		}
	}
	// A scalar tensor has one element (TensorFlow may store a repeated constant once).
	if elems == 1 && len(nums) == 1 {
		val.Kind, val.Value = Scalar, nums[0]
	}
	return nil
}

// repeated calls f with each element of a repeated numeric field, packed (wire type 2) or not.
// size is 4 or 8 for fixed-width elements, 0 for varints.
func repeated(wire int, v uint64, raw []byte, size int, f func(uint64)) error {
	if wire != wireBytes {
		f(v)
		return nil
	}
	for len(raw) > 0 {
		switch size {
		case 4:
			if len(raw) < 4 {
				return errors.New("packed fixed32 truncated")
			}
			f(uint64(binary.LittleEndian.Uint32(raw)))
			raw = raw[4:]
		case 8:
			if len(raw) < 8 {
				return errors.New("packed fixed64 truncated")
			}
			f(binary.LittleEndian.Uint64(raw))
			raw = raw[8:]
		default:
			x, n := binary.Uvarint(raw)
			if n <= 0 {
				return errors.New("packed varint truncated")
			}
			f(x)
			raw = raw[n:]
		}
	}
	return nil
}

// halfToFloat widens an IEEE-754 binary16 number.
func halfToFloat(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10)&0x1f, float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * frac * math.Pow(2, -24)
	case 0x1f:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * (1 + frac/1024) * math.Pow(2, float64(exp-15))
}
