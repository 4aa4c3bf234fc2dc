// Package checkpoints is the checkpoint inspector: a table of the run's checkpoints (step,
// reward at that step, health), the selected one's health report against a reference
// (enter), the reference mark (r) and a completion generated from it for a prompt typed in
// place (g). Reports and completions come from functions the caller supplies; they run in
// commands, so the screen stays live while they work.
package checkpoints

import (
	"fmt"
	"path/filepath"
	"strings"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/spinner"
	"charm.land/bubbles/v2/table"
	"charm.land/bubbles/v2/viewport"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"rlhfstation/tui/component"
	"rlhfstation/tui/context"
	"rlhfstation/tui/format"
	"rlhfstation/tui/input"
	"rlhfstation/tui/state"
)

// InspectFunc reports on checkpoint ckpt, with drift against ref when ref is not empty: the
// report is laid out for the detail pane's width (it changes with the terminal's).
type InspectFunc func(ckpt, ref string) (report func(width int) string, score float64, err error)

// GenerateFunc completes prompt with the policy of checkpoint ckpt.
type GenerateFunc func(ckpt, prompt string) (string, error)

type inspectedMsg struct {
	key    string
	report func(width int) string
	score  float64
	err    error
}

type generatedMsg struct {
	ckpt, prompt, out string
	err               error
}

type report struct {
	text  func(width int) string
	score float64
	err   error
}

// Model is the inspector screen (below the header, above the footer).
type Model struct {
	component.Base
	inspect  InspectFunc
	generate GenerateFunc

	table   table.Model
	detail  viewport.Model
	prompt  input.Model
	spin    spinner.Model
	sel     string            // path of the selected checkpoint
	ref     string            // path of the reference checkpoint
	reports map[string]report // by reportKey
	scores  map[string]float64
	busy    string // what is running, shown with the spinner
	gen     *generatedMsg
	wide    bool
}

// New returns the inspector; inspect and generate may be nil (the keys then say so).
func New(ctx *context.Context, inspect InspectFunc, generate GenerateFunc) Model {
	m := Model{
		Base: component.New(ctx), inspect: inspect, generate: generate,
		table:   table.New(table.WithFocused(true)),
		detail:  viewport.New(),
		prompt:  input.New("prompt> ", "type a prompt, enter to generate, esc to cancel"),
		spin:    spinner.New(spinner.WithSpinner(spinner.Line)),
		reports: map[string]report{},
		scores:  map[string]float64{},
	}
	m.table.SetStyles(ctx.Styles.Table)
	return m
}

// Restyle picks up a theme change.
func (m *Model) Restyle() { m.table.SetStyles(m.Ctx.Styles.Table); m.Sync() }

// Editing reports whether the prompt field has the keyboard (the app then leaves keys to it).
func (m Model) Editing() bool { return m.prompt.Focused() }

// Busy reports whether an inspection or a generation is running.
func (m Model) Busy() bool { return m.busy != "" }

// Ref is the path of the reference checkpoint ("" when none).
func (m Model) Ref() string { return m.ref }

// Selected is the selected checkpoint.
func (m Model) Selected() (state.Checkpoint, bool) {
	for _, c := range m.Ctx.Run.Checkpoints {
		if c.Path == m.sel {
			return c, true
		}
	}
	return state.Checkpoint{}, false
}

// SetSize sets the screen's size.
func (m *Model) SetSize(w, h int) {
	m.Base.SetSize(w, h)
	m.wide = w >= 120
	m.Sync()
}

func (m Model) tableBox() (w, h int) {
	if m.wide {
		return min(max(m.Width*2/5, 48), 64), m.Height
	}
	rows := len(m.Ctx.Run.Checkpoints)
	return m.Width, max(4, min(m.Height/3, rows+3))
}

func (m Model) detailBox() (w, h int) {
	tw, th := m.tableBox()
	if m.wide {
		return m.Width - tw, m.Height
	}
	return m.Width, m.Height - th
}

// Sync rebuilds the table from the run's checkpoints, keeping the selection on the same one.
func (m *Model) Sync() {
	cps := m.Ctx.Run.Checkpoints
	tw, th := m.tableBox()
	inner := tw - 2
	// step, reward, health, ref: fixed; path takes the rest. Each column pads by 2.
	fixed := []int{1, 7, 7, 6, 3}
	pathW := inner
	for _, f := range fixed {
		pathW -= f + 2
	}
	pathW = max(pathW, 4)
	m.table.SetColumns([]table.Column{
		{Title: "", Width: 1}, {Title: "step", Width: 7}, {Title: "reward", Width: 7},
		{Title: "health", Width: 6}, {Title: "ref", Width: 3}, {Title: "path", Width: pathW},
	})
	cursor := -1
	for i, c := range cps {
		if c.Path == m.sel {
			cursor = i
		}
	}
	if cursor < 0 && len(cps) > 0 {
		cursor = len(cps) - 1 // newest first selected
	}
	rows := make([]table.Row, len(cps))
	for i, c := range cps {
		mark := " "
		if i == cursor {
			mark = "▸"
		}
		rw := "—"
		if v, ok := m.Ctx.Run.At("reward", c.Step); ok {
			rw = format.Value(v)
		}
		rows[i] = table.Row{mark, fmt.Sprint(c.Step), rw, m.health(c), refMark(c.Path == m.ref), shortPath(c.Path)}
	}
	m.table.SetRows(rows)
	m.table.SetWidth(inner)
	m.table.SetHeight(max(th-2, 2))
	if cursor >= 0 {
		m.table.SetCursor(cursor)
		m.sel = cps[cursor].Path
	}
	dw, dh := m.detailBox()
	m.prompt.SetWidth(dw - 2)
	m.detail.SetWidth(max(dw-2, 1))
	m.detail.SetHeight(max(dh-2-m.fixedDetailLines(), 1))
	m.detail.SetContent(m.detailText(dw - 2))
}

