package testenv

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	calls := 0
	Eventually(t, 10*time.Second, "third call", func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("condition called %d times, want 3", calls)
	}
}

func TestEventuallyFailsWithTheLastError(t *testing.T) {
	ft := &fakeTB{TB: t}
	func() {
		defer func() { _ = recover() }()
		Eventually(ft, 50*time.Millisecond, "never", func() error { return errors.New("still 3 pending") })
	}()
	if !ft.failed || !contains(ft.msg, "never: not within 50ms") || !contains(ft.msg, "still 3 pending") {
		t.Fatalf("failure message %q", ft.msg)
	}
}

// fakeTB records a Fatalf instead of ending the test, so the failure path can be checked.
type fakeTB struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	panic("fatal")
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestEventuallyGivesUpAtOnce(t *testing.T) {
	ft := &fakeTB{TB: t}
	calls := 0
	func() {
		defer func() { _ = recover() }()
		Eventually(ft, time.Minute, "exits", func() error {
			calls++
			return fmt.Errorf("%w: process exited", ErrGiveUp)
		})
	}()
	if !ft.failed || calls != 1 || !contains(ft.msg, "process exited") {
		t.Fatalf("failed=%v after %d calls: %q", ft.failed, calls, ft.msg)
	}
}
