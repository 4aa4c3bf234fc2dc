package rewards

// Reward functions of kind "command" (DESIGN §17): a long-lived subprocess that speaks JSON
// lines. Each batch is one request line on its standard input,
//
//	{"step": 12, "prompts": [...], "completions": [...], "completion_ids": [[...]],
//	 "answers": [...], <each other dataset column>: [...]}
//
// and one reply line on its standard output,
//
//	{"rewards": [number or null, ...], "metrics": {"name": number, ...}}
//
// null meaning "not applicable" as TRL's None does. The process's standard error is kept (its
// last lines explain failures) and copied to the writer given to SetLog. A crash, a reply that
// does not come within the timeout, or a malformed reply is reported to OnFailure; the process
// is restarted and the batch sent again once, and a second failure in a row is a *CommandError.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Keys of a command request. A dataset column of one of these names cannot be passed on.
var ReservedColumns = []string{"step", "prompts", "completions", "completion_ids", "answers"}

// DefaultCommandTimeout is how long a command may take over one batch unless configured.
const DefaultCommandTimeout = 60 * time.Second

// maxReplyBytes bounds one reply line.
const maxReplyBytes = 64 << 20

// stderrLines is how many of its last standard-error lines a failure report carries.
const stderrLines = 20

// commandName is what a command reward may be called: it becomes part of metric names.
var commandName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// BuiltInNames are the names of the built-in reward functions, which commands cannot take.
var BuiltInNames = []string{"ppl", "ntl", "correctness", "format"}

// CheckCommandName reports whether name can name a command reward.
func CheckCommandName(name string) error {
	if !commandName.MatchString(name) || len(name) > 64 {
		return fmt.Errorf("reward name %q: use up to 64 letters, digits, '_', '-' and '.', starting with a letter, digit or '_'", name)
	}
	for _, b := range BuiltInNames {
		if name == b {
			return fmt.Errorf("reward name %q is taken by the built-in reward function", name)
		}
	}
	return nil
}

// Command is a reward function computed by a subprocess. Create it with NewCommand, Start it
// before the first batch and Close it at the end. Score may be called from several goroutines:
// batches are sent one at a time.
type Command struct {
	name    string
	argv    []string
	timeout time.Duration

	// OnFailure, when set, is told of each failure as it happens (before the restart).
	OnFailure func(CommandFailure)

	mu   sync.Mutex
	proc *process
	ctx  context.Context // nil: never cancelled

	logMu sync.Mutex
	log   io.Writer
}

// SetLog makes w receive a copy of everything the process writes on standard error (nil: none).
func (c *Command) SetLog(w io.Writer) {
	c.logMu.Lock()
	c.log = w
	c.logMu.Unlock()
}

func (c *Command) writeLog(line string) {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	if c.log != nil {
		io.WriteString(c.log, line)
	}
}

// NewCommand makes the reward function name running argv; timeout ≤ 0 means the default.
func NewCommand(name string, argv []string, timeout time.Duration) (*Command, error) {
	if err := CheckCommandName(name); err != nil {
		return nil, err
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("reward %s: the command is empty", name)
	}
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	return &Command{name: name, argv: append([]string(nil), argv...), timeout: timeout}, nil
}

// Name is the configured name.
func (c *Command) Name() string { return c.name }

// SetContext makes a batch in progress end when ctx is done (an interrupted run): Score then
// returns ctx's error, which is not a failure of the command (nothing is reported or restarted;
// the process, in an unknown state, is replaced at the next batch).
func (c *Command) SetContext(ctx context.Context) {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
}

// Argv is the command line.
func (c *Command) Argv() []string { return append([]string(nil), c.argv...) }

// Start launches the process (a missing program is reported here, before any batch).
func (c *Command) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		return nil
	}
	p, err := c.start()
	if err != nil {
		return err
	}
	c.proc = p
	return nil
}

// Close ends the process: its standard input is closed, and it is killed when it has not
// exited within a few seconds.
func (c *Command) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return nil
	}
	c.proc.stop(closeGrace)
	c.proc = nil
	return nil
}

// closeGrace is how long Close waits for the process to exit on its own.
var closeGrace = 3 * time.Second

