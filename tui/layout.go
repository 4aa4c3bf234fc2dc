package tui

import (
	"strings"

	"charm.land/lipgloss/v2"

	"rlhfstation/tui/component"
	"rlhfstation/tui/header"
	"rlhfstation/tui/ntl"
	"rlhfstation/tui/perplexity"
)

// wideLayout is the width from which the dashboard uses three columns instead of two.
const wideLayout = 140

type size struct{ w, h int }

// Dashboard panes, in the order of paneSizes.
const (
	panePerplexity = iota
	paneNTL
	paneKL
	paneReward
	paneAlerts
	paneSamples
	paneCount
)

// paneSizes lays the six dashboard panes out in w×h.
//
// Three columns (wide): perplexity over NTL | KL over reward | alerts over samples.
// Two columns: perplexity | NTL, then KL | reward, then alerts | samples, in bands.
func paneSizes(w, h int) [paneCount]size {
	var s [paneCount]size
	if w >= wideLayout {
		c1, c2 := w/3, w/3
		c3 := w - c1 - c2
		top1 := max(h*11/20, 8)
		top3 := max(h*2/5, 6)
		s[panePerplexity], s[paneNTL] = size{c1, top1}, size{c1, h - top1}
		s[paneKL], s[paneReward] = size{c2, h / 2}, size{c2, h - h/2}
		s[paneAlerts], s[paneSamples] = size{c3, top3}, size{c3, h - top3}
		return s
	}
	l, r := w/2, w-w/2
	b1 := max(min(h/3, 12), 7)
	b2 := (h - b1) / 2
	b3 := h - b1 - b2
	s[panePerplexity], s[paneNTL] = size{l, b1}, size{r, b1}
	s[paneKL], s[paneReward] = size{l, b2}, size{r, b2}
	s[paneAlerts], s[paneSamples] = size{l, b3}, size{r, b3}
	return s
}

// layout sizes every component for the current terminal.
func (m *Model) layout() {
	w, h := m.ctx.Width, m.ctx.Height
	m.header.SetSize(w, header.Height)
	m.footer.SetSize(w, 1)
	m.help.SetSize(w, h)
	m.setup.SetSize(w, h-1)
	body := h - header.Height - 1
	m.checkpoints.SetSize(w, body)
	s := paneSizes(w, body)
	for i, p := range m.panes() {
		p.SetSize(s[i].w, s[i].h)
	}
	// The stand-ins of the perplexity and NTL panes take their places (see panes).
	m.ppl.SetSize(s[panePerplexity].w, s[panePerplexity].h)
	m.ntl.SetSize(s[paneNTL].w, s[paneNTL].h)
	m.entropy.SetSize(s[panePerplexity].w, s[panePerplexity].h)
	m.length.SetSize(s[paneNTL].w, s[paneNTL].h)
}

// panes are the dashboard's panes, in the order of paneSizes. Another tool's run that logs no
// perplexity and no number token loss shows its entropy and completion length in their places.
func (m *Model) panes() [paneCount]component.Component {
	var first, second component.Component = &m.ppl, &m.ntl
	if r := m.ctx.Run; r.Source != "" && !perplexity.Used(r) && !ntl.Used(r) {
		first, second = &m.entropy, &m.length
	}
	return [paneCount]component.Component{panePerplexity: first, paneNTL: second, paneKL: &m.kl,
		paneReward: &m.reward, paneAlerts: &m.alerts, paneSamples: &m.samples}
}

// dashboard renders the panes in their places (sizes were set by layout).
func (m Model) dashboard() string {
	var v [paneCount]string
	for i, p := range m.panes() {
		v[i] = p.View()
	}
	if m.ctx.Width >= wideLayout {
		return lipgloss.JoinHorizontal(lipgloss.Top,
			v[panePerplexity]+"\n"+v[paneNTL], v[paneKL]+"\n"+v[paneReward], v[paneAlerts]+"\n"+v[paneSamples])
	}
	return strings.Join([]string{
		lipgloss.JoinHorizontal(lipgloss.Top, v[panePerplexity], v[paneNTL]),
		lipgloss.JoinHorizontal(lipgloss.Top, v[paneKL], v[paneReward]),
		lipgloss.JoinHorizontal(lipgloss.Top, v[paneAlerts], v[paneSamples]),
	}, "\n")
}
