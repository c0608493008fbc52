package sim

import (
	"bytes"
	"testing"
)

// TestRunDemo: the embedded demo's SDDR part shows what it says — friends recognise each
// other and nobody the stranger, a revoked friend stops recognising while the other friend
// still does, and two devices exchange sealed messages through the mailbox, whose store
// holds only ciphertext under an opaque address.
func TestRunDemo(t *testing.T) {
	var out bytes.Buffer
	s, err := RunDemo(t.Context(), &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !s.Exact() {
		t.Fatalf("summary %+v\n%s", s, out.String())
	}
	t.Log(out.String())
}
