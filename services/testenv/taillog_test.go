package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// TestTailLinesKeepsTheLastLines: the writer keeps exactly the last n complete lines in order,
// whatever the write boundaries.
func TestTailLinesKeepsTheLastLines(t *testing.T) {
	w := &tailLines{max: 3}
	for i := range 5 {
		s := fmt.Sprintf("line %d\n", i)
		_, _ = w.Write([]byte(s[:3]))
		_, _ = w.Write([]byte(s[3:]))
	}
	_, _ = w.Write([]byte("unfinished"))
	if got, want := w.String(), strings.Join([]string{"line 2", "line 3", "line 4"}, "\n"); got != want {
		t.Fatalf("kept %q, want %q", got, want)
	}
}
