package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"rlhfstation/rewards"
)

// fakeScore gives each item len(completion) as "len", and 1 as "answer" when its answer is
// set (NaN otherwise); the total is their sum.
type fakeScore struct {
	mu      sync.Mutex
	batches []int
	gate    chan struct{} // when set, each batch waits for a value
	fail    string        // "error" or "panic" for completions equal to it
}

func (f *fakeScore) score(items []Item) (rewards.Result, error) {
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	f.batches = append(f.batches, len(items))
	f.mu.Unlock()
	res := rewards.Result{Total: make([]float64, len(items)), ByFunc: map[string][]float64{"len": make([]float64, len(items)), "answer": make([]float64, len(items)), "never": make([]float64, len(items))}}
	for i, it := range items {
		switch {
		case f.fail != "" && it.Completion == f.fail && f.fail == "panic":
			panic("scorer exploded")
		case f.fail != "" && it.Completion == f.fail:
			return rewards.Result{}, errors.New("scorer failed")
		}
		res.ByFunc["len"][i] = float64(len(it.Completion))
		res.ByFunc["answer"][i] = math.NaN()
		res.ByFunc["never"][i] = math.NaN()
		res.Total[i] = float64(len(it.Completion))
		if it.Answer != "" {
			res.ByFunc["answer"][i] = 1
			res.Total[i]++
		}
	}
	return res, nil
}

func post(t *testing.T, url string, body []byte) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+"/get_reward", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("status %d, body %q is not JSON: %v", resp.StatusCode, b, err)
	}
	return resp.StatusCode, out
}

func newServer(t *testing.T, f *fakeScore, o Options) (*Server, *httptest.Server) {
	s := New(f.score, o)
	ts := httptest.NewServer(s)
	t.Cleanup(func() { ts.Close(); s.Close() })
	return s, ts
}

