package wandb

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// The framing's constants (W&B's datastore: LevelDB's log format, its own header and CRC).
const (
	headerLen  = 7
	blockSize  = 32 << 10
	chunkHead  = 7
	chunkFull  = 1
	chunkFirst = 2
	chunkMid   = 3
	chunkLast  = 4
	magic      = 0xBEE1
	version    = 0
	// MaxRecord bounds an assembled record: a larger one is taken as damage.
	MaxRecord = 256 << 20
)

var ident = [4]byte{':', 'W', '&', 'B'}

// chunkCRC is the checksum of a chunk: CRC-32 (IEEE) over its type byte then its data.
func chunkCRC(typ byte, data []byte) uint32 {
	return crc32.Update(crc32.ChecksumIEEE([]byte{typ}), crc32.IEEETable, data)
}

// ErrIncomplete is returned (wrapped) by Reader.Next when the data ends inside a chunk or a
// multi-chunk record: a writer is still appending, or the file was cut. A later Next, once more
// data is there, goes on from where it stopped.
var ErrIncomplete = errors.New("the file ends inside a record")

// ErrNotWandb is returned when the file does not start with a W&B header.
var ErrNotWandb = errors.New("not a W&B transaction log (no :W&B header)")

// CorruptError is damage found in the file: a chunk whose checksum, length or type is wrong
// (Skipped: the reader has moved to the next block and Next may go on), or a record whose
// protobuf does not decode (Skipped too: the framing is intact).
type CorruptError struct {
	Name    string
	Offset  int64
	Reason  string
	Skipped bool
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s: at byte %d: %s", e.Name, e.Offset, e.Reason)
}

// Reader reads records from a .wandb file, holding only the record in hand. It follows a file
// that is still being written: after io.EOF or ErrIncomplete, a later Next reads what was
// appended.
type Reader struct {
	r    io.Reader
	name string
	off  int64  // file offset of pend[0]
	pend []byte // bytes read but not yet consumed
	buf  []byte

	header bool   // the file header was read
	skipTo int64  // bytes before this offset are dropped (damage: the rest of a block)
	rec    []byte // the multi-chunk record being assembled
	recAt  int64  // where it started
	inRec  bool
}

// NewReader reads records from r; name is used in errors (usually the file's path).
func NewReader(r io.Reader, name string) *Reader {
	return &Reader{r: r, name: name, buf: make([]byte, 64<<10)}
}

// Offset is the byte offset of the next unread chunk.
func (r *Reader) Offset() int64 { return r.off }

// fill makes pend hold at least n bytes; false when the data ends first.
func (r *Reader) fill(n int) (bool, error) {
	for len(r.pend) < n {
		k, err := r.r.Read(r.buf)
		r.pend = append(r.pend, r.buf[:k]...)
		if err == io.EOF || (k == 0 && err == nil) {
			return len(r.pend) >= n, nil
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w", r.name, err)
		}
	}
	return true, nil
}

func (r *Reader) consume(n int) {
	r.pend = r.pend[n:]
	r.off += int64(n)
	if len(r.pend) == 0 {
		r.pend = r.pend[:0:0] // let a long-followed file's buffer go
	}
}

// damaged drops the rest of the block holding the current offset and any record being
// assembled, and describes the damage.
func (r *Reader) damaged(at int64, reason string) error {
	r.skipTo = (at/blockSize + 1) * blockSize
	r.inRec, r.rec = false, nil
	return &CorruptError{Name: r.name, Offset: at, Reason: reason + "; the rest of its 32 KiB block is skipped", Skipped: true}
}

// Next returns the next record. At the end of the data it returns io.EOF when nothing is
// pending, an error wrapping ErrIncomplete when the data stops inside a record, a
// *CorruptError for damage, or ErrNotWandb.
func (r *Reader) Next() (Record, error) {
	b, at, err := r.nextRecord()
	if err != nil {
		return Record{}, err
	}
	rec, err := Decode(b)
	if err != nil {
		return Record{}, &CorruptError{Name: r.name, Offset: at, Reason: "record does not decode: " + err.Error(), Skipped: true}
	}
	return rec, nil
}