// CommandFailure is one failure of a command reward.
type CommandFailure struct {
	Name   string   // the reward's name
	Kind   string   // "crash", "timeout" or "malformed"
	Detail string   // what happened: "exit status 1", "no reply within 1m0s", …
	Stderr []string // the process's last lines on standard error, oldest first
	Step   int      // the step of the batch
	Retry  bool     // the process is restarted and the batch sent again
}

// Failure kinds.
const (
	FailCrash     = "crash"
	FailTimeout   = "timeout"
	FailMalformed = "malformed"
	failCancelled = "cancelled" // the context ended: not a failure of the command
)

func (f CommandFailure) Error() string {
	return fmt.Sprintf("reward command %s: %s: %s", f.Name, f.Kind, f.Detail)
}

// Message is the failure in a few lines for people: what happened, what follows, and the
// process's last stderr lines.
func (f CommandFailure) Message() string {
	var b strings.Builder
	fmt.Fprintf(&b, "reward %s: %s (%s)", f.Name, f.Detail, f.Kind)
	if f.Retry {
		b.WriteString("; restarting the command and sending the batch again")
	}
	if len(f.Stderr) == 0 {
		b.WriteString("\nno output on stderr")
	} else {
		b.WriteString("\nlast lines on stderr:")
		for _, l := range f.Stderr {
			b.WriteString("\n  " + l)
		}
	}
	return b.String()
}

// CommandError is a command reward that failed twice in a row on one batch.
type CommandError struct {
	First, Second CommandFailure
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("reward command %s failed twice in a row (%s: %s, then after a restart %s: %s)",
		e.First.Name, e.First.Kind, e.First.Detail, e.Second.Kind, e.Second.Detail)
}

