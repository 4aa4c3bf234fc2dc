// Package styles holds the one styles struct every TUI component draws with, for a dark or a
// light terminal background, or with no colour at all (NO_COLOR).
package styles

import (
	"image/color"
	"os"
	"strings"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/table"
	"charm.land/lipgloss/v2"
	"github.com/guptarohit/asciigraph"
)

// Styles is the palette and the text styles of the workstation.
type Styles struct {
	Dark    bool
	NoColor bool

	Title     lipgloss.Style // pane titles, the app name
	Text      lipgloss.Style
	Muted     lipgloss.Style // labels, secondary values
	Bold      lipgloss.Style
	Good      lipgloss.Style // improvements, a running run
	Bad       lipgloss.Style // regressions, failures
	Warn      lipgloss.Style
	Selected  lipgloss.Style // the selected row of a list
	Border    lipgloss.Style // colour of an unfocused pane's frame
	Focused   lipgloss.Style // colour of the focused pane's frame
	Key       lipgloss.Style // a key name in hints
	Flash     lipgloss.Style // the footer's status message
	FlashErr  lipgloss.Style
	Severity  map[string]lipgloss.Style // anomaly severities: info, warning, critical
	Help      help.Styles
	Table     table.Styles
	Bar       [2]color.Color // progress bar: filled, empty (nil when NoColor)
	Series    []asciigraph.AnsiColor
	SeriesTag []lipgloss.Style // legend markers, matching Series
}

// NoColorEnv reports whether the NO_COLOR convention asks for no colour (https://no-color.org:
// set and not empty).
func NoColorEnv() bool { return os.Getenv("NO_COLOR") != "" }

// New builds the styles for a dark or light background; noColor drops every colour and keeps
// only bold and reverse video, which NO_COLOR allows.
func New(dark, noColor bool) Styles {
	if noColor {
		return plain(dark)
	}
	ld := lipgloss.LightDark(dark)
	c := func(light, darkc string) color.Color { return ld(lipgloss.Color(light), lipgloss.Color(darkc)) }
	var (
		accent = c("#5A3FC0", "#B4A5FF")
		text   = c("#1F1F1F", "#E6E6E6")
		muted  = c("#6B6B6B", "#8C8C8C")
		green  = c("#1A7F37", "#5FD787")
		red    = c("#C62828", "#FF6E6E")
		yellow = c("#9A6700", "#F2C94C")
		blue   = c("#1565C0", "#6CB6FF")
		border = c("#B0B0B0", "#4A4A4A")
		selBg  = c("#DDD6FF", "#3B3363")
	)
	s := Styles{Dark: dark}
	s.Title = lipgloss.NewStyle().Bold(true).Foreground(accent)
	s.Text = lipgloss.NewStyle().Foreground(text)
	s.Muted = lipgloss.NewStyle().Foreground(muted)
	s.Bold = lipgloss.NewStyle().Bold(true)
	s.Good = lipgloss.NewStyle().Foreground(green)
	s.Bad = lipgloss.NewStyle().Foreground(red)
	s.Warn = lipgloss.NewStyle().Foreground(yellow)
	s.Selected = lipgloss.NewStyle().Bold(true).Background(selBg).Foreground(text)
	s.Border = lipgloss.NewStyle().Foreground(border)
	s.Focused = lipgloss.NewStyle().Foreground(accent)
	s.Key = lipgloss.NewStyle().Bold(true).Foreground(accent)
	s.Flash = lipgloss.NewStyle().Foreground(blue)
	s.FlashErr = lipgloss.NewStyle().Bold(true).Foreground(red)
	s.Severity = map[string]lipgloss.Style{
		"info":     lipgloss.NewStyle().Foreground(blue),
		"warning":  lipgloss.NewStyle().Bold(true).Foreground(yellow),
		"critical": lipgloss.NewStyle().Bold(true).Foreground(red),
	}
	s.Help = help.DefaultStyles(dark)
	s.Table = table.Styles{
		Header:   lipgloss.NewStyle().Bold(true).Foreground(accent).Padding(0, 1),
		Cell:     lipgloss.NewStyle().Padding(0, 1),
		Selected: s.Selected,
	}
	s.Bar = [2]color.Color{accent, border}
	s.Series = []asciigraph.AnsiColor{asciigraph.Cyan, asciigraph.Goldenrod, asciigraph.Green, asciigraph.Magenta}
	for _, sc := range []color.Color{lipgloss.Cyan, c("#9A6700", "#DAA520"), lipgloss.Green, lipgloss.Magenta} {
		s.SeriesTag = append(s.SeriesTag, lipgloss.NewStyle().Foreground(sc))
	}
	return s
}

