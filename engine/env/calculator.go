package env

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Env is what the trainer needs of an environment: a process (Client) or an in-process one.
type Env interface {
	Do(reqs []Request) (map[string]Reply, error)
	Close() error
}

// CalcTools is the calculator's one tool, calc(expression), as a JSON schema.
var CalcTools = []any{map[string]any{"type": "function", "function": map[string]any{
	"name": "calc", "description": "Evaluate an arithmetic expression (+, -, *, /, parentheses).",
	"parameters": map[string]any{"type": "object", "required": []any{"expression"},
		"properties": map[string]any{"expression": map[string]any{"type": "string", "description": "e.g. 12*4+3"}}}}}}

// Calculator is the built-in environment for the math preset's word problems: the prompt as
// the user's message, the calc tool, and the rewards "tool_correct" (1 when the episode's last
// tool result equals the answer) and "used_tool" (1 when it called calc at all).
type Calculator struct {
	mu  sync.Mutex
	eps map[string]*calcEpisode
}

type calcEpisode struct {
	answer string
	last   string
	calls  int
}

// NewCalculator makes the built-in calculator environment.
func NewCalculator() *Calculator { return &Calculator{eps: map[string]*calcEpisode{}} }

// Close forgets the episodes.
func (c *Calculator) Close() error { return nil }

// Do answers a batch of requests.
func (c *Calculator) Do(reqs []Request) (map[string]Reply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]Reply{}
	for _, r := range reqs {
		switch r.Op {
		case "reset":
			prompt, _ := r.Example["prompt"].(string)
			answer, _ := r.Example["answer"].(string)
			c.eps[r.ID] = &calcEpisode{answer: strings.TrimSpace(answer)}
			out[r.ID] = Reply{ID: r.ID, Messages: []map[string]any{{"role": "user", "content": prompt}}, Tools: CalcTools}
		case "step":
			ep := c.eps[r.ID]
			if ep == nil {
				out[r.ID] = Reply{ID: r.ID, Error: "no such episode"}
				continue
			}
			var msgs []map[string]any
			calls, _ := r.Message["tool_calls"].([]any)
			failures := 0.0
			for _, tc := range calls {
				fn, _ := tc.(map[string]any)["function"].(map[string]any)
				args, _ := fn["arguments"].(map[string]any)
				expr, _ := args["expression"].(string)
				var res string
				if name, _ := fn["name"].(string); name != "calc" {
					res, failures = fmt.Sprintf("error: no tool %q", name), failures+1
				} else if v, err := Eval(expr); err != nil {
					res, failures = "error: "+err.Error(), failures+1
				} else {
					res = FormatNumber(v)
				}
				ep.last, ep.calls = res, ep.calls+1
				msgs = append(msgs, map[string]any{"role": "tool", "name": "calc", "content": res})
			}
			out[r.ID] = Reply{ID: r.ID, Messages: msgs, Done: len(msgs) == 0, Metrics: map[string]float64{"tool_failures": failures}}
		case "reward":
			correct, used := make([]*float64, len(r.IDs)), make([]*float64, len(r.IDs))
			for i, id := range r.IDs {
				ep := c.eps[id]
				if ep == nil {
					continue
				}
				cv, uv := 0.0, 0.0
				if ep.calls > 0 {
					uv = 1
					if ep.last == ep.answer {
						cv = 1
					}
				}
				correct[i], used[i] = &cv, &uv
				delete(c.eps, id)
			}
			out[r.ID] = Reply{ID: r.ID, Rewards: map[string][]*float64{"tool_correct": correct, "used_tool": used}}
		default:
			out[r.ID] = Reply{ID: r.ID, Error: fmt.Sprintf("unknown op %q", r.Op)}
		}
	}
	return out, nil
}

// FormatNumber writes a value as the math preset's answers are written: an integer without a
// decimal point, else the shortest decimal.
func FormatNumber(v float64) string {
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// Eval evaluates an arithmetic expression: numbers, + - * /, unary minus, parentheses.
func Eval(s string) (float64, error) {
	p := &calcParser{s: strings.ReplaceAll(s, " ", "")}
	v, err := p.sum()
	if err != nil {
		return 0, err
	}
	if p.i != len(p.s) {
		return 0, fmt.Errorf("unexpected %q in %q", p.s[p.i:], s)
	}
	return v, nil
}

type calcParser struct {
	s string
	i int
}

func (p *calcParser) sum() (float64, error) {
	v, err := p.product()
	for err == nil && p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
		op := p.s[p.i]
		p.i++
		var w float64
		if w, err = p.product(); op == '+' {
			v += w
		} else {
			v -= w
		}
	}
	return v, err
}

func (p *calcParser) product() (float64, error) {
	v, err := p.unary()
	for err == nil && p.i < len(p.s) && (p.s[p.i] == '*' || p.s[p.i] == '/' || p.s[p.i] == 'x') {
		op := p.s[p.i]
		p.i++
		var w float64
		if w, err = p.unary(); err == nil {
			if op == '/' {
				if w == 0 {
					return 0, fmt.Errorf("division by zero")
				}
				v /= w
			} else {
				v *= w
			}
		}
	}
	return v, err
}

func (p *calcParser) unary() (float64, error) {
	if p.i < len(p.s) && p.s[p.i] == '-' {
		p.i++
		v, err := p.unary()
		return -v, err
	}
	if p.i < len(p.s) && p.s[p.i] == '(' {
		p.i++
		v, err := p.sum()
		if err != nil {
			return 0, err
		}
		if p.i >= len(p.s) || p.s[p.i] != ')' {
			return 0, fmt.Errorf("a '(' without its ')'")
		}
		p.i++
		return v, nil
	}
	j := p.i
	for j < len(p.s) && (p.s[j] >= '0' && p.s[j] <= '9' || p.s[j] == '.' || p.s[j] == ',') {
		j++
	}
	if j == p.i {
		return 0, fmt.Errorf("a number expected at %q", p.s[p.i:])
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(p.s[p.i:j], ",", ""), 64)
	p.i = j
	return v, err
}
