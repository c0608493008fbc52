package plots

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWriteDrawsEveryPlot: a small sweep writes every file as an SVG document.
func TestWriteDrawsEveryPlot(t *testing.T) {
	dir := t.TempDir()
	sw := Sweep{Neighbours: []int{0, 2}, Intervals: []time.Duration{time.Minute, 2 * time.Minute}, Friends: []int{1, 3}, Duration: 10 * time.Minute}
	if err := Write(t.Context(), dir, 1, sw); err != nil {
		t.Fatal(err)
	}
	for _, f := range Files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("<svg")) {
			t.Fatalf("%s is not SVG", f)
		}
	}
}
