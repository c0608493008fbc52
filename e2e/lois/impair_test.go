package lois

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// impairer relays the wire datagrams of one direction, dropping, duplicating and reordering
// them with a seeded PRNG (the kernel here has no netem).
type impairer struct {
	conn    *net.UDPConn
	to      netip.AddrPort
	dropped atomic.Int64
	dups    atomic.Int64
	held    atomic.Int64
	wg      sync.WaitGroup
}

const (
	pDrop = 0.03
	pDup  = 0.05
	pHold = 0.10 // sent after the next datagram
)

func startImpairer(t *testing.T, n netns, listen string, to netip.AddrPort, seed uint64) *impairer {
	t.Helper()
	im := &impairer{to: to}
	if err := n.do(func() (err error) {
		im.conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(listen)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	im.conn.SetReadBuffer(8 << 20)
	rnd := mrand.New(mrand.NewPCG(seed, 1))
	im.wg.Add(1)
	go func() {
		defer im.wg.Done()
		buf := make([]byte, 65536)
		var hold []byte
		for {
			im.conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			k, _, err := im.conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					if hold != nil {
						im.conn.WriteToUDPAddrPort(hold, im.to)
						hold = nil
					}
					continue
				}
				return
			}
			p := buf[:k]
			switch x := rnd.Float64(); {
			case x < pDrop:
				im.dropped.Add(1)
				continue
			case x < pDrop+pDup:
				im.conn.WriteToUDPAddrPort(p, im.to)
				im.conn.WriteToUDPAddrPort(p, im.to)
				im.dups.Add(1)
			case x < pDrop+pDup+pHold && hold == nil:
				hold = bytes.Clone(p)
				im.held.Add(1)
				continue
			default:
				im.conn.WriteToUDPAddrPort(p, im.to)
			}
			if hold != nil {
				im.conn.WriteToUDPAddrPort(hold, im.to)
				hold = nil
			}
		}
	}()
	t.Cleanup(func() { im.conn.Close(); im.wg.Wait() })
	return im
}

// TestHTTPThroughLossReorderingDuplication (spec §3.10, T11/T12 on the real path): both
// wire directions pass an impairer that drops 3 %, duplicates 5 % and delays 10 % of the
// datagrams behind the next one. A 2 MiB HTTP download still arrives intact — TCP resends
// what was lost, each resend with a fresh keystream — and every duplicate is rejected by
// the first receiver after the copy it duplicates: counted as a replay at the CI (uploads)
// and at the DI (downloads), exactly as many as the impairer made.
func TestHTTPThroughLossReorderingDuplication(t *testing.T) {
	body := make([]byte, 2<<20)
	for i := range body {
		body[i] = byte(i * 7)
	}
	sum := sha256.Sum256(body)
	upRelay, downRelay := fmt.Sprintf("%s:%d", cloudWire, 7500), fmt.Sprintf("%s:%d", cloudWire, 7501)
	w := setup(t, options{n: 1 << 16, cloudWire: upRelay, devWire: downRelay,
		handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.Write(body) })})
	up := startImpairer(t, w.cloud, upRelay, netip.MustParseAddrPort(fmt.Sprintf("%s:%d", cloudWire, ciPort)), 1)
	down := startImpairer(t, w.cloud, downRelay, netip.MustParseAddrPort(fmt.Sprintf("%s:%d", devWire, diPort)), 2)

	out, err := w.dev.cmd("curl", "-sS", "--max-time", "120", fmt.Sprintf("http://%s:%d/big", cipS, sid)).Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	if len(out) != len(body) || sha256.Sum256(out) != sum {
		t.Fatalf("got %d bytes, want the %d-byte body intact", len(out), len(body))
	}
	// The connection has closed; the last datagrams settle.
	time.Sleep(300 * time.Millisecond)
	ciReplay := w.packets(t, w.cloud, "ci", "up", "replay")
	diReplay := w.packets(t, w.dev, "di", "down", "replay")
	t.Logf("uploads: %d dropped, %d duplicated, %d reordered; downloads: %d dropped, %d duplicated, %d reordered; replays counted: CI %d, DI %d",
		up.dropped.Load(), up.dups.Load(), up.held.Load(), down.dropped.Load(), down.dups.Load(), down.held.Load(), ciReplay, diReplay)
	if up.dropped.Load() == 0 || down.dropped.Load() == 0 || up.dups.Load() == 0 || down.dups.Load() == 0 || down.held.Load() == 0 {
		t.Fatal("the impairers did not drop, duplicate and reorder in both directions")
	}
	if ciReplay != int(up.dups.Load()) || diReplay != int(down.dups.Load()) {
		t.Fatalf("replays counted CI %d, DI %d; duplicates made %d up, %d down", ciReplay, diReplay, up.dups.Load(), down.dups.Load())
	}
	if u := w.packets(t, w.cloud, "ci", "up", "unknown_id") + w.packets(t, w.dev, "di", "down", "unknown_id"); u != 0 {
		t.Fatalf("%d packets rejected as unknown ids", u)
	}
}
