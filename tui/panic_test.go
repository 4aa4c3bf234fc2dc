package tui

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
)

// syncBuffer is an output the program writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// A panic in a command (here the caller's Inspect function) ends the program with an error
// and restores the terminal: the alternate screen is left and the cursor shown again.
func TestPanicRestoresTerminal(t *testing.T) {
	opts := baseOptions(Session{Events: feed(finishedRun(), false)})
	opts.Inspect = func(string, string) (func(int) string, float64, error) { panic("inspector exploded") }
	in, inW := io.Pipe()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		_, err := Run(New(opts), tea.WithInput(in), tea.WithOutput(out), tea.WithWindowSize(100, 30),
			tea.WithoutSignalHandler())
		done <- err
	}()
	// Wait for the dashboard, then open the inspector and ask for a report.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "completed") {
		if time.Now().After(deadline) {
			t.Fatalf("dashboard never drawn; output %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "\x1b[?1049h") {
		t.Fatalf("the alternate screen was never entered")
	}
	go inW.Write([]byte("c\r"))
	select {
	case err := <-done:
		if !errors.Is(err, tea.ErrProgramPanic) {
			t.Fatalf("Run returned %v, want a program panic", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the program did not end after the panic")
	}
	s := out.String()
	leave, show := strings.LastIndex(s, "\x1b[?1049l"), strings.LastIndex(s, "\x1b[?25h")
	if leave < 0 || show < 0 || leave < strings.LastIndex(s, "\x1b[?1049h") {
		t.Errorf("terminal not restored after the panic (leave alt screen at %d, show cursor at %d)", leave, show)
	}
}
