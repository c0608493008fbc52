package testenv

import "syscall"

// childAttr makes the kernel kill a started server when the test binary dies (a panic, a
// `go test -timeout`, a SIGKILL), when no t.Cleanup runs. Pdeathsig fires when the thread
// that forked the child exits; the Go runtime keeps its threads for the life of the process.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
