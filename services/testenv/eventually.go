package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// ErrGiveUp, wrapped in a condition's error, ends Eventually at once: the condition can no
// longer become true (say, the process under test exited).
var ErrGiveUp = errors.New("giving up")

// Eventually waits until cond returns nil, polling with the harness's backoff (5 ms growing to
// 100 ms), and fails the test with cond's last error when timeout passes. Tests wait on a
// condition like this instead of sleeping; the timeout bounds a hang, it does not measure
// speed, so make it generous (the machines are shared and slow).
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := poll(ctx, func(context.Context) error {
		if err := cond(); err != nil {
			if errors.Is(err, ErrGiveUp) {
				return err
			}
			return fmt.Errorf("%w: %w", errNotYet, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}
