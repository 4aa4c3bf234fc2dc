package wandb

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rlhfstation/internal/testref"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// writeRun writes a run of n steps; step 3's kl is NaN and, when long, step 4 carries a
// metric name long enough to make the record span blocks.
func writeRun(t *testing.T, n int, long bool) *Writer {
	t.Helper()
	w, err := Create(t.TempDir(), Run{ID: "abc12345", Name: "20260301-120000-math", Start: t0,
		Config: map[string]any{"learning_rate": 1e-5, "lora": map[string]any{"r": 16}, "preset": "math"}})
	if err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= n; s++ {
		m := map[string]float64{"reward": 0.1 * float64(s), "kl": 0.01 * float64(s)}
		if s == 3 {
			m["kl"] = math.NaN()
		}
		if long && s == 4 {
			m[strings.Repeat("k", 70000)] = 1
		}
		if err := w.Log(int64(s), t0.Add(time.Duration(s)*time.Second), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(0, t0.Add(time.Duration(n+1)*time.Second)); err != nil {
		t.Fatal(err)
	}
	return w
}

func readAll(t *testing.T, path string) ([]Record, []error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd := NewReader(f, path)
	var recs []Record
	var errs []error
	for {
		r, err := rd.Next()
		var ce *CorruptError
		switch {
		case err == nil:
			recs = append(recs, r)
			continue
		case errors.As(err, &ce) && ce.Skipped:
			errs = append(errs, err)
			continue
		case err != io.EOF:
			errs = append(errs, err)
		}
		return recs, errs
	}
}

func TestRoundTrip(t *testing.T) {
	w := writeRun(t, 5, true)
	if want := filepath.Join("wandb", "offline-run-20260301_120000-abc12345", "run-abc12345.wandb"); !strings.HasSuffix(w.Path(), want) {
		t.Fatalf("path %s, want …/%s", w.Path(), want)
	}
	for _, f := range []string{"config.yaml", "wandb-metadata.json"} {
		if _, err := os.Stat(filepath.Join(w.Dir(), "files", f)); err != nil {
			t.Error(err)
		}
	}
	fi, _ := os.Stat(w.Path())
	if fi.Size() < 2*blockSize {
		t.Fatalf("file of %d bytes: the long record should span blocks", fi.Size())
	}
	recs, errs := readAll(t, w.Path())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var kinds []string
	for _, r := range recs {
		kinds = append(kinds, r.Kind.String())
	}
	if got := strings.Join(kinds, " "); got != "run config history history history history history summary exit" {
		t.Fatalf("records: %s", got)
	}
	for i, r := range recs {
		if r.Num != int64(i+1) {
			t.Errorf("record %d num %d", i, r.Num)
		}
	}
	run := recs[0]
	if run.RunID != "abc12345" || run.Project != "rlhfstation" || run.DisplayName != "20260301-120000-math" || !run.StartTime.Equal(t0) {
		t.Errorf("run record %+v", run)
	}
	h := recs[4] // step 3
	vals := map[string]string{}
	for _, it := range h.Items {
		vals[it.Key] = it.ValueJSON
	}
	if h.Step != 3 || vals["kl"] != "NaN" || vals["reward"] != "0.30000000000000004" || vals["_step"] != "3" || vals["_runtime"] != "3" {
		t.Errorf("history step 3: %d %v", h.Step, vals)
	}
	if v, ok := Number(vals["kl"]); !ok || !math.IsNaN(v) {
		t.Errorf("kl NaN read as %v %v", v, ok)
	}
	sum := map[string]string{}
	for _, it := range recs[7].Items {
		sum[it.Key] = it.ValueJSON
	}
	if sum["reward"] != "0.5" || sum["_step"] != "5" {
		t.Errorf("summary %v", sum)
	}
	if recs[8].ExitCode != 0 || recs[8].Runtime != 6 {
		t.Errorf("exit %+v", recs[8])
	}
}

// TestCorruptBlockSkipped: a flipped byte costs the rest of its block, with a message; the
// records of the next blocks are read.
func TestCorruptBlockSkipped(t *testing.T) {
	w := writeRun(t, 5, true)
	data, _ := os.ReadFile(w.Path())
	// Damage a byte in the first block, inside the first history record.
	data[200] ^= 0x40
	bad := filepath.Join(t.TempDir(), "bad.wandb")
	os.WriteFile(bad, data, 0o644)
	recs, errs := readAll(t, bad)
	if len(errs) == 0 {
		t.Fatal("the damage went unnoticed")
	}
	var ce *CorruptError
	if !errors.As(errs[0], &ce) || !ce.Skipped || !strings.Contains(ce.Error(), "checksum") {
		t.Fatalf("first error %v", errs[0])
	}
	last := recs[len(recs)-1]
	if last.Kind != KindExit {
		t.Errorf("the records after the damaged block were not read: last is %v", last.Kind)
	}
	// A file that is not W&B's is refused, not skipped through.
	other := filepath.Join(t.TempDir(), "x.wandb")
	os.WriteFile(other, []byte("hello, world"), 0o644)
	if _, errs := readAll(t, other); len(errs) != 1 || !errors.Is(errs[0], ErrNotWandb) {
		t.Errorf("not a W&B file: %v", errs)
	}
}

// TestFollowGrowingFile: the file is handed to the reader a few bytes at a time, as a live
// writer appends it; every record arrives whole, once.
func TestFollowGrowingFile(t *testing.T) {
	w := writeRun(t, 5, true)
	data, _ := os.ReadFile(w.Path())
	live := filepath.Join(t.TempDir(), "live.wandb")
	f, _ := os.Create(live)
	defer f.Close()
	in, _ := os.Open(live)
	defer in.Close()
	rd := NewReader(in, live)
	var got []Kind
	for off := 0; off < len(data); {
		n := min(997, len(data)-off)
		f.Write(data[off : off+n])
		off += n
		for {
			r, err := rd.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, ErrIncomplete) {
					t.Fatalf("at %d: %v", off, err)
				}
				break
			}
			got = append(got, r.Kind)
		}
	}
	if len(got) != 9 || got[8] != KindExit || got[5] != KindHistory {
		t.Fatalf("followed records %v", got)
	}
}

