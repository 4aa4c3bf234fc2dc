// Package tensorboard writes and reads TensorBoard event files (DESIGN §9:
// tb/events.out.tfevents.*) without a protobuf dependency: records in TFRecord framing, each
// holding one Event message encoded by hand. The writer writes scalars as
// Summary.Value.simple_value; the reader (reader.go) also takes the encodings of other writers.
//
// TFRecord record:  uint64 length | uint32 masked CRC-32C(length) | data | uint32 masked CRC-32C(data)
// (little-endian). Event protobuf fields used (tensorflow/core/util/event.proto, summary.proto):
//
//	Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//	Summary { repeated Value value = 1; }
//	Value   { string tag = 1; float simple_value = 2; }
package tensorboard

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// FileVersion is the version string of the first event of every file.
const FileVersion = "brain.Event:2"

// Protobuf field numbers and wire types used here.
const (
	fieldWallTime    = 1 // Event.wall_time, double
	fieldStep        = 2 // Event.step, int64
	fieldFileVersion = 3 // Event.file_version, string
	fieldSummary     = 5 // Event.summary, message
	fieldValue       = 1 // Summary.value, repeated message
	fieldTag         = 1 // Summary.Value.tag, string
	fieldSimpleValue = 2 // Summary.Value.simple_value, float

	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's masked CRC-32C: the CRC rotated right by 15 bits plus a constant,
// so that a CRC of data that itself holds CRCs does not degenerate.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// Writer appends events to one event file. It is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	f    *os.File
	buf  *bufio.Writer
	path string
	err  error // first write error; later calls return it
}

// Create makes dir if needed and a new event file in it named
// events.out.tfevents.<unix seconds>.<hostname>, whose first event carries the file version.
// An existing file of that name is never overwritten: a numeric suffix is added instead.
func Create(dir string) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	now := time.Now()
	base := filepath.Join(dir, fmt.Sprintf("events.out.tfevents.%d.%s", now.Unix(), host))
	var f *os.File
	path := base
	for i := 1; ; i++ {
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || i > 1000 {
			return nil, fmt.Errorf("tensorboard: %w", err)
		}
		path = fmt.Sprintf("%s.%d", base, i)
	}
	w := &Writer{f: f, buf: bufio.NewWriter(f), path: path}
	ev := appendDouble(nil, fieldWallTime, unixSeconds(now))
	ev = appendVarintField(ev, fieldStep, 0)
	ev = appendBytesField(ev, fieldFileVersion, []byte(FileVersion))
	w.record(ev)
	if err := w.Flush(); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return w, nil
}

// Path is the event file's path.
func (w *Writer) Path() string { return w.path }

// Scalars writes one event at step holding every value of values, tags in sorted order.
// Values are stored as float32 (simple_value); non-finite values are written as they are.
func (w *Writer) Scalars(step int64, wall time.Time, values map[string]float64) error {
	tags := make([]string, 0, len(values))
	for t := range values {
		tags = append(tags, t)
	}
	sort.Strings(tags)
	var summary, value []byte
	for _, t := range tags {
		value = appendBytesField(value[:0], fieldTag, []byte(t))
		value = appendFixed32(value, fieldSimpleValue, math.Float32bits(float32(values[t])))
		summary = appendBytesField(summary, fieldValue, value)
	}
	ev := appendDouble(nil, fieldWallTime, unixSeconds(wall))
	ev = appendVarintField(ev, fieldStep, uint64(step))
	ev = appendBytesField(ev, fieldSummary, summary)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record(ev)
	return w.err
}

// Flush writes buffered events to the file and syncs it to disk.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if w.err != nil {
		return w.err
	}
	if w.f == nil {
		return errors.New("tensorboard: writer closed")
	}
	if err := w.buf.Flush(); err != nil {
		w.err = fmt.Errorf("tensorboard: %s: %w", w.path, err)
		return w.err
	}
	if err := w.f.Sync(); err != nil {
		w.err = fmt.Errorf("tensorboard: %s: %w", w.path, err)
	}
	return w.err
}

// Close flushes and closes the file. Closing twice is harmless.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.flushLocked()
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("tensorboard: %s: %w", w.path, cerr)
	}
	w.f = nil
	return err
}

// record frames data as one TFRecord into the buffer; the caller holds mu.
func (w *Writer) record(data []byte) {
	if w.err != nil {
		return
	}
	if w.f == nil {
		w.err = errors.New("tensorboard: writer closed")
		return
	}
	var hdr [12]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(hdr[8:], maskedCRC(hdr[:8]))
	var foot [4]byte
	binary.LittleEndian.PutUint32(foot[:], maskedCRC(data))
	w.buf.Write(hdr[:])
	w.buf.Write(data)
	if _, err := w.buf.Write(foot[:]); err != nil {
		w.err = fmt.Errorf("tensorboard: %s: %w", w.path, err)
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.Unix()) + float64(t.Nanosecond())/1e9 }

// Protobuf encoding helpers.

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendKey(b []byte, field, wire int) []byte {
	return appendVarint(b, uint64(field)<<3|uint64(wire))
}

func appendVarintField(b []byte, field int, v uint64) []byte {
	return appendVarint(appendKey(b, field, wireVarint), v)
}

func appendDouble(b []byte, field int, v float64) []byte {
	return binary.LittleEndian.AppendUint64(appendKey(b, field, wireFixed64), math.Float64bits(v))
}

func appendFixed32(b []byte, field int, v uint32) []byte {
	return binary.LittleEndian.AppendUint32(appendKey(b, field, wireFixed32), v)
}

func appendBytesField(b []byte, field int, v []byte) []byte {
	b = appendVarint(appendKey(b, field, wireBytes), uint64(len(v)))
	return append(b, v...)
}

// Event is one decoded event: the file-version header, or a step's summary values.
type Event struct {
	WallTime    float64
	Step        int64
	FileVersion string
	Values      []Value
}

// Value is one summary value of an event.
type Value struct {
	Tag    string
	Kind   int     // Scalar, Text or Other
	Value  float64 // Kind Scalar (simple_value is a float32, widened)
	Text   string  // Kind Text
	Plugin string  // the summary metadata's plugin name, when there is one ("scalars", "text"…)
}

// fields walks the protobuf message b, calling f with each field's number, wire type and
// value (varint and fixed values in v, length-delimited ones in raw).
func fields(b []byte, f func(field, wire int, v uint64, raw []byte) error) error {
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("bad field key")
		}
		b = b[n:]
		field, wire := int(key>>3), int(key&7)
		var v uint64
		var raw []byte
		switch wire {
		case wireVarint:
			v, n = binary.Uvarint(b)
			if n <= 0 {
				return fmt.Errorf("field %d: bad varint", field)
			}
			b = b[n:]
		case wireFixed64:
			if len(b) < 8 {
				return fmt.Errorf("field %d: truncated", field)
			}
			v, b = binary.LittleEndian.Uint64(b), b[8:]
		case wireFixed32:
			if len(b) < 4 {
				return fmt.Errorf("field %d: truncated", field)
			}
			v, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		case wireBytes:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return fmt.Errorf("field %d: bad length", field)
			}
			raw, b = b[n:n+int(l)], b[n+int(l):]
		default:
			return fmt.Errorf("field %d: unsupported wire type %d", field, wire)
		}
		if err := f(field, wire, v, raw); err != nil {
			return err
		}
	}
	return nil
}
