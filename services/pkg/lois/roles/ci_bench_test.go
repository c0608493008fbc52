package roles

import (
	"context"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
)

// TestCIDaemonPacketRate measures packets/s through the CI's packet loop (roles.Cloud.Run:
// wire socket in, table lookup and rewrite, wire socket out) reading bursts (recvmmsg +
// ForwardBatch + sendmmsg, batch 16) against reading one datagram per call (batch 1, the
// loop before batching: recvfrom + Forward + sendto), rounds alternating in one run. The CI
// table holds LOIS_CI_BENCH_ENTRIES upload entries (default 10⁶: one measured session and a
// filler session). Each round queues 20,000 hidden 52-byte uploads in a fresh CI's socket
// before the CI starts, then times the CI from its start until a sink socket has received
// every one: the rate is the loop's, not a sender's; the process's CPU time over the same
// interval, per packet, is the figure a loaded machine disturbs least. It asserts only that every packet was
// forwarded; the figures go to docs/benchmarks.md:
//
//	cd services && LOIS_CI_BENCH=1 go test ./pkg/lois/roles/ -run TestCIDaemonPacketRate -v
//
// LOIS_CI_BENCH_ROUNDS changes the number of rounds (default 3). Needs root (SO_RCVBUFFORCE:
// the queued burst exceeds the default socket buffer).
func TestCIDaemonPacketRate(t *testing.T) {
	if os.Getenv("LOIS_CI_BENCH") == "" {
		t.Skip("set LOIS_CI_BENCH=1 to measure the CI loop's packet rate (needs root)")
	}
	envInt := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	entries, rounds := envInt("LOIS_CI_BENCH_ENTRIES", 1_000_000), envInt("LOIS_CI_BENCH_ROUNDS", 3)
	const burst = 20000
	modes := []int{1, 16}
	need := burst * rounds * len(modes)
	now := time.Now()
	sink := udp(t)
	forceBuffer(t, sink)
	prov, err := Provision{Services: []uint16{sid}, N: uint32(need + 256), Lifetime: time.Hour, Epoch: 1,
		DeviceIP: netip.AddrFrom4(dip), DeviceWire: addrOf(sink)}.Run(now)
	if err != nil {
		t.Fatal(err)
	}
	keys := []*contract.Keys{prov.Cloud}
	if entries > need {
		filler, err := Provision{Services: []uint16{sid}, N: uint32(entries - need), Lifetime: time.Hour, Epoch: 1,
			DeviceIP: netip.MustParseAddr("10.99.0.3"), DeviceWire: addrOf(sink)}.Run(now)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, filler.Cloud)
	}
	// The uploads, hidden by the core DI from the measured session's pool (256 spare: the
	// registrar drops indices whose ids collide with an earlier stream's).
	core := lois.Config{CIP: cip}
	dev := lois.NewDevice(core, nil)
	pool := &lois.Pool{}
	for i := range prov.Device.Streams {
		if rec := &prov.Device.Streams[i]; rec.Dir == "up" {
			s, err := rec.Core()
			if err != nil {
				t.Fatal(err)
			}
			pool.Add(&s, 1, 0, s.Expiry)
		}
	}
	dev.Up.Set(sid, pool)
	pkts := make([][]byte, need)
	for i := range pkts {
		raw := tcp(dip, cip, dport, sid, uint32(i), 0, 0x10, nil)
		buf := make([]byte, lois.Headroom+len(raw))
		copy(buf[lois.Headroom:], raw)
		off, err := dev.HideUpload(buf, lois.Headroom, now.Unix())
		if err != nil {
			t.Fatalf("hide %d: %v", i, err)
		}
		pkts[i] = buf[off:]
	}

	var got atomic.Int64
	sb, err := newWireBatch(sink, 64, contract.MaxDatagram)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			n, err := sb.read()
			if err != nil {
				return
			}
			got.Add(int64(n))
		}
	}()
	t.Cleanup(func() { sink.Close() })
	sender := udp(t)
	tx, err := newWireBatch(sender, lois.BatchSize, 64)
	if err != nil {
		t.Fatal(err)
	}

	pps, cpuNs := map[int][]float64{}, map[int][]float64{}
	next := 0
	for round := range rounds {
		for k := range modes {
			batch := modes[(round+k)%len(modes)]
			ciWire := udp(t)
			forceBuffer(t, ciWire)
			m := NewMetrics(nil)
			c, err := NewCloud(CloudConfig{Core: core, Keys: keys, Wire: ciWire, Grace: time.Minute, Metrics: m, Log: telemetry.Discard(),
				Batch: batch, Backends: []ServerBackend{{SID: sid, Backend: lois.Backend{IP: sip, Port: pSrv}, Wire: addrOf(sink)}}})
			if err != nil {
				t.Fatal(err)
			}
			to := sockaddr4(addrOf(ciWire))
			for _, p := range pkts[next : next+burst] {
				tx.queue(p, to)
				if tx.nw == len(tx.whdr) {
					if _, failed, err := tx.flush(); err != nil || failed > 0 {
						t.Fatalf("queueing the burst: %d failed, %v", failed, err)
					}
				}
			}
			if _, failed, err := tx.flush(); err != nil || failed > 0 {
				t.Fatalf("queueing the burst: %d failed, %v", failed, err)
			}
			next += burst
			base := got.Load()
			cpu0 := processCPU(t)
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			start := time.Now()
			go func() {
				defer wg.Done()
				if err := c.Run(ctx); err != nil {
					t.Error(err)
				}
			}()
			deadline := start.Add(2 * time.Minute)
			for got.Load() < base+burst && time.Now().Before(deadline) {
				time.Sleep(200 * time.Microsecond)
			}
			el := time.Since(start)
			cpu := processCPU(t) - cpu0
			runtime.ReadMemStats(&ms1)
			cancel()
			wg.Wait()
			if n, ok := got.Load()-base, testutil.ToFloat64(m.Packets.WithLabelValues("ci", "up", contract.ResultOK)); n != burst || ok != burst {
				t.Fatalf("batch %d: the CI forwarded %.0f and the sink got %d of %d packets", batch, ok, n, burst)
			}
			r, perPkt := burst/el.Seconds(), float64(cpu.Nanoseconds())/burst
			pps[batch] = append(pps[batch], r)
			cpuNs[batch] = append(cpuNs[batch], perPkt)
			t.Logf("round %d, batch %d: %.0f packets/s, %.0f ns of process CPU per packet, %.3f heap allocations per packet (the process's), table %d entries",
				round, batch, r, perPkt, float64(ms1.Mallocs-ms0.Mallocs)/burst, entries)
		}
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	for _, b := range modes {
		t.Logf("median of %d, batch %d: %.0f packets/s (%.2fx batch 1), %.0f ns CPU per packet (%.2fx)", rounds, b,
			med(pps[b]), med(pps[b])/med(pps[1]), med(cpuNs[b]), med(cpuNs[b])/med(cpuNs[1]))
	}
}

// processCPU is the user + system time this process has used (the CI's loop, the sink's
// reads and the kernel's loopback delivery, which runs in the sender's system call).
func processCPU(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// forceBuffer gives c a 64 MiB receive buffer past net.core.rmem_max (root).
func forceBuffer(t *testing.T, c *net.UDPConn) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if cerr := rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20) }); cerr != nil || err != nil {
		t.Fatalf("SO_RCVBUFFORCE (needs root): %v %v", cerr, err)
	}
}