// TestPythonFraming: a file rlhfstation writes is read by a framing reader written apart and
// records decoded by classes protoc makes from W&B's field numbers; a file that reader's writer
// makes is read here.
func TestPythonFraming(t *testing.T) {
	py := testref.Python3(t)
	if exec.Command(py, "-c", "import google.protobuf").Run() != nil {
		testref.Missing(t, "python3 cannot import google.protobuf (apt-get install python3-protobuf)")
	}
	if _, err := exec.LookPath("protoc"); err != nil {
		testref.Missing(t, "no protoc (apt-get install protobuf-compiler)")
	}
	w := writeRun(t, 5, true)
	out, err := exec.Command(py, filepath.Join("testdata", "wandb_check.py"), "read", w.Path()).Output()
	if err != nil {
		t.Fatalf("wandb_check.py read: %v\n%s", err, stderr(err))
	}
	var doc struct {
		Records []struct {
			Num      int64       `json:"num"`
			Kind     string      `json:"kind"`
			RunID    string      `json:"run_id"`
			Start    int64       `json:"start"`
			Step     int64       `json:"step"`
			Items    [][2]string `json:"items"`
			Config   [][2]string `json:"config"`
			ExitCode int32       `json:"exit_code"`
			Runtime  int32       `json:"runtime"`
		} `json:"records"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range doc.Records {
		kinds = append(kinds, r.Kind)
	}
	if got := strings.Join(kinds, " "); got != "run config history history history history history summary exit" {
		t.Fatalf("python read: %s", got)
	}
	rr := doc.Records[0]
	if rr.RunID != "abc12345" || rr.Start != t0.Unix() || len(rr.Config) != 3 || rr.Config[0] != [2]string{"learning_rate", "0.00001"} {
		t.Errorf("python run record %+v", rr)
	}
	h := doc.Records[4]
	vals := map[string]string{}
	for _, it := range h.Items {
		vals[it[0]] = it[1]
	}
	if h.Step != 3 || vals["kl"] != "NaN" || vals["reward"] != "0.30000000000000004" {
		t.Errorf("python history %d %v", h.Step, vals)
	}
	if e := doc.Records[8]; e.ExitCode != 0 || e.Runtime != 6 {
		t.Errorf("python exit %+v", e)
	}

	// The other way: Python's file read here.
	pyFile := filepath.Join(t.TempDir(), "run-py3abc12.wandb")
	if out, err := exec.Command(py, filepath.Join("testdata", "wandb_check.py"), "write", pyFile).CombinedOutput(); err != nil {
		t.Fatalf("wandb_check.py write: %v\n%s", err, out)
	}
	recs, errs := readAll(t, pyFile)
	if len(errs) > 0 || len(recs) != 8 {
		t.Fatalf("%d records, errors %v", len(recs), errs)
	}
	if recs[0].RunID != "py3abc12" || recs[0].DisplayName != "python-written" || recs[7].Kind != KindExit {
		t.Errorf("records %+v … %+v", recs[0], recs[7])
	}
	var kl float64
	var note int
	for _, it := range recs[4].Items {
		if it.Key == "train/kl" {
			kl, _ = it.Number()
		}
	}
	for _, it := range recs[5].Items {
		if it.Key == "note" {
			note = len(it.ValueJSON)
		}
	}
	if recs[4].Step != 3 || !math.IsNaN(kl) || note != 70002 {
		t.Errorf("step %d kl %v note %d", recs[4].Step, kl, note)
	}

	// The Python reader must refuse damage, or its agreement proves little.
	data, _ := os.ReadFile(w.Path())
	data[len(data)-3] ^= 1
	bad := filepath.Join(t.TempDir(), "bad.wandb")
	os.WriteFile(bad, data, 0o644)
	if exec.Command(py, filepath.Join("testdata", "wandb_check.py"), "read", bad).Run() == nil {
		t.Error("the python reader accepted a damaged file")
	}
}

func stderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