// nextRecord returns the bytes of the next whole record and its offset.
func (r *Reader) nextRecord() ([]byte, int64, error) {
	if !r.header {
		ok, err := r.fill(headerLen)
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			if len(r.pend) == 0 {
				return nil, 0, io.EOF
			}
			return nil, 0, fmt.Errorf("%s: %w (the 7-byte header)", r.name, ErrIncomplete)
		}
		h := r.pend[:headerLen]
		if [4]byte(h[:4]) != ident || binary.LittleEndian.Uint16(h[4:6]) != magic {
			return nil, 0, fmt.Errorf("%s: %w", r.name, ErrNotWandb)
		}
		if h[6] != version {
			return nil, 0, fmt.Errorf("%s: W&B log version %d; this reader knows version %d", r.name, h[6], version)
		}
		r.consume(headerLen)
		r.header = true
	}
	for {
		for r.off < r.skipTo {
			ok, err := r.fill(1)
			if err != nil {
				return nil, 0, err
			}
			if !ok {
				return nil, 0, io.EOF
			}
			r.consume(int(min(int64(len(r.pend)), r.skipTo-r.off)))
		}
		at := r.off
		left := blockSize - int(at%blockSize)
		if left < chunkHead { // the block's zero tail
			ok, err := r.fill(left)
			if err != nil {
				return nil, 0, err
			}
			if !ok {
				return nil, 0, r.end()
			}
			r.consume(left)
			continue
		}
		ok, err := r.fill(chunkHead)
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			return nil, 0, r.end()
		}
		sum := binary.LittleEndian.Uint32(r.pend[0:4])
		n := int(binary.LittleEndian.Uint16(r.pend[4:6]))
		typ := r.pend[6]
		if sum == 0 && n == 0 && typ == 0 {
			// Zeros where a chunk should be (a preallocated or zero-filled tail): skip the block.
			wasIn := r.inRec
			if err := r.damaged(at, "zero bytes where a chunk header should be"); wasIn {
				return nil, 0, err
			}
			continue
		}
		if chunkHead+n > left {
			return nil, 0, r.damaged(at, fmt.Sprintf("chunk length %d runs past its block", n))
		}
		ok, err = r.fill(chunkHead + n)
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			return nil, 0, fmt.Errorf("%s: at byte %d: %w", r.name, at, ErrIncomplete)
		}
		data := r.pend[chunkHead : chunkHead+n]
		if chunkCRC(typ, data) != sum {
			return nil, 0, r.damaged(at, "chunk checksum mismatch")
		}
		switch typ {
		case chunkFull:
			if r.inRec {
				r.inRec, r.rec = false, nil
				err := &CorruptError{Name: r.name, Offset: r.recAt, Reason: "a record's chunks stop before its last one (skipped)", Skipped: true}
				return nil, 0, err
			}
			out := append([]byte(nil), data...)
			r.consume(chunkHead + n)
			return out, at, nil
		case chunkFirst:
			stale := r.inRec
			r.rec, r.recAt, r.inRec = append(r.rec[:0], data...), at, true
			r.consume(chunkHead + n)
			if stale {
				return nil, 0, &CorruptError{Name: r.name, Offset: at, Reason: "a record's chunks stop before its last one (skipped)", Skipped: true}
			}
		case chunkMid, chunkLast:
			if !r.inRec {
				r.consume(chunkHead + n)
				return nil, 0, &CorruptError{Name: r.name, Offset: at, Reason: "a record's continuation without its start (skipped)", Skipped: true}
			}
			if len(r.rec)+n > MaxRecord {
				r.consume(chunkHead + n)
				r.inRec, r.rec = false, nil
				return nil, 0, &CorruptError{Name: r.name, Offset: r.recAt, Reason: fmt.Sprintf("a record longer than %d MiB (skipped)", MaxRecord>>20), Skipped: true}
			}
			r.rec = append(r.rec, data...)
			r.consume(chunkHead + n)
			if typ == chunkLast {
				out := r.rec
				r.rec, r.inRec = nil, false
				return out, r.recAt, nil
			}
		default:
			return nil, 0, r.damaged(at, fmt.Sprintf("unknown chunk type %d", typ))
		}
	}
}

// end is the error at the end of the data: io.EOF at a record boundary, else ErrIncomplete.
func (r *Reader) end() error {
	if len(r.pend) == 0 && !r.inRec {
		return io.EOF
	}
	return fmt.Errorf("%s: at byte %d: %w", r.name, r.off, ErrIncomplete)
}

// LogWriter frames records into a .wandb file (buffered: Flush pushes them out).
type LogWriter struct {
	w   *bufio.Writer
	off int64
}

// NewLogWriter writes the file header to w and returns a writer of records after it.
func NewLogWriter(w io.Writer) (*LogWriter, error) {
	lw := &LogWriter{w: bufio.NewWriterSize(w, 64<<10)}
	var h [headerLen]byte
	copy(h[:4], ident[:])
	binary.LittleEndian.PutUint16(h[4:6], magic)
	h[6] = version
	_, err := lw.w.Write(h[:])
	lw.off = headerLen
	return lw, err
}

// Write encodes and frames one record.
func (lw *LogWriter) Write(r Record) error { return lw.write(Encode(r)) }

// Flush writes what is buffered.
func (lw *LogWriter) Flush() error { return lw.w.Flush() }

// write frames one record: a full chunk when it fits the block, else first, middle…, last.
func (lw *LogWriter) write(data []byte) error {
	first := true
	for {
		left := blockSize - int(lw.off%blockSize)
		if left < chunkHead {
			if _, err := lw.w.Write(make([]byte, left)); err != nil {
				return err
			}
			lw.off += int64(left)
			continue
		}
		room := left - chunkHead
		n := min(room, len(data))
		last := n == len(data)
		var typ byte
		switch {
		case first && last:
			typ = chunkFull
		case first:
			typ = chunkFirst
		case last:
			typ = chunkLast
		default:
			typ = chunkMid
		}
		var h [chunkHead]byte
		binary.LittleEndian.PutUint32(h[0:4], chunkCRC(typ, data[:n]))
		binary.LittleEndian.PutUint16(h[4:6], uint16(n))
		h[6] = typ
		if _, err := lw.w.Write(h[:]); err != nil {
			return err
		}
		if _, err := lw.w.Write(data[:n]); err != nil {
			return err
		}
		lw.off += int64(chunkHead + n)
		data, first = data[n:], false
		if last {
			return nil
		}
	}
}
