package tensorboard

import (
	"encoding/json"
	"hash/crc32"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rlhfstation/internal/testref"
)

var (
	t0    = time.Unix(1700000000, 250_000_000)
	steps = []struct {
		step   int64
		values map[string]float64
	}{
		{1, map[string]float64{"reward": 0.5, "kl": 0.0125, "loss": -1.75, "ppl/word": 123.456}},
		{2, map[string]float64{"reward": 0.625, "grad_norm": math.NaN(), "mem/rss_bytes": 3.5e9}},
		{300, map[string]float64{"kl": math.Inf(1), "loss": math.Inf(-1), "rewards/ppl/mean": 1e-30}},
	}
)

func writeSample(t *testing.T) string {
	t.Helper()
	w, err := Create(filepath.Join(t.TempDir(), "tb"))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range steps {
		if err := w.Scalars(s.step, t0.Add(time.Duration(i)*time.Second), s.values); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	return w.Path()
}

func TestMaskedCRC(t *testing.T) {
	// CRC-32C check value of "123456789" (the Castagnoli polynomial's standard test vector).
	if got := crc32.Checksum([]byte("123456789"), castagnoli); got != 0xe3069283 {
		t.Fatalf("crc32c = %08x", got)
	}
	c := uint32(0xe3069283)
	want := ((c >> 15) | (c << 17)) + 0xa282ead8
	if got := maskedCRC([]byte("123456789")); got != want {
		t.Fatalf("masked = %08x, want %08x", got, want)
	}
}

func TestFileName(t *testing.T) {
	dir := t.TempDir()
	a, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	host, _ := os.Hostname()
	for _, w := range []*Writer{a, b} {
		name := filepath.Base(w.Path())
		if !strings.HasPrefix(name, "events.out.tfevents.") || !strings.Contains(name, "."+host) {
			t.Errorf("file name %q", name)
		}
	}
	if a.Path() == b.Path() {
		t.Fatalf("two writers share %s", a.Path())
	}
}

func TestRoundTrip(t *testing.T) {
	evs, err := ReadFile(writeSample(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1+len(steps) {
		t.Fatalf("%d events, want %d", len(evs), 1+len(steps))
	}
	if evs[0].FileVersion != FileVersion || len(evs[0].Values) != 0 {
		t.Fatalf("first event %+v", evs[0])
	}
	for i, s := range steps {
		ev := evs[i+1]
		if ev.Step != s.step || ev.WallTime != float64(t0.Unix()+int64(i))+0.25 {
			t.Errorf("event %d: step %d wall %v", i, ev.Step, ev.WallTime)
		}
		if len(ev.Values) != len(s.values) {
			t.Fatalf("event %d: %d values, want %d", i, len(ev.Values), len(s.values))
		}
		for j, v := range ev.Values {
			if j > 0 && ev.Values[j-1].Tag >= v.Tag {
				t.Errorf("tags not sorted: %q before %q", ev.Values[j-1].Tag, v.Tag)
			}
			want, ok := s.values[v.Tag]
			if !ok {
				t.Fatalf("unexpected tag %q", v.Tag)
			}
			if math.Float32bits(float32(v.Value)) != math.Float32bits(float32(want)) || v.Kind != Scalar {
				t.Errorf("%s = %v, want %v", v.Tag, v.Value, float32(want))
			}
		}
	}
}

func TestCorruptionDetected(t *testing.T) {
	data, err := os.ReadFile(writeSample(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{3, 9, 20, len(data) - 2} {
		bad := append([]byte(nil), data...)
		bad[at] ^= 0x40
		if _, err := Decode(bad); err == nil {
			t.Errorf("flipping byte %d went unnoticed", at)
		}
	}
	if _, err := Decode(data[:len(data)-1]); err == nil {
		t.Error("truncated file went unnoticed")
	}
}

// TestPythonReader reads the file with testdata/read_events.py, an independent implementation
// of the format (its own CRC-32C table and varint parser).
func TestPythonReader(t *testing.T) {
	py := testref.Python(t)
	path := writeSample(t)
	out, err := exec.Command(py, filepath.Join("testdata", "read_events.py"), path).Output()
	if err != nil {
		t.Fatalf("read_events.py: %v\n%s", err, stderrOf(err))
	}
	var doc struct {
		Events []struct {
			WallTime    float64 `json:"wall_time"`
			Step        int64   `json:"step"`
			FileVersion *string `json:"file_version"`
			Values      []struct {
				Tag  string `json:"tag"`
				Bits uint32 `json:"bits"`
				Repr string `json:"repr"`
			} `json:"values"`
		} `json:"events"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(doc.Events) != 1+len(steps) {
		t.Fatalf("python read %d events, want %d", len(doc.Events), 1+len(steps))
	}
	if v := doc.Events[0].FileVersion; v == nil || *v != FileVersion {
		t.Fatalf("python file_version %v", v)
	}
	reprs := map[string]string{}
	for i, s := range steps {
		ev := doc.Events[i+1]
		if ev.Step != s.step || ev.WallTime != float64(t0.Unix()+int64(i))+0.25 {
			t.Errorf("python event %d: step %d wall %v", i, ev.Step, ev.WallTime)
		}
		if len(ev.Values) != len(s.values) {
			t.Fatalf("python event %d: %d values, want %d", i, len(ev.Values), len(s.values))
		}
		for _, v := range ev.Values {
			want, ok := s.values[v.Tag]
			if !ok {
				t.Fatalf("python: unexpected tag %q", v.Tag)
			}
			if v.Bits != math.Float32bits(float32(want)) {
				t.Errorf("python %s bits %08x, want %08x", v.Tag, v.Bits, math.Float32bits(float32(want)))
			}
			reprs[v.Tag] = v.Repr
		}
	}
	if reprs["grad_norm"] != "nan" || reprs["kl"] != "inf" || reprs["loss"] != "-inf" || reprs["reward"] != "0.625" {
		t.Errorf("python values %v", reprs)
	}

	// The reader must reject a corrupted file, or the checks above prove little.
	data, _ := os.ReadFile(path)
	data[len(data)-6] ^= 1
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, data, 0o644)
	if err := exec.Command(py, filepath.Join("testdata", "read_events.py"), bad).Run(); err == nil {
		t.Error("python reader accepted a corrupted file")
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