func refMark(ref bool) string {
	if ref {
		return "★"
	}
	return ""
}

// shortPath shows a checkpoint by its last two path elements (checkpoints/step-000100).
// runPath names a checkpoint within its run folder (checkpoints/step-000060).
func runPath(p string) string {
	d, f := filepath.Split(filepath.Clean(p))
	if d == "" {
		return f
	}
	return filepath.Join(filepath.Base(d), f)
}

// shortPath names a checkpoint in the table: its folder alone when it lies in the run's
// checkpoints/ (all of them do; the detail pane gives the whole path), else with its parent.
func shortPath(p string) string {
	d, f := filepath.Split(filepath.Clean(p))
	if d == "" || filepath.Base(d) == "checkpoints" {
		return f
	}
	return filepath.Join(filepath.Base(d), f)
}

func (m Model) health(c state.Checkpoint) string {
	if s, ok := m.scores[c.Path]; ok {
		return fmt.Sprintf("%.2f", s)
	}
	if c.Health != nil {
		return fmt.Sprintf("%.2f", c.Health.Score)
	}
	return "—"
}

func reportKey(ckpt, ref string) string { return ckpt + "\x00" + ref }

// Update handles the inspector's keys and the results of its commands.
func (m *Model) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case inspectedMsg:
		m.busy = ""
		m.reports[msg.key] = report{msg.report, msg.score, msg.err}
		if msg.err == nil {
			m.scores[strings.SplitN(msg.key, "\x00", 2)[0]] = msg.score
		}
		m.Sync()
		m.detail.GotoTop()
		return nil
	case generatedMsg:
		m.busy = ""
		m.gen = &msg
		m.Sync()
		m.detail.GotoBottom()
		return nil
	case spinner.TickMsg:
		if m.busy == "" {
			return nil
		}
		var cmd tea.Cmd
		m.spin, cmd = m.spin.Update(msg)
		return cmd
	case tea.PasteMsg:
		m.prompt, _ = m.prompt.Update(msg)
		return nil
	case tea.KeyPressMsg:
		return m.key(msg)
	}
	return nil
}

func (m *Model) key(k tea.KeyPressMsg) tea.Cmd {
	keys := m.Ctx.Keys
	if m.prompt.Focused() {
		switch k.Keystroke() {
		case "esc":
			m.prompt.Blur()
		case "enter":
			p := strings.TrimSpace(m.prompt.Value())
			c, ok := m.Selected()
			if p == "" || !ok {
				return nil
			}
			m.prompt.Blur()
			if m.generate == nil {
				m.gen = &generatedMsg{ckpt: c.Path, prompt: p, err: errNotAvailable("generation")}
				m.Sync()
				return nil
			}
			m.busy = "generating from " + shortPath(c.Path) + "…"
			gen := m.generate
			m.Sync()
			return tea.Batch(m.spin.Tick, func() tea.Msg {
				out, err := gen(c.Location(), p)
				return generatedMsg{ckpt: c.Path, prompt: p, out: out, err: err}
			})
		default:
			m.prompt, _ = m.prompt.Update(k)
		}
		m.Sync()
		return nil
	}
	switch {
	case key.Matches(k, keys.Up):
		m.move(-1)
	case key.Matches(k, keys.Down):
		m.move(1)
	case key.Matches(k, keys.Left):
		m.detail.ScrollUp(1)
	case key.Matches(k, keys.Right):
		m.detail.ScrollDown(1)
	case key.Matches(k, keys.Reference):
		if c, ok := m.Selected(); ok {
			if m.ref == c.Path {
				m.ref = ""
			} else {
				m.ref = c.Path
			}
			m.Sync()
		}
	case key.Matches(k, keys.Enter):
		c, ok := m.Selected()
		if !ok || m.busy != "" {
			return nil
		}
		rk := reportKey(c.Path, m.ref)
		if m.inspect == nil {
			m.reports[rk] = report{err: errNotAvailable("inspection")}
			m.Sync()
			return nil
		}
		m.busy = "inspecting " + shortPath(c.Path) + "…"
		insp, ref, refLoc := m.inspect, m.ref, m.location(m.ref)
		m.Sync()
		return tea.Batch(m.spin.Tick, func() tea.Msg {
			text, score, err := insp(c.Location(), refLoc)
			return inspectedMsg{key: reportKey(c.Path, ref), report: text, score: score, err: err}
		})
	case key.Matches(k, keys.Generate):
		if _, ok := m.Selected(); ok && m.busy == "" {
			m.prompt.SetValue("")
			m.prompt.Focus()
			m.Sync()
		}
	}
	return nil
}

