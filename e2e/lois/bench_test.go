package lois

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTUNPathPacketRate measures packets/s through the real TUN path with LOIS against the
// same path without it (--plain: the same processes, TUNs and UDP wire, the CI a plain L4
// NAT), and LOIS in paper mode (TCP options, IP ID and TTL left as the stack wrote them),
// rotating the three modes five times in one run. Two workloads: a 64 MiB HTTP download
// (curl; full-size segments) and 2000 small request/response pairs on one keep-alive
// connection (Go client in the device namespace; latency-bound small packets). Packets are
// those the DI handled (uploads sent + downloads recovered); role CPU is the user + system
// time of the di, ci and si processes during the download. It asserts no timing, only that
// every exchange succeeded; the figures go to docs/benchmarks.md:
//
//	cd e2e && LOIS_TUN_BENCH=1 go test ./lois/ -run TestTUNPathPacketRate -v
//
// LOIS_TUN_BENCH_ROUNDS=n changes the number of rounds; LOIS_TUN_BENCH_NOSACK=1 turns SACK
// and TCP timestamps off at both endpoints in both modes (hardened LOIS strips them, D-10);
// LOIS_TUN_BENCH_TXQLEN=q sets the TUN devices' queue length (default: the roles' 4096);
// LOIS_TUN_BENCH_BATCH=n gives the roles --batch n (1: the CI and the SI move one packet
// per system call).
func TestTUNPathPacketRate(t *testing.T) {
	if os.Getenv("LOIS_TUN_BENCH") == "" {
		t.Skip("set LOIS_TUN_BENCH=1 to measure the TUN path (needs root)")
	}
	const bulk = 64 << 20
	blob := make([]byte, 1<<20)
	h := http.NewServeMux()
	h.HandleFunc("/bulk", func(rw http.ResponseWriter, _ *http.Request) {
		for range bulk / len(blob) {
			rw.Write(blob)
		}
	})
	h.HandleFunc("/small", func(rw http.ResponseWriter, _ *http.Request) { io.WriteString(rw, "ok") })
	type result struct{ bulkPPS, smallPPS, mbps, bulkCPU float64 }
	modes := []string{"plain", "lois"}
	res := map[string][]result{}
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("LOIS_TUN_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	for round := range rounds {
		for k := range modes {
			mode := modes[(round+k)%len(modes)]
			name := fmt.Sprintf("round%d/%s", round, mode)
			t.Run(name, func(t *testing.T) {
				batch, _ := strconv.Atoi(os.Getenv("LOIS_TUN_BENCH_BATCH"))
				w := setup(t, options{plain: mode == "plain", paper: mode == "lois-paper", n: 1 << 17, handler: h, batch: batch})
				if os.Getenv("LOIS_TUN_BENCH_NOSACK") != "" { // both modes without SACK and timestamps, as hardened LOIS makes them
					for _, n := range []netns{w.dev, w.srv} {
						n.sysctl(t, "net.ipv4.tcp_sack=0")
						n.sysctl(t, "net.ipv4.tcp_timestamps=0")
					}
				}
				if q := os.Getenv("LOIS_TUN_BENCH_TXQLEN"); q != "" {
					w.dev.ip(t, "link", "set", w.devTUN, "txqueuelen", q)
					w.srv.ip(t, "link", "set", w.srvTUN, "txqueuelen", q)
				}
				count := func() int { return w.packets(t, w.dev, "di", "up", "ok") + w.packets(t, w.dev, "di", "down", "ok") }
				p0 := count()
				cpu0 := w.roleCPU(t)
				roles0 := []time.Duration{nsCPU(t, w.dev), nsCPU(t, w.cloud), nsCPU(t, w.srv)}
				start := time.Now()
				out, err := w.dev.cmd("curl", "-sS", "-o", "/dev/null", "-w", "%{size_download}", "--max-time", "300",
					fmt.Sprintf("http://%s:%d/bulk", cipS, sid)).Output()
				el := time.Since(start)
				if err != nil || string(out) != fmt.Sprint(bulk) {
					t.Fatalf("bulk download: %v, %s bytes", err, out)
				}
				time.Sleep(100 * time.Millisecond)
				// The server is the bulk sender: how it recovered losses (SACK or Reno) and
				// whether it saw reordering, from its namespace's fresh counters.
				t.Logf("%s server TCP after the bulk download: %s", name, w.srv.tcpStats(t))
				p1 := count()
				r := result{bulkPPS: float64(p1-p0) / el.Seconds(), mbps: bulk * 8 / el.Seconds() / 1e6,
					bulkCPU: (w.roleCPU(t) - cpu0).Seconds() * 1e6 / float64(p1-p0)}
				var each []string
				for i, n := range []netns{w.dev, w.cloud, w.srv} {
					each = append(each, fmt.Sprintf("%s %.1f", []string{"di", "ci", "si"}[i], (nsCPU(t, n)-roles0[i]).Seconds()*1e6/float64(p1-p0)))
				}
				t.Logf("%s role CPU per packet, µs: %s", name, strings.Join(each, ", "))

				c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1,
					DialContext: func(_ context.Context, network, addr string) (net.Conn, error) { return w.dev.dial(network, addr) }}}
				const reqs = 2000
				start = time.Now()
				for range reqs {
					resp, err := c.Get(fmt.Sprintf("http://%s:%d/small", cipS, sid))
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				el = time.Since(start)
				c.CloseIdleConnections()
				time.Sleep(100 * time.Millisecond)
				r.smallPPS = float64(count()-p1) / el.Seconds()
				t.Logf("%s: bulk %.0f packets/s (%.0f Mbit/s, %.1f µs CPU of di+ci+si per packet), small %.0f packets/s",
					name, r.bulkPPS, r.mbps, r.bulkCPU, r.smallPPS)
				res[mode] = append(res[mode], r)
				t.Logf("%s drops: device TUN tx %s, server TUN tx %s", name, w.dev.txDropped(t, w.devTUN), w.srv.txDropped(t, w.srvTUN))
			})
		}
	}
	med := func(mode string, f func(result) float64) float64 {
		v := make([]float64, len(res[mode]))
		for i, r := range res[mode] {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	for _, m := range modes {
		pps, mb := med(m, func(r result) float64 { return r.bulkPPS }), med(m, func(r result) float64 { return r.mbps })
		cpu, small := med(m, func(r result) float64 { return r.bulkCPU }), med(m, func(r result) float64 { return r.smallPPS })
		pps0, mb0 := med("plain", func(r result) float64 { return r.bulkPPS }), med("plain", func(r result) float64 { return r.mbps })
		cpu0, small0 := med("plain", func(r result) float64 { return r.bulkCPU }), med("plain", func(r result) float64 { return r.smallPPS })
		t.Logf("median of %d, %s: bulk %.0f packets/s (%.2fx plain), %.0f Mbit/s (%.2fx), %.1f µs role CPU per packet (%.2fx); small %.0f packets/s (%.2fx)",
			rounds, m, pps, pps/pps0, mb, mb/mb0, cpu, cpu/cpu0, small, small/small0)
	}
}

// roleCPU is the CPU time (user + system) the role processes have used so far: every
// process in the three namespaces (only the roles, once curl has exited).
func (w *world) roleCPU(t *testing.T) time.Duration {
	t.Helper()
	var d time.Duration
	for _, n := range []netns{w.dev, w.cloud, w.srv} {
		d += nsCPU(t, n)
	}
	return d
}

// nsCPU is the CPU time (user + system) the processes in namespace n have used so far.
func nsCPU(t *testing.T, n netns) time.Duration {
	t.Helper()
	var ticks int64
	for _, pid := range strings.Fields(sh(t, "ip", "netns", "pids", n.name)) {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		u, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
		s, _ := strconv.ParseInt(f[12], 10, 64) // stime, field 15
		ticks += u + s
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// txDropped is the tx_dropped counter of a device in the namespace (packets the kernel could
// not queue to a TUN reader).
func (n netns) txDropped(t *testing.T, dev string) string {
	t.Helper()
	return strings.TrimSpace(sh(t, "ip", "netns", "exec", n.name, "cat", "/sys/class/net/"+dev+"/statistics/tx_dropped"))
}

// tcpStats are the namespace's TCP retransmission, recovery and reordering counters (a
// namespace made for the round starts them at zero).
func (n netns) tcpStats(t *testing.T) string {
	t.Helper()
	out := sh(t, "ip", "netns", "exec", n.name, "nstat", "-asz", "TcpRetransSegs", "TcpExtTCPSackRecovery", "TcpExtTCPRenoRecovery",
		"TcpExtTCPSACKReorder", "TcpExtTCPRenoReorder", "TcpExtTCPTSReorder", "TcpExtTCPSACKDiscard")
	var f []string
	for _, line := range strings.Split(out, "\n") {
		if c := strings.Fields(line); len(c) >= 2 && !strings.HasPrefix(c[0], "#") {
			f = append(f, strings.TrimPrefix(strings.TrimPrefix(c[0], "TcpExt"), "Tcp")+"="+c[1])
		}
	}
	return strings.Join(f, " ")
}