// Score sends the batch and returns the rewards (NaN for null) and the reply's metrics as
// rewards/<name>/<metric>.
func (c *Command) Score(samples []Sample) ([]float64, map[string]float64, error) {
	req, err := c.request(samples)
	if err != nil {
		return nil, nil, err
	}
	step := 0
	if len(samples) > 0 {
		step = samples[0].Step
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var first *CommandFailure
	for attempt := 0; attempt < 2; attempt++ {
		if c.proc == nil {
			p, err := c.start()
			if err != nil {
				f := CommandFailure{Name: c.name, Kind: FailCrash, Detail: "restarting: " + err.Error(), Step: step}
				return nil, nil, c.fail(first, f)
			}
			c.proc = p
		}
		values, metrics, f := c.exchange(req, len(samples))
		if f == nil {
			return values, metrics, nil
		}
		if f.Kind == failCancelled {
			c.proc.stop(0)
			c.proc = nil
			return nil, nil, c.ctx.Err()
		}
		f.Step = step
		// The process is in an unknown state after any failure: it is replaced.
		c.proc.stop(0)
		f.Stderr = c.proc.stderr.lines()
		c.proc = nil
		if first != nil {
			return nil, nil, c.fail(first, *f)
		}
		f.Retry = true
		first = f
		if c.OnFailure != nil {
			c.OnFailure(*f)
		}
	}
	panic("unreachable")
}

// fail reports the second failure and builds the error.
func (c *Command) fail(first *CommandFailure, second CommandFailure) error {
	if c.OnFailure != nil {
		c.OnFailure(second)
	}
	if first == nil {
		return &CommandError{First: second, Second: second}
	}
	return &CommandError{First: *first, Second: second}
}

// request encodes the batch as one JSON line.
func (c *Command) request(samples []Sample) ([]byte, error) {
	n := len(samples)
	prompts, completions, answers := make([]string, n), make([]string, n), make([]string, n)
	ids := make([][]int, n)
	columns := map[string][]any{}
	for i, s := range samples {
		prompts[i], completions[i], answers[i] = s.Prompt, s.Completion, s.Answer
		ids[i] = s.CompletionIDs
		if ids[i] == nil {
			ids[i] = s.IDs
		}
		if ids[i] == nil {
			ids[i] = []int{}
		}
		for k, v := range s.Columns {
			col, ok := columns[k]
			if !ok {
				for _, r := range ReservedColumns {
					if k == r {
						return nil, fmt.Errorf("reward %s: the dataset's column %q has the name of a request key (%s): rename it", c.name, k, strings.Join(ReservedColumns, ", "))
					}
				}
				col = make([]any, n)
				columns[k] = col
			}
			col[i] = v
		}
	}
	req := map[string]any{"prompts": prompts, "completions": completions, "completion_ids": ids, "answers": answers, "step": 0}
	if n > 0 {
		req["step"] = samples[0].Step
	}
	for k, v := range columns {
		req[k] = v
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(req); err != nil {
		return nil, fmt.Errorf("reward %s: encoding the request: %w", c.name, err)
	}
	return buf.Bytes(), nil
}

// exchange writes one request and reads its reply.
func (c *Command) exchange(req []byte, n int) ([]float64, map[string]float64, *CommandFailure) {
	p := c.proc
	crash := func(detail string) *CommandFailure {
		return &CommandFailure{Name: c.name, Kind: FailCrash, Detail: detail}
	}
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	var cancelled <-chan struct{}
	if c.ctx != nil {
		cancelled = c.ctx.Done()
	}
	written := make(chan error, 1)
	go func() {
		_, err := p.stdin.Write(req)
		written <- err
	}()
	var line []byte
	for line == nil {
		select {
		case err := <-written:
			if err != nil {
				return nil, nil, crash(p.exitDetail("could not take the request: " + err.Error()))
			}
			written = nil
		case r, ok := <-p.replies:
			if !ok {
				return nil, nil, crash(p.exitDetail("closed its standard output"))
			}
			if r.err != nil {
				if errors.Is(r.err, bufio.ErrBufferFull) {
					return nil, nil, &CommandFailure{Name: c.name, Kind: FailMalformed, Detail: fmt.Sprintf("a reply line longer than %d MiB", maxReplyBytes>>20)}
				}
				return nil, nil, crash(p.exitDetail("closed its standard output"))
			}
			line = r.line
		case <-timer.C:
			return nil, nil, &CommandFailure{Name: c.name, Kind: FailTimeout, Detail: fmt.Sprintf("no reply within %s", c.timeout)}
		case <-cancelled:
			return nil, nil, &CommandFailure{Name: c.name, Kind: failCancelled}
		}
	}
	values, metrics, err := c.parseReply(line, n)
	if err != nil {
		return nil, nil, &CommandFailure{Name: c.name, Kind: FailMalformed, Detail: err.Error()}
	}
	return values, metrics, nil
}

// parseReply checks and decodes a reply line for n samples.
func (c *Command) parseReply(line []byte, n int) ([]float64, map[string]float64, error) {
	var reply struct {
		Rewards *[]*float64            `json:"rewards"`
		Metrics map[string]json.Number `json:"metrics"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&reply); err != nil {
		hint := ""
		if bytes.Contains(line, []byte("NaN")) || bytes.Contains(line, []byte("Infinity")) {
			hint = " (NaN and Infinity are not JSON: send null for a sample the reward does not apply to)"
		}
		return nil, nil, fmt.Errorf("the reply is not the expected JSON object: %v%s; reply: %s", err, hint, excerpt(line))
	}
	if reply.Rewards == nil {
		return nil, nil, fmt.Errorf(`the reply has no "rewards" list; reply: %s`, excerpt(line))
	}
	if len(*reply.Rewards) != n {
		return nil, nil, fmt.Errorf("the reply has %d rewards for %d completions", len(*reply.Rewards), n)
	}
	values := make([]float64, n)
	for i, r := range *reply.Rewards {
		values[i] = notApplicable
		if r != nil {
			values[i] = *r
		}
	}
	metrics := map[string]float64{}
	for _, k := range sortedKeys(reply.Metrics) {
		if k == "" || strings.ContainsAny(k, " \t\n") {
			return nil, nil, fmt.Errorf("metric name %q: names are non-empty, without spaces", k)
		}
		v, err := reply.Metrics[k].Float64()
		if err != nil || math.IsInf(v, 0) {
			return nil, nil, fmt.Errorf("metric %q: %q is not a finite number", k, reply.Metrics[k])
		}
		metrics["rewards/"+c.name+"/"+k] = v
	}
	return values, metrics, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// excerpt shortens a reply for a message.
func excerpt(b []byte) string {
	const max = 200
	s := strings.TrimSpace(string(b))
	if len(s) > max {
		return fmt.Sprintf("%q… (%d bytes)", s[:max], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// process is one running instance of the command.
type process struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies chan reply
	stderr  *tail
	exited  chan struct{} // closed when the process has been waited for
	waitErr error
	drained chan struct{} // closed when standard error reached its end
}

type reply struct {
	line []byte
	err  error
}

// start launches a new process in its own process group (so that a kill reaches what it
// started too). Standard output and error are plain pipes read by goroutines of ours, so
// that the last lines a crashing process writes are never lost to a closed pipe.
func (c *Command) start() (*process, error) {
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	if err := cmd.Start(); err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return nil, fmt.Errorf("reward %s: starting %q: %w", c.name, strings.Join(c.argv, " "), err)
	}
	outW.Close()
	errW.Close()
	p := &process{cmd: cmd, stdin: stdin, replies: make(chan reply), stderr: newTail(stderrLines),
		exited: make(chan struct{}), drained: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	go func() {
		defer outR.Close()
		r := bufio.NewReaderSize(outR, 64<<10)
		for {
			line, err := readLine(r, maxReplyBytes)
			if err != nil {
				p.replies <- reply{err: err}
				if !errors.Is(err, bufio.ErrBufferFull) {
					close(p.replies)
					return
				}
				continue
			}
			p.replies <- reply{line: line}
		}
	}()
	go func() {
		defer close(p.drained)
		defer errR.Close()
		r := bufio.NewReader(errR)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				c.writeLog(line)
				p.stderr.add(strings.TrimRight(line, "\r\n"))
			}
			if err != nil {
				return
			}
		}
	}()
	return p, nil
}

// readLine reads one line without its newline; a line longer than limit is skipped to its end
// and reported as bufio.ErrBufferFull.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > limit {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			if err != nil {
				return nil, err
			}
			return nil, bufio.ErrBufferFull
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(line) > 0 && errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF // a last line without its newline: no reply
			}
			return nil, err
		}
		return bytes.TrimRight(line, "\r\n"), nil
	}
}

// exitDetail describes why the process stopped talking: its exit status when it has exited
// (waiting briefly for it), else what.
func (p *process) exitDetail(what string) string {
	select {
	case <-p.exited:
	case <-time.After(2 * time.Second):
		return what
	}
	if p.waitErr == nil {
		return "exited with status 0 before replying"
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exited with status %d", ee.ExitCode())
	}
	return what + ": " + p.waitErr.Error()
}

// stop closes standard input, waits up to grace for the process to exit, then kills its
// process group; it returns once the process has been waited for and its standard error read
// (or a second has passed: a detached grandchild may hold the pipe).
func (p *process) stop(grace time.Duration) {
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(grace):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	// Whatever it started dies with it.
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.drained:
	case <-time.After(time.Second):
	}
	// Release the stdout reader if it is blocked handing over a line nobody will read.
	go func() {
		for range p.replies {
		}
	}()
}

// tail keeps the last lines written to it, each cut to a readable length.
type tail struct {
	mu  sync.Mutex
	max int
	buf []string
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) add(line string) {
	const width = 400
	if len(line) > width {
		line = line[:width] + "…"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, line)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
}

func (t *tail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.buf...)
}

// StartCommands starts the command rewards among funcs; on an error the ones started are
// closed again.
func StartCommands(funcs []Weighted) error {
	for i, f := range funcs {
		if c, ok := f.Func.(*Command); ok {
			if err := c.Start(); err != nil {
				CloseCommands(funcs[:i])
				return err
			}
		}
	}
	return nil
}

// CloseCommands ends the processes of the command rewards among funcs.
func CloseCommands(funcs []Weighted) {
	for _, f := range funcs {
		if c, ok := f.Func.(*Command); ok {
			c.Close()
		}
	}
}
