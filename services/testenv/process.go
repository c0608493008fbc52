package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// process is one server binary started by a test, with its output captured in a file.
type process struct {
	name    string // binary name for messages, e.g. "redis-server"
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid after done
}

func startProcess(name, path string, args []string, dir, logPath string) (*process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create log for %s: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exitError returns an error when the process has already exited, nil while it runs.
func (p *process) exitError() error {
	select {
	case <-p.done:
		if p.waitErr != nil {
			return fmt.Errorf("%s (pid %d) exited: %v", p.name, p.cmd.Process.Pid, p.waitErr)
		}
		return fmt.Errorf("%s (pid %d) exited with status 0", p.name, p.cmd.Process.Pid)
	default:
		return nil
	}
}

// waitReady polls probe until it succeeds, the process exits, or ctx ends.
func (p *process) waitReady(ctx context.Context, probe func(context.Context) error) error {
	return poll(ctx, func(ctx context.Context) error {
		if err := p.exitError(); err != nil {
			return err
		}
		return probe(ctx)
	})
}

// stop sends SIGTERM, waits up to grace for the process to exit, then SIGKILLs it.
func (p *process) stop(grace time.Duration) error {
	if err := Terminate(p.cmd.Process, p.done, grace); err != nil {
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	return nil
}

// bindConflict reports whether the server failed because another process took its port
// between FreePort and bind.
func (p *process) bindConflict() bool {
	data, err := os.ReadFile(p.logPath)
	return err == nil && strings.Contains(string(data), "ddress already in use")
}

// bindAttempts is how many fresh port sets a starter tries when a port is taken under it.
const bindAttempts = 3

func (p *process) failure(what string, err error) error {
	return fmt.Errorf("testenv: %s: %w\n%s", what, err, logTail(p.logPath, 30))
}
