package testenv

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// startSh runs script under sh, returns once it printed its first line (its traps are set),
// and closes the returned channel when it has been waited for.
func startSh(t *testing.T, script string) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("first line %q, %v", line, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return cmd, exited
}

// TestTerminate: a process that exits on SIGTERM is stopped without an error; one that ignores
// SIGTERM is killed after the grace, with an error saying so; one that has exited already (its
// exit seen by the test first) is no error.
func TestTerminate(t *testing.T) {
	cmd, exited := startSh(t, "trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done")
	if err := Terminate(cmd.Process, exited, time.Minute); err != nil {
		t.Errorf("a process that exits on SIGTERM: %v", err)
	}

	cmd, exited = startSh(t, "trap '' TERM; echo ready; while :; do sleep 0.05; done")
	if err := Terminate(cmd.Process, exited, 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("a process that ignores SIGTERM: %v, want an error saying it was killed", err)
	}
	select {
	case <-exited:
	default:
		t.Error("Terminate returned before the killed process was waited for")
	}

	cmd, exited = startSh(t, "echo ready; exit 3")
	<-exited
	if err := Terminate(cmd.Process, exited, time.Minute); err != nil {
		t.Errorf("a process that had exited: %v", err)
	}
}
