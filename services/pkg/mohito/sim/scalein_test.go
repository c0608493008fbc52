package sim_test

import "testing"

// TestDecryptWorkerRollingUpdate: a second decrypt worker starts beside the first and the first
// stops gracefully (a scale-in or a rolling update), twice: the stopping worker hands back what it
// held, no round aborts, every command is answered exactly once.
func TestDecryptWorkerRollingUpdate(t *testing.T) { rollTwice(t, "decrypt", 0) }
