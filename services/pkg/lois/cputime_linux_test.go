package lois

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cpuClock measures the CPU time of the benchmark's own thread. The benchmark machine is
// shared, and wall time per op there includes time the thread spends descheduled; thread CPU
// time does not, so both are reported. pause/resume exclude refills, as StopTimer does.
type cpuClock struct{ start, excluded, pausedAt time.Duration }

func startCPU() *cpuClock {
	runtime.LockOSThread()
	return &cpuClock{start: threadCPU()}
}

func (c *cpuClock) pause()  { c.pausedAt = threadCPU() }
func (c *cpuClock) resume() { c.excluded += threadCPU() - c.pausedAt }

// report adds a "cpu-ns/op" metric: thread CPU time divided by b.N.
func (c *cpuClock) report(b *testing.B) {
	d := threadCPU() - c.start - c.excluded
	runtime.UnlockOSThread()
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// threadCPU reads CLOCK_THREAD_CPUTIME_ID, which is exact to the nanosecond (getrusage's
// per-thread times are tick-sampled, too coarse around frequent refills).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
