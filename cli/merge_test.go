package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/model"
	"rlhfstation/internal/testmodel"
	"rlhfstation/internal/testref"
)

// scoreJSON runs `score --json` and gives the scored sequence (context and text ids) and the
// log-prob of each text token (NaN where none).
func scoreJSON(t *testing.T, args ...string) ([]int, []float64) {
	t.Helper()
	code, stdout, stderr := runCaptured(t, append([]string{"score", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("score %v: exit %d: %s", args, code, stderr)
	}
	var doc struct {
		Texts []struct {
			Context  []int      `json:"context"`
			IDs      []int      `json:"ids"`
			LogProbs []*float64 `json:"logprobs"`
		} `json:"texts"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	x := doc.Texts[0]
	lps := make([]float64, len(x.LogProbs))
	for i, lp := range x.LogProbs {
		lps[i] = math.NaN()
		if lp != nil {
			lps[i] = *lp
		}
	}
	return append(append([]int{}, x.Context...), x.IDs...), lps
}

// `merge` writes a folder that `score` (and the independent PyTorch forward) score as
// `score --adapter` scores the unmerged base, within 1e-4; bad usage exits 2.
func TestMergeCommand(t *testing.T) {
	base := testmodel.Dir(t)
	m, err := model.Load(base)
	if err != nil {
		t.Fatal(err)
	}
	adapter := randomAdapter(t, m, 4, 8, false)
	out := filepath.Join(t.TempDir(), "merged")
	code, stdout, stderr := runCaptured(t, "merge", "--model", base, "--adapter", adapter, "--out", out, "--dtype", "f32", "--json")
	if code != 0 {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	var sum struct {
		Modules int    `json:"modules_merged"`
		DType   string `json:"dtype"`
		Shards  int    `json:"shards"`
	}
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil || sum.Modules != len(m.Linears()) || sum.DType != "float32" || sum.Shards != 1 {
		t.Fatalf("merge --json: %v %s", err, stdout)
	}
	text := "Question: Tom has 3 boxes of 12 apples. How many apples?\nAnswer: 36"
	seq, want := scoreJSON(t, "--model", base, "--adapter", adapter, text)
	_, got := scoreJSON(t, "--model", out, text) // the merged folder, tokenizer copied
	for i := range want {
		if d := math.Abs(got[i] - want[i]); d > 1e-4 || math.IsNaN(want[i]) != math.IsNaN(got[i]) {
			t.Errorf("token %d: merged folder %.6f, score --adapter %.6f", i, got[i], want[i])
		}
	}
	// The independent PyTorch forward on the merged folder.
	py := testref.Python(t)
	req, _ := json.Marshal(map[string]any{"jobs": []any{map[string]any{"dir": out, "seqs": [][]int{seq}}}})
	cmd := exec.Command(py, filepath.Join("..", "engine", "testdata", "folder_logprobs.py"))
	cmd.Stdin = bytes.NewReader(req)
	res, err := cmd.Output()
	if err != nil {
		t.Fatalf("folder_logprobs.py: %v", err)
	}
	var torch struct{ Results []struct{ LogP [][]float64 } }
	if err := json.Unmarshal(res, &torch); err != nil {
		t.Fatal(err)
	}
	ctx := len(seq) - len(want)
	for i, w := range want {
		if math.IsNaN(w) {
			continue
		}
		if d := math.Abs(torch.Results[0].LogP[0][ctx+i] - w); d > 1e-4 {
			t.Errorf("token %d: PyTorch on the merged folder %.6f, score --adapter %.6f", i, torch.Results[0].LogP[0][ctx+i], w)
		}
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"merge", "--model", base, "--out", out + "2"}, 2, "needs --adapter CKPT and --out DIR"},
		{[]string{"merge", "--model", base, "--adapter", adapter, "--out", out + "2", "--dtype", "int8"}, 2, `--dtype "int8"`},
		{[]string{"merge", "--model", base, "--adapter", adapter, "--out", out}, 1, "exists and is not empty"},
		{[]string{"merge", "--model", base, "--adapter", t.TempDir(), "--out", out + "2"}, 1, "not a checkpoint"},
	} {
		code, _, stderr := runCaptured(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
	if _, err := os.Stat(out + "2"); !os.IsNotExist(err) {
		t.Error("a refused merge left an output folder")
	}
}
