package testenv

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Daemon is a program under test started by StartDaemon (the operator's manager, the
// cert-manager controller): its output goes to a log file, it is killed when the test ends if
// it still runs, and its log is printed when the test failed.
type Daemon struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	// exited is closed when the process has exited; waitErr is then its exit status.
	exited  chan struct{}
	waitErr error
}

// StartDaemon starts cmd (its Stdout and Stderr are set to the daemon's log) as name.
func StartDaemon(t testing.TB, name string, cmd *exec.Cmd) *Daemon {
	t.Helper()
	d := &Daemon{name: name, cmd: cmd, logPath: filepath.Join(t.TempDir(), name+".log"), exited: make(chan struct{})}
	logf, err := os.Create(d.logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { d.waitErr = cmd.Wait(); logf.Close(); close(d.exited) }()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			_ = cmd.Process.Kill()
			<-d.exited
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, d.Log())
		}
	})
	return d
}

// Log returns what the daemon has written so far.
func (d *Daemon) Log() string {
	b, _ := os.ReadFile(d.logPath)
	return string(b)
}

// Exited is nil while the daemon runs; afterwards an error wrapping ErrGiveUp (it ends
// Eventually at once) with its exit status.
func (d *Daemon) Exited() error {
	select {
	case <-d.exited:
		return fmt.Errorf("%w: %s exited: %v", ErrGiveUp, d.name, d.waitErr)
	default:
		return nil
	}
}

// Get polls http://addr/path until it answers 200 and returns the body; it gives up at once if
// the daemon exits.
func (d *Daemon) Get(t testing.TB, timeout time.Duration, addr, path string) string {
	t.Helper()
	var body string
	Eventually(t, timeout, "GET "+addr+path, func() error {
		if err := d.Exited(); err != nil {
			return err
		}
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %s: %s", resp.Status, b)
		}
		body = string(b)
		return nil
	})
	return body
}

// Stop sends SIGTERM and fails t unless the daemon exits cleanly within 30 s.
func (d *Daemon) Stop(t testing.TB) {
	t.Helper()
	if err := d.Terminate(); err != nil {
		t.Fatal(err)
	}
	if err := d.Stopped(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// Terminate sends SIGTERM, unless the daemon has exited already, and returns at once: to stop
// several daemons together, Terminate each, then check each with Stopped.
func (d *Daemon) Terminate() error {
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: SIGTERM: %w", d.name, err)
	}
	return nil
}

// Stopped waits up to within for the daemon to exit and returns nil if it exited cleanly.
func (d *Daemon) Stopped(within time.Duration) error {
	select {
	case <-d.exited:
		if d.waitErr != nil {
			return fmt.Errorf("%s did not exit cleanly on SIGTERM: %v", d.name, d.waitErr)
		}
		return nil
	case <-time.After(within):
		return fmt.Errorf("%s still running %v after SIGTERM", d.name, within)
	}
}
