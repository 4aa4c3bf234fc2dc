// Package env runs environments for multi-turn and tool-calling rollouts (DESIGN §17): the
// protocol client of an environment process, the tool-call parsers of the chat templates'
// formats, and the incremental rendering of an episode's turns.
//
// An environment is a long-lived subprocess speaking JSON lines. Each request is one line on
// its standard input and each reply one line on its standard output carrying the request's
// id; the requests of a batch (one per episode in flight) are written together and the
// replies may come in any order:
//
//	{"op": "reset", "id": "e3", "example": {<the dataset entry's columns>}}
//	    → {"id": "e3", "messages": [...], "tools": [<JSON schemas>]}
//	{"op": "step", "id": "e3", "message": {"role": "assistant", "content": ..., "tool_calls": [...]}}
//	    → {"id": "e3", "messages": [<tool or user messages>], "done": false, "reward": 0.5, "metrics": {...}}
//	{"op": "reward", "id": "r1", "ids": ["e3", "e4"]}
//	    → {"id": "r1", "rewards": {"correct": [1, null], ...}}
//
// A reply may instead be {"id": ..., "error": "message"}: that episode fails (scored as not
// applicable) and the others go on. A crash, a malformed reply or a batch not answered within
// the timeout fails every episode of the batch; the process is restarted for the next batch,
// and a second such failure in a row is an *Error, which stops the run.
package env

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultTimeout bounds one batch of requests unless configured.
const DefaultTimeout = 60 * time.Second

// maxLine bounds one reply line.
const maxLine = 64 << 20

// stderrLines is how many of its last standard-error lines a failure carries.
const stderrLines = 20

// Request is one request line.
type Request struct {
	Op      string         `json:"op"`
	ID      string         `json:"id"`
	Example map[string]any `json:"example,omitempty"`
	Message map[string]any `json:"message,omitempty"`
	IDs     []string       `json:"ids,omitempty"`
}

// Reply is one reply line, decoded.
type Reply struct {
	ID       string                `json:"id"`
	Error    string                `json:"error,omitempty"`
	Messages []map[string]any      `json:"messages,omitempty"`
	Tools    []any                 `json:"tools,omitempty"`
	Done     bool                  `json:"done,omitempty"`
	Reward   *float64              `json:"reward,omitempty"`
	Metrics  map[string]float64    `json:"metrics,omitempty"`
	Rewards  map[string][]*float64 `json:"rewards,omitempty"`
}

// Failure is one failure of an environment: of one episode (an error reply) or of the
// process over a batch (crash, timeout, malformed reply).
type Failure struct {
	Env    string   // the environment's name
	Kind   string   // "error", "crash", "timeout" or "malformed"
	Detail string   // what happened
	Stderr []string // the process's last lines on standard error
	IDs    []string // the episodes it failed
}

func (f Failure) Error() string {
	return fmt.Sprintf("environment %s: %s: %s", f.Env, f.Kind, f.Detail)
}

// Message is the failure for people, with the process's last stderr lines.
func (f Failure) Message() string {
	var b strings.Builder
	fmt.Fprintf(&b, "environment %s: %s (%s); %d episode(s) scored as not applicable", f.Env, f.Detail, f.Kind, len(f.IDs))
	if f.Kind != KindError {
		b.WriteString("; the process is restarted")
	}
	if len(f.Stderr) > 0 {
		b.WriteString("\nlast lines on stderr:")
		for _, l := range f.Stderr {
			b.WriteString("\n  " + l)
		}
	}
	return b.String()
}

// Failure kinds.
const (
	KindError     = "error"
	KindCrash     = "crash"
	KindTimeout   = "timeout"
	KindMalformed = "malformed"
)

// Error is an environment whose process failed on two batches in a row: the run stops.
type Error struct{ First, Second Failure }

func (e *Error) Error() string {
	return fmt.Sprintf("environment %s failed twice in a row (%s: %s, then after a restart %s: %s)",
		e.First.Env, e.First.Kind, e.First.Detail, e.Second.Kind, e.Second.Detail)
}

// Client talks to one environment process. Create it with New; Close it at the end.
type Client struct {
	Name    string
	argv    []string
	timeout time.Duration
	// OnFailure, when set, is told of every failure as it happens.
	OnFailure func(Failure)
	// Log, when set, receives a copy of the process's standard error.
	Log io.Writer

	mu   sync.Mutex
	proc *proc
	last *Failure // the previous batch's process failure, nil after a batch that went well
}

// New makes the client of the environment name running argv (timeout ≤ 0: the default).
func New(name string, argv []string, timeout time.Duration) (*Client, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("environment %s: the command is empty", name)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{Name: name, argv: append([]string(nil), argv...), timeout: timeout}, nil
}

// Start launches the process, so that a missing program is reported before the first batch.
func (c *Client) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		return nil
	}
	p, err := c.start()
	c.proc = p
	return err
}

// Close ends the process (standard input closed; killed after a grace period).
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		c.proc.stop(3 * time.Second)
		c.proc = nil
	}
	return nil
}

