package okvs_test

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cpuClock measures the CPU time of the benchmark's own thread. The benchmark machine is
// shared, and wall time per op there includes time the thread spends descheduled; thread CPU
// time does not, so both are reported.
type cpuClock struct{ start time.Duration }

func startCPU() cpuClock {
	runtime.LockOSThread()
	return cpuClock{threadCPU()}
}

// report adds a "cpu-ns/<unit>" metric: thread CPU time divided by b.N·perOp.
func (c cpuClock) report(b *testing.B, perOp int, unit string) {
	d := threadCPU() - c.start
	runtime.UnlockOSThread()
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N)/float64(perOp), "cpu-ns/"+unit)
}

func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
