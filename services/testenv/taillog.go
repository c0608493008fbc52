package testenv

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// TailLogger returns a logger that keeps the last n lines its handlers write (text format,
// debug level) and prints them with t.Log when the test fails: a failure under CI's load,
// which a run alone does not reproduce, leaves its roles' last words in the test output.
func TailLogger(t testing.TB, n int) *slog.Logger {
	tl := &tailLines{max: n}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last %d log lines of the roles:\n%s", n, tl.String())
		}
	})
	return slog.New(slog.NewTextHandler(tl, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// tailLines is an io.Writer keeping the last max lines written to it.
type tailLines struct {
	mu    sync.Mutex
	max   int
	lines []string
	next  int
	part  bytes.Buffer
}

func (w *tailLines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part.Write(p)
	for {
		line, err := w.part.ReadString('\n')
		if err != nil {
			w.part.Reset()
			w.part.WriteString(line) // an unfinished line waits for its end
			return len(p), nil
		}
		w.push(strings.TrimSuffix(line, "\n"))
	}
}

func (w *tailLines) push(line string) {
	if len(w.lines) < w.max {
		w.lines = append(w.lines, line)
		return
	}
	w.lines[w.next] = line
	w.next = (w.next + 1) % w.max
}

// String returns the kept lines, oldest first.
func (w *tailLines) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := append(append([]string(nil), w.lines[w.next:]...), w.lines[:w.next]...)
	return strings.Join(out, "\n")
}