// Do sends a batch of requests and returns the replies by request id. Episodes whose request
// failed (an error reply, or the whole batch when the process failed) have a Reply with Error
// set. The error is non-nil only when the process failed on this batch and the one before
// (*Error): the caller stops.
func (c *Client) Do(reqs []Request) (map[string]Reply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]Reply, len(reqs))
	if len(reqs) == 0 {
		return out, nil
	}
	f := c.exchange(reqs, out)
	if f == nil {
		c.last = nil
		for _, r := range reqs {
			if rep := out[r.ID]; rep.Error != "" && c.OnFailure != nil {
				c.OnFailure(Failure{Env: c.Name, Kind: KindError, Detail: rep.Error, IDs: []string{r.ID}})
			}
		}
		return out, nil
	}
	// The process is in an unknown state: it is replaced at the next batch.
	if c.proc != nil {
		c.proc.stop(0)
		f.Stderr = c.proc.stderr.lines()
		c.proc = nil
	}
	for _, r := range reqs {
		if rep, ok := out[r.ID]; !ok || rep.Error == "" {
			out[r.ID] = Reply{ID: r.ID, Error: f.Detail}
			f.IDs = append(f.IDs, r.ID)
		}
	}
	if c.OnFailure != nil {
		c.OnFailure(*f)
	}
	if c.last != nil {
		return out, &Error{First: *c.last, Second: *f}
	}
	c.last = f
	return out, nil
}

// exchange writes the batch and reads one reply per request into out.
func (c *Client) exchange(reqs []Request, out map[string]Reply) *Failure {
	if c.proc == nil {
		p, err := c.start()
		if err != nil {
			return &Failure{Env: c.Name, Kind: KindCrash, Detail: "starting: " + err.Error()}
		}
		c.proc = p
	}
	p := c.proc
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	want := map[string]bool{}
	for _, r := range reqs {
		if err := enc.Encode(r); err != nil {
			return &Failure{Env: c.Name, Kind: KindMalformed, Detail: fmt.Sprintf("encoding request %s: %v", r.ID, err)}
		}
		want[r.ID] = true
	}
	written := make(chan error, 1)
	go func() {
		_, err := p.stdin.Write(buf.Bytes())
		written <- err
	}()
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	for len(want) > 0 {
		select {
		case err := <-written:
			if err != nil {
				return &Failure{Env: c.Name, Kind: KindCrash, Detail: p.exitDetail("could not take the requests: " + err.Error())}
			}
			written = nil
		case r, ok := <-p.replies:
			if !ok || r.err != nil {
				if r.err != nil && errors.Is(r.err, bufio.ErrBufferFull) {
					return &Failure{Env: c.Name, Kind: KindMalformed, Detail: fmt.Sprintf("a reply line longer than %d MiB", maxLine>>20)}
				}
				return &Failure{Env: c.Name, Kind: KindCrash, Detail: p.exitDetail("closed its standard output")}
			}
			var rep Reply
			if err := json.Unmarshal(r.line, &rep); err != nil {
				return &Failure{Env: c.Name, Kind: KindMalformed, Detail: fmt.Sprintf("the reply is not the expected JSON object: %v; reply: %s", err, excerpt(r.line))}
			}
			if !want[rep.ID] {
				return &Failure{Env: c.Name, Kind: KindMalformed, Detail: fmt.Sprintf("a reply for id %q, which no request of the batch has; reply: %s", rep.ID, excerpt(r.line))}
			}
			delete(want, rep.ID)
			out[rep.ID] = rep
		case <-timer.C:
			return &Failure{Env: c.Name, Kind: KindTimeout, Detail: fmt.Sprintf("%d of %d replies missing after %s", len(want), len(reqs), c.timeout)}
		}
	}
	return nil
}

func excerpt(b []byte) string {
	const max = 200
	s := strings.TrimSpace(string(b))
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// proc is one run of the environment's process.
type proc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies chan reply
	stderr  *tail
	done    chan struct{}
	waitErr error
}

type reply struct {
	line []byte
	err  error
}

func (c *Client) start() (*proc, error) {
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("environment %s: starting %q: %w", c.Name, strings.Join(c.argv, " "), err)
	}
	p := &proc{cmd: cmd, stdin: stdin, replies: make(chan reply, 64), stderr: &tail{}, done: make(chan struct{})}
	go func() {
		r := bufio.NewReaderSize(stdout, 1<<16)
		for {
			line, err := readLine(r)
			if err != nil {
				p.replies <- reply{err: err}
				close(p.replies)
				return
			}
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			p.replies <- reply{line: line}
		}
	}()
	log := c.Log
	go func() {
		s := bufio.NewScanner(stderr)
		s.Buffer(make([]byte, 1<<16), 1<<20)
		for s.Scan() {
			p.stderr.add(s.Text())
			if log != nil {
				fmt.Fprintf(log, "[env %s] %s\n", c.Name, s.Text())
			}
		}
	}()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// readLine reads one line of any length up to maxLine.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxLine {
			return nil, bufio.ErrBufferFull
		}
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if len(bytes.TrimSpace(line)) > 0 && errors.Is(err, io.EOF) {
				return line, nil
			}
			return nil, err
		}
	}
}

// exitDetail says how the process ended, when it has.
func (p *proc) exitDetail(what string) string {
	select {
	case <-p.done:
		if p.waitErr != nil {
			return what + " (" + p.waitErr.Error() + ")"
		}
		return what + " (exited)"
	case <-time.After(200 * time.Millisecond):
		return what
	}
}

// stop closes standard input and kills the process group after grace.
func (p *proc) stop(grace time.Duration) {
	p.stdin.Close()
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	if p.cmd.Process != nil {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.done
}

// tail keeps the last stderrLines lines.
type tail struct {
	mu sync.Mutex
	l  []string
}

func (t *tail) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.l = append(t.l, s)
	if len(t.l) > stderrLines {
		t.l = t.l[len(t.l)-stderrLines:]
	}
}

func (t *tail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.l...)
}
