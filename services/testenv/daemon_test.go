package testenv

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDaemonStopAndExit: a running daemon reports no exit, stops cleanly on SIGTERM and then
// reports its exit as a give-up error; its output is in its log.
func TestDaemonStopAndExit(t *testing.T) {
	d := StartDaemon(t, "sh", exec.Command("sh", "-c", "echo started; trap 'echo stopping; exit 0' TERM; while :; do sleep 0.05; done"))
	Eventually(t, 10*time.Second, "the daemon's first line", func() error {
		if !strings.Contains(d.Log(), "started") {
			return errors.New("no output yet")
		}
		return nil
	})
	if err := d.Exited(); err != nil {
		t.Fatalf("a running daemon reports %v", err)
	}
	d.Stop(t)
	if err := d.Exited(); !errors.Is(err, ErrGiveUp) {
		t.Fatalf("after Stop: %v, want an error wrapping ErrGiveUp", err)
	}
	if !strings.Contains(d.Log(), "stopping") {
		t.Fatalf("log %q lacks the TERM handler's line", d.Log())
	}
}

// TestDaemonGetGivesUpWhenItExits: polling a daemon that died ends at once with its exit.
func TestDaemonGetGivesUpWhenItExits(t *testing.T) {
	d := StartDaemon(t, "sh", exec.Command("sh", "-c", "exit 3"))
	ft := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = recover() }() // fakeTB.Fatalf panics to end the call
		d.Get(ft, time.Minute, "127.0.0.1:1", "/healthz")
	}()
	<-done
	if !strings.Contains(ft.msg, "giving up") || !strings.Contains(ft.msg, "exit status 3") {
		t.Fatalf("Get ended with %q, want it to give up with the exit status", ft.msg)
	}
}
