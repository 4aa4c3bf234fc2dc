// Package serve answers reward requests over HTTP in the shape of OpenRLHF's remote reward
// model (DESIGN §17), so that a run that outgrows one GPU moves to OpenRLHF or verl and keeps
// its rewards:
//
//	POST /get_reward {"query": [prompt+response, ...], "prompts": [...], "labels": [...]}
//	→ {"rewards": [...], "scores": [...], "extra_logs": {function: [...]}}
//
// Each completion is its query with the prompt taken off the front; a label is the ground
// truth of the correctness and NTL rewards. Requests that arrive while a batch is being scored
// are scored together as the next batch. GET /health says the server is up and what it
// serves. A malformed request gets 400 with the reason as {"error": "..."}; the server keeps
// serving.
package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"rlhfstation/rewards"
)

// Item is one completion to score.
type Item struct {
	Prompt     string
	Completion string
	Answer     string // the label as ground truth (rewards.GroundTruth); "" for none
}

// ScoreFunc scores a batch: Total and each function's values (NaN: not applicable), one per
// item, in order.
type ScoreFunc func(items []Item) (rewards.Result, error)

// Options tune a Server; zero values take the defaults.
type Options struct {
	MaxBodyBytes int64          // largest request body; default 64 MiB
	MaxBatch     int            // most texts scored in one batch; default 512
	Health       map[string]any // extra fields of GET /health (model, preset, functions…)
	Log          io.Writer      // one line per refused or failed request; nil: none
	// NeedLabels names the reward functions that score against a label (correctness, NTL):
	// a request without "labels" is refused with 400 instead of scoring them 0 unseen.
	NeedLabels []string
}

// DefaultMaxBodyBytes is the default request body limit.
const DefaultMaxBodyBytes = 64 << 20

// Server is the HTTP handler. Close it after the http.Server in front of it has shut down.
type Server struct {
	score ScoreFunc
	opts  Options
	jobs  chan *job
	quit  chan struct{}
	done  chan struct{}
	once  sync.Once
	logMu sync.Mutex
}

type job struct {
	items []Item
	reply chan result
}

type result struct {
	res rewards.Result
	err error
}

// New starts a server scoring with score.
func New(score ScoreFunc, o Options) *Server {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 512
	}
	s := &Server{score: score, opts: o, jobs: make(chan *job), quit: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

// Close stops the batching loop once its current batch is done; requests still waiting get 503.
func (s *Server) Close() {
	s.once.Do(func() { close(s.quit) })
	<-s.done
}

// loop scores batches: the first waiting request and every other one already waiting, up to
// MaxBatch texts (a request is never split).
func (s *Server) loop() {
	defer close(s.done)
	for {
		var batch []*job
		select {
		case j := <-s.jobs:
			batch = append(batch, j)
		case <-s.quit:
			return
		}
		n := len(batch[0].items)
	more:
		for n < s.opts.MaxBatch {
			select {
			case j := <-s.jobs:
				batch = append(batch, j)
				n += len(j.items)
			default:
				break more
			}
		}
		var items []Item
		for _, j := range batch {
			items = append(items, j.items...)
		}
		res, err := s.safeScore(items)
		off := 0
		for _, j := range batch {
			if err != nil {
				j.reply <- result{err: err}
				continue
			}
			j.reply <- result{res: slice(res, off, off+len(j.items))}
			off += len(j.items)
		}
	}
}

// safeScore turns a panic of the scorer into an error: one bad batch must not end the server.
func (s *Server) safeScore(items []Item) (res rewards.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("scoring failed: %v", r)
		}
	}()
	res, err = s.score(items)
	if err == nil && len(res.Total) != len(items) {
		err = fmt.Errorf("scoring gave %d rewards for %d texts", len(res.Total), len(items))
	}
	return res, err
}

// slice is the part [lo, hi) of a batch's result.
func slice(r rewards.Result, lo, hi int) rewards.Result {
	out := rewards.Result{Total: r.Total[lo:hi], ByFunc: map[string][]float64{}}
	for k, v := range r.ByFunc {
		out.ByFunc[k] = v[lo:hi]
	}
	return out
}

// ServeHTTP routes /get_reward and /health.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/get_reward":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			s.fail(w, r, http.StatusMethodNotAllowed, "use POST")
			return
		}
		s.getReward(w, r)
	case "/health":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			s.fail(w, r, http.StatusMethodNotAllowed, "use GET")
			return
		}
		h := map[string]any{"status": "ok"}
		for k, v := range s.opts.Health {
			h[k] = v
		}
		writeJSON(w, http.StatusOK, h)
	default:
		s.fail(w, r, http.StatusNotFound, "no such path: the reward endpoint is POST /get_reward, the health check GET /health")
	}
}

// request is the body of POST /get_reward.
type request struct {
	Query   *[]string `json:"query"`
	Prompts *[]string `json:"prompts"`
	Labels  *[]any    `json:"labels"`
}