// location is where the checkpoint of a path lies on disk ("" for "").
func (m Model) location(path string) string {
	for _, c := range m.Ctx.Run.Checkpoints {
		if c.Path == path {
			return c.Location()
		}
	}
	return path
}

type errNotAvailable string

func (e errNotAvailable) Error() string { return string(e) + " is not available in this session" }

func (m *Model) move(d int) {
	cps := m.Ctx.Run.Checkpoints
	if len(cps) == 0 {
		return
	}
	i := m.table.Cursor() + d
	i = max(0, min(i, len(cps)-1))
	m.sel = cps[i].Path
	m.Sync()
}

// fixedDetailLines are the detail pane's lines above its scrolling part: the busy line and
// the prompt field.
func (m Model) fixedDetailLines() int {
	n := 0
	if m.busy != "" {
		n++
	}
	if m.prompt.Focused() {
		n++
	}
	return n
}

func (m Model) detailText(w int) string {
	st := m.Ctx.Styles
	c, ok := m.Selected()
	if !ok {
		if m.Ctx.Live {
			return st.Muted.Render("no checkpoints yet: press esc, then s to save one now")
		}
		return st.Muted.Render("this run has no checkpoints")
	}
	var b strings.Builder
	row := func(k, v string) {
		fmt.Fprintf(&b, "%s %s\n", st.Muted.Render(fmt.Sprintf("%-10s", k)), v)
	}
	row("path", c.Location())
	row("step", fmt.Sprint(c.Step))
	if !c.Time.IsZero() {
		row("saved", c.Time.UTC().Format("2006-01-02 15:04:05Z"))
	}
	if v, ok := m.Ctx.Run.At("reward", c.Step); ok {
		row("reward", format.Value(v))
	}
	if c.Health != nil {
		row("health", fmt.Sprintf("%.2f", c.Health.Score))
		for _, is := range c.Health.Issues {
			b.WriteString("  · " + is + "\n")
		}
	} else if !c.Event {
		row("health", st.Muted.Render("not in the events (found in the run folder)"))
	}
	ref := "none (r marks the selected checkpoint)"
	if m.ref != "" {
		ref = shortPath(m.ref)
	}
	row("reference", ref)
	b.WriteString("\n")
	if r, ok := m.reports[reportKey(c.Path, m.ref)]; ok {
		b.WriteString(st.Title.Render("report") + "\n")
		if r.err != nil {
			b.WriteString(st.Bad.Render(lipgloss.Wrap("error: "+r.err.Error(), w, " ")) + "\n")
		} else {
			b.WriteString(fmt.Sprintf("%s %.2f\n", st.Muted.Render("score"), r.score))
			b.WriteString(lipgloss.Wrap(strings.TrimRight(r.text(w), "\n"), w, " ") + "\n")
		}
	} else {
		b.WriteString(st.Muted.Render("enter: full health report · g: generate from this checkpoint") + "\n")
	}
	if g := m.gen; g != nil && g.ckpt == c.Path {
		b.WriteString("\n" + st.Title.Render("generated") + "\n")
		b.WriteString(lipgloss.Wrap(st.Muted.Render("prompt ")+g.prompt, w, " ") + "\n")
		if g.err != nil {
			b.WriteString(st.Bad.Render(lipgloss.Wrap("error: "+g.err.Error(), w, " ")) + "\n")
		} else {
			b.WriteString(lipgloss.Wrap(g.out, w, " ") + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// View renders the table and the details side by side (wide) or stacked.
func (m Model) View() string {
	st := m.Ctx.Styles
	tw, th := m.tableBox()
	title := fmt.Sprintf("checkpoints · %d", len(m.Ctx.Run.Checkpoints))
	tbl := st.Box(title, m.table.View(), tw, th, !m.prompt.Focused())
	dw, dh := m.detailBox()
	var body []string
	if m.busy != "" {
		body = append(body, m.spin.View()+" "+m.busy)
	}
	if m.prompt.Focused() {
		body = append(body, m.prompt.View(st))
	}
	body = append(body, m.detail.View())
	dt := "details"
	if c, ok := m.Selected(); ok {
		dt = "checkpoint " + runPath(c.Path)
	}
	det := st.Box(dt, strings.Join(body, "\n"), dw, dh, m.prompt.Focused())
	if m.wide {
		return lipgloss.JoinHorizontal(lipgloss.Top, tbl, det)
	}
	return tbl + "\n" + det
}