func TestGetReward(t *testing.T) {
	f := &fakeScore{}
	_, ts := newServer(t, f, Options{Health: map[string]any{"preset": "math"}})
	code, out := post(t, ts.URL, []byte(`{"query": ["Q: 2+2? A: 4", "Hi there", "x"], "prompts": ["Q: 2+2? A:", "Hi", ""], "labels": ["#### 1,004", null, 7]}`))
	if code != 200 {
		t.Fatalf("status %d: %v", code, out)
	}
	want := `{"extra_logs":{"answer":[1,null,1],"len":[2,6,1]},"rewards":[3,6,2],"scores":[3,6,2]}`
	if b, _ := json.Marshal(out); string(b) != want {
		t.Errorf("response %s\nwant     %s", b, want)
	}
	// The label is the ground truth as the data reader normalises it.
	items, _ := parse([]byte(`{"query": ["a"], "prompts": [""], "labels": ["... #### $1,004"]}`), nil)
	if items[0].Answer != "1004" {
		t.Errorf("answer %q", items[0].Answer)
	}
	// prompts and labels may be left out; an empty list gets empty lists.
	if code, out := post(t, ts.URL, []byte(`{"query": ["abc"]}`)); code != 200 || out["rewards"].([]any)[0] != 3.0 {
		t.Errorf("query only: %d %v", code, out)
	}
	if code, out := post(t, ts.URL, []byte(`{"query": [], "prompts": [], "labels": []}`)); code != 200 || len(out["rewards"].([]any)) != 0 {
		t.Errorf("empty: %d %v", code, out)
	}
	resp, err := http.Get(ts.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if resp.StatusCode != 200 || h["status"] != "ok" || h["preset"] != "math" {
		t.Errorf("health %d %v", resp.StatusCode, h)
	}
}

func TestBadRequestsGet400AndTheServerKeepsServing(t *testing.T) {
	f := &fakeScore{}
	var log bytes.Buffer
	var logMu sync.Mutex
	_, ts := newServer(t, f, Options{MaxBodyBytes: 1 << 20, Log: lockedWriter{&logMu, &log}})
	cases := []struct {
		name, body, reason string
	}{
		{"invalid JSON", `{"query": ["a", }`, "not a JSON object"},
		{"not an object", `["a"]`, "the request body is a JSON array; it must be an object {"},
		{"empty list", `[]`, "the request body is a JSON array; it must be an object {"},
		{"two values", `{"query": []} {}`, "more than one JSON value"},
		{"no query", `{"prompts": ["a"]}`, `no "query" list`},
		{"query of numbers", `{"query": [1, 2]}`, `"query": a JSON number where a list of strings belongs`},
		{"lengths", `{"query": ["a", "b"], "prompts": ["a"], "labels": ["1", "2"]}`, "2 queries but 1 prompts"},
		{"label lengths", `{"query": ["a", "b"], "prompts": ["a", "b"], "labels": ["1"]}`, "2 queries but 1 labels"},
		{"prompt not a prefix", `{"query": ["hello"], "prompts": ["bye"]}`, "query 0 does not start with prompt 0"},
		{"label type", `{"query": ["a"], "labels": [[1]]}`, "label 0 is not a string"},
		{"non-UTF-8", "{\"query\": [\"caf\xe9\"]}", "not valid UTF-8 (first bad byte at offset 15)"},
	}
	for _, c := range cases {
		code, out := post(t, ts.URL, []byte(c.body))
		if strings.Contains(fmt.Sprint(out["error"]), "serve.") {
			t.Errorf("%s: the error names a Go type: %v", c.name, out["error"])
		}
		if code != 400 || !strings.Contains(fmt.Sprint(out["error"]), c.reason) {
			t.Errorf("%s: status %d, %v; want 400 with %q", c.name, code, out, c.reason)
		}
		// ...and it keeps answering.
		if code, out := post(t, ts.URL, []byte(`{"query": ["ok"]}`)); code != 200 || out["rewards"].([]any)[0] != 2.0 {
			t.Fatalf("after %s: %d %v", c.name, code, out)
		}
	}
	// 100 MB, streamed: announced (refused before reading) and chunked (refused at the limit).
	for _, announced := range []bool{true, false} {
		body := io.MultiReader(strings.NewReader(`{"query": ["`), io.LimitReader(repeat('a'), 100<<20), strings.NewReader(`"]}`))
		req, _ := http.NewRequest("POST", ts.URL+"/get_reward", body)
		if announced {
			req.ContentLength = 100<<20 + 15
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("100 MB body (length announced %v): %v", announced, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "over the limit of 1048576") {
			t.Errorf("100 MB body (length announced %v): %d %s", announced, resp.StatusCode, b)
		}
		if code, _ := post(t, ts.URL, []byte(`{"query": ["ok"]}`)); code != 200 {
			t.Fatalf("after 100 MB: %d", code)
		}
	}
	for _, c := range []struct{ method, path string }{{"GET", "/get_reward"}, {"POST", "/health"}, {"GET", "/nope"}} {
		req, _ := http.NewRequest(c.method, ts.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 && resp.StatusCode != 404 {
			t.Errorf("%s %s: %d", c.method, c.path, resp.StatusCode)
		}
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(log.String(), "serve-reward: 400 to POST /get_reward") {
		t.Errorf("log %q", log.String())
	}
}

// repeat is an endless reader of one byte.
type repeat byte

func (r repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestScorerFailuresAre500AndTheServerGoesOn(t *testing.T) {
	for _, mode := range []string{"error", "panic"} {
		f := &fakeScore{fail: mode}
		_, ts := newServer(t, f, Options{})
		code, out := post(t, ts.URL, []byte(`{"query": ["`+mode+`"]}`))
		if code != 500 || !strings.Contains(fmt.Sprint(out["error"]), "scor") {
			t.Errorf("%s: %d %v", mode, code, out)
		}
		if code, _ := post(t, ts.URL, []byte(`{"query": ["fine"]}`)); code != 200 {
			t.Errorf("%s: then %d", mode, code)
		}
	}
}

// Requests that arrive while a batch is scored go together into the next one, each getting
// its own texts' rewards back.
func TestConcurrentRequestsAreBatched(t *testing.T) {
	f := &fakeScore{gate: make(chan struct{})}
	_, ts := newServer(t, f, Options{})
	var wg sync.WaitGroup
	first := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		close(first)
		if code, out := post(t, ts.URL, []byte(`{"query": ["a"]}`)); code != 200 || out["rewards"].([]any)[0] != 1.0 {
			t.Errorf("first: %d %v", code, out)
		}
	}()
	<-first
	time.Sleep(100 * time.Millisecond) // the first request is being scored (held at the gate)
	for i := 1; i <= 6; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			q := []string{strings.Repeat("x", i), strings.Repeat("y", 10*i)}
			body, _ := json.Marshal(map[string]any{"query": q})
			code, out := post(t, ts.URL, body)
			r := out["rewards"].([]any)
			if code != 200 || r[0] != float64(i) || r[1] != float64(10*i) {
				t.Errorf("request %d: %d %v", i, code, out)
			}
		}(i)
	}
	time.Sleep(300 * time.Millisecond) // the six wait behind the gate
	close(f.gate)
	wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.batches) != 2 || f.batches[0] != 1 || f.batches[1] != 12 {
		t.Errorf("batches %v, want [1 12]", f.batches)
	}
}

// A preset that scores against labels refuses a request without them instead of scoring
// correctness 0 unseen; with labels (null where there is none) it answers.
func TestMissingLabelsAre400WhenThePresetNeedsThem(t *testing.T) {
	_, ts := newServer(t, &fakeScore{}, Options{NeedLabels: []string{"correctness"}})
	code, out := post(t, ts.URL, []byte(`{"query": ["1 + 1 = 2"]}`))
	if code != 400 || !strings.Contains(fmt.Sprint(out["error"]), `no "labels": correctness score(s) each completion against its label`) {
		t.Fatalf("no labels: %d %v", code, out)
	}
	if code, out := post(t, ts.URL, []byte(`{"query": ["1 + 1 = 2"], "labels": [null]}`)); code != 200 {
		t.Fatalf("labels given: %d %v", code, out)
	}
}