// Response is the answer to POST /get_reward. rewards and scores are the preset's weighted
// sum r = Σ_f w_f r_f; extra_logs holds each reward function's own values, null where the
// function does not apply (a function that applies to none of the request's texts is left
// out, so that a trainer turning the lists into tensors never meets a null for one query).
type Response struct {
	Rewards   []*float64            `json:"rewards"`
	Scores    []*float64            `json:"scores"`
	ExtraLogs map[string][]*float64 `json:"extra_logs"`
}

func (s *Server) getReward(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > s.opts.MaxBodyBytes {
		s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("request body of %d bytes is over the limit of %d", r.ContentLength, s.opts.MaxBodyBytes))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("request body is over the limit of %d bytes", s.opts.MaxBodyBytes))
		} else {
			s.fail(w, r, http.StatusBadRequest, "reading the request body: "+err.Error())
		}
		return
	}
	items, err := parse(body, s.opts.NeedLabels)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	j := &job{items: items, reply: make(chan result, 1)}
	select {
	case s.jobs <- j:
	case <-s.quit:
		s.fail(w, r, http.StatusServiceUnavailable, "the server is shutting down")
		return
	}
	// The loop took the job (the channel is unbuffered): it answers it, even when closing.
	res := <-j.reply
	if res.err != nil {
		s.fail(w, r, http.StatusInternalServerError, res.err.Error())
		return
	}
	writeJSON(w, http.StatusOK, response(res.res))
}

// parse checks a request body and gives its items.
func parse(body []byte, needLabels []string) ([]Item, error) {
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("the request body is not valid UTF-8 (first bad byte at offset %d)", firstInvalid(body))
	}
	var req request
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&req); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field == "" { // the body itself: an array, a string…
			return nil, fmt.Errorf(`the request body is a JSON %s; it must be an object {"query": [...], "prompts": [...], "labels": [...]}`, typeErr.Value)
		}
		if errors.As(err, &typeErr) {
			return nil, fmt.Errorf(`"%s": a JSON %s where a list of strings belongs`, typeErr.Field, typeErr.Value)
		}
		return nil, fmt.Errorf(`the request body is not a JSON object {"query": [...], "prompts": [...], "labels": [...]}: %v`, err)
	}
	if dec.More() {
		return nil, errors.New("the request body holds more than one JSON value")
	}
	if req.Query == nil {
		return nil, errors.New(`the request has no "query" list (prompt + response texts)`)
	}
	q := *req.Query
	if req.Prompts != nil && len(*req.Prompts) != len(q) {
		return nil, fmt.Errorf("%d queries but %d prompts", len(q), len(*req.Prompts))
	}
	if req.Labels == nil && len(needLabels) > 0 && len(q) > 0 {
		return nil, fmt.Errorf(`the request has no "labels": %s score(s) each completion against its label (the ground truth); send one label per query, null where there is none`, strings.Join(needLabels, " and "))
	}
	if req.Labels != nil && len(*req.Labels) != len(q) {
		return nil, fmt.Errorf("%d queries but %d labels", len(q), len(*req.Labels))
	}
	items := make([]Item, len(q))
	for i, text := range q {
		items[i].Completion = text
		if req.Prompts != nil {
			p := (*req.Prompts)[i]
			c, ok := strings.CutPrefix(text, p)
			if !ok {
				return nil, fmt.Errorf("query %d does not start with prompt %d (the completion is the query with its prompt taken off the front)", i, i)
			}
			items[i].Prompt, items[i].Completion = p, c
		}
		if req.Labels != nil {
			switch l := (*req.Labels)[i].(type) {
			case nil:
			case string:
				items[i].Answer = rewards.GroundTruth(l)
			case json.Number:
				items[i].Answer = rewards.GroundTruth(l.String())
			default:
				return nil, fmt.Errorf("label %d is not a string, a number or null", i)
			}
		}
	}
	return items, nil
}

func firstInvalid(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// response builds the JSON answer of one request.
func response(r rewards.Result) Response {
	out := Response{Rewards: nums(r.Total), Scores: nums(r.Total), ExtraLogs: map[string][]*float64{}}
	names := make([]string, 0, len(r.ByFunc))
	for k := range r.ByFunc {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := nums(r.ByFunc[k])
		for _, x := range v {
			if x != nil {
				out.ExtraLogs[k] = v
				break
			}
		}
	}
	return out
}

// nums gives JSON numbers, null for NaN and ±Inf (which JSON cannot hold).
func nums(v []float64) []*float64 {
	out := make([]*float64, len(v))
	for i, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			x := x
			out[i] = &x
		}
	}
	return out
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// fail answers {"error": msg} with code and logs one line.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if s.opts.Log != nil {
		s.logMu.Lock()
		fmt.Fprintf(s.opts.Log, "serve-reward: %d to %s %s from %s: %s\n", code, r.Method, r.URL.Path, r.RemoteAddr, msg)
		s.logMu.Unlock()
	}
	writeJSON(w, code, map[string]string{"error": msg})
}