func plain(dark bool) Styles {
	n := lipgloss.NewStyle()
	s := Styles{Dark: dark, NoColor: true}
	s.Title = n.Bold(true)
	s.Text, s.Muted, s.Good, s.Bad, s.Warn = n, n, n, n, n
	s.Bold = n.Bold(true)
	s.Selected = n.Reverse(true)
	s.Border, s.Focused = n, n.Bold(true)
	s.Key = n.Bold(true)
	s.Flash, s.FlashErr = n, n.Bold(true)
	s.Severity = map[string]lipgloss.Style{"info": n, "warning": n.Bold(true), "critical": n.Bold(true)}
	s.Help = help.Styles{
		Ellipsis: n, ShortKey: n.Bold(true), ShortDesc: n, ShortSeparator: n,
		FullKey: n.Bold(true), FullDesc: n, FullSeparator: n,
	}
	s.Table = table.Styles{Header: n.Bold(true).Padding(0, 1), Cell: n.Padding(0, 1), Selected: n.Reverse(true)}
	return s
}

// SeverityStyle is the style of an anomaly severity (unknown ones look like info).
func (s Styles) SeverityStyle(sev string) lipgloss.Style {
	if st, ok := s.Severity[sev]; ok {
		return st
	}
	return s.Severity["info"]
}

// SeriesMarker is the legend marker of chart series i: a coloured line, or with no colour a
// distinct character that matches the series' plot character (see SeriesChar).
func (s Styles) SeriesMarker(i int) string {
	if s.NoColor {
		return SeriesChar(i) + SeriesChar(i)
	}
	return s.SeriesTag[i%len(s.SeriesTag)].Render("──")
}

// SeriesChar is the plot character of series i when colour cannot tell series apart; the
// first series keeps asciigraph's box-drawing line.
func SeriesChar(i int) string {
	return []string{"─", "•", "+", "x"}[i%4]
}

// Box draws a titled frame of exactly w×h cells around body: the title sits in the top edge,
// the body is clipped or padded to (w−2)×(h−2). A focused box is drawn in the accent style.
func (s Styles) Box(title, body string, w, h int, focused bool) string {
	if w < 4 || h < 2 {
		return ""
	}
	edge := s.Border
	if focused {
		edge = s.Focused
	}
	inner := w - 2
	var b strings.Builder
	t := ""
	if title != "" {
		t = " " + Clip(title, inner-3) + " "
	}
	fill := inner - 1 - lipgloss.Width(t)
	if fill < 0 {
		fill = 0
	}
	b.WriteString(edge.Render("╭─"))
	if focused {
		b.WriteString(s.Title.Render(t))
	} else {
		b.WriteString(t)
	}
	b.WriteString(edge.Render(strings.Repeat("─", fill) + "╮"))
	lines := Fit(body, inner, h-2)
	for _, l := range lines {
		b.WriteString("\n")
		b.WriteString(edge.Render("│"))
		b.WriteString(l)
		b.WriteString(edge.Render("│"))
	}
	b.WriteString("\n")
	b.WriteString(edge.Render("╰" + strings.Repeat("─", inner) + "╯"))
	return b.String()
}

// Fit returns exactly h lines of exactly w cells: longer lines are cut, shorter ones padded,
// missing lines added blank.
func Fit(body string, w, h int) []string {
	var src []string
	if body != "" {
		src = strings.Split(body, "\n")
	}
	out := make([]string, h)
	for i := range out {
		l := ""
		if i < len(src) {
			l = Clip(src[i], w)
		}
		if pad := w - lipgloss.Width(l); pad > 0 {
			l += strings.Repeat(" ", pad)
		}
		out[i] = l
	}
	return out
}

// Clip cuts a (possibly styled) line to at most w cells.
func Clip(line string, w int) string {
	if w <= 0 {
		return ""
	}
	if lipgloss.Width(line) <= w {
		return line
	}
	return lipgloss.NewStyle().MaxWidth(w).Render(line)
}

// Ellipsis cuts plain text to at most w cells, ending with "…" when it was cut.
func Ellipsis(text string, w int) string {
	if w <= 0 {
		return ""
	}
	if lipgloss.Width(text) <= w {
		return text
	}
	r := []rune(text)
	for len(r) > 0 && lipgloss.Width(string(r))+1 > w {
		r = r[:len(r)-1]
	}
	return string(r) + "…"
}
