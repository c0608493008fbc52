package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The role processes allocate many small, short-lived objects (envelopes, gRPC frames, NATS
// messages) over a small live heap, and the gateway keeps thousands of parked calls whose
// stacks every collection scans. At Go's default GOGC=100 the collector took 14 % of the
// gateway's CPU in `mohito bench` at 400 commands/s; with GOGC=400 every role used 10–30 %
// less CPU per command (docs/benchmarks-services.md). So a role runs with roleGCPercent
// unless GOGC is set, and — unless GOMEMLIMIT is set — with a soft memory limit of 3/4 of its
// cgroup's memory limit, so that a larger heap target never pushes a container past its
// limit: near the limit the collector runs as often as it must.
const roleGCPercent = 400

// tuneRoleGC applies roleGCPercent and the cgroup-derived memory limit; it returns the GC
// percent and soft limit (0: none) in force.
func tuneRoleGC() (percent int, limit int64) {
	percent = -1
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(roleGCPercent)
		percent = roleGCPercent
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		if max := cgroupMemoryMax(); max > 0 {
			limit = max / 4 * 3
			debug.SetMemoryLimit(limit)
		}
	}
	return percent, limit
}

// cgroupMemoryMax is the process's cgroup memory limit in bytes (cgroup v2 memory.max, else
// v1 memory.limit_in_bytes), 0 when there is none.
func cgroupMemoryMax() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if b, err := os.ReadFile(p); err == nil {
			return parseMemoryMax(string(b))
		}
	}
	return 0
}

// parseMemoryMax reads a cgroup memory limit: "max", or a v1 limit of 2^60 bytes or more,
// means none.
func parseMemoryMax(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0
	}
	return n
}
