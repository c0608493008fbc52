package testenv

import (
	"syscall"
	"time"
)

// ProcessCPU is this process's user + system CPU time: the roles and any embedded server a
// benchmark runs in-process (external servers such as redis-server are not included).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
