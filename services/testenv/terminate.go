package testenv

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Terminate stops a process a test started and waits for it: SIGTERM, up to grace for it to
// exit, then SIGKILL. exited is closed once the process has been waited for (by the goroutine
// that calls its exec.Cmd's Wait); a closed channel can be read by anyone any number of times,
// so a test that also watches it for an early exit does not take the exit away from Terminate.
// It returns nil when the process exited within grace or had exited already, and an error when
// SIGTERM failed or the process had to be killed.
func Terminate(p *os.Process, exited <-chan struct{}, grace time.Duration) error {
	select {
	case <-exited:
		return nil
	default:
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			<-exited
			return nil
		}
		return fmt.Errorf("terminate pid %d: SIGTERM: %w", p.Pid, err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
	}
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("terminate pid %d: SIGKILL after %s: %w", p.Pid, grace, err)
	}
	<-exited
	return fmt.Errorf("pid %d ignored SIGTERM for %s and was killed", p.Pid, grace)
}
