package roles

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// memTUN stands in for a TUN device: packets the test injects are read by the role, packets
// the role writes are delivered to the test.
type memTUN struct {
	in, out chan []byte
	done    chan struct{}
	once    sync.Once
}

func newMemTUN() *memTUN {
	return &memTUN{in: make(chan []byte, 4096), out: make(chan []byte, 4096), done: make(chan struct{})}
}

func (m *memTUN) Read(b []byte) (int, error) {
	select {
	case p := <-m.in:
		return copy(b, p), nil
	case <-m.done:
		return 0, os.ErrClosed
	}
}

func (m *memTUN) Write(b []byte) (int, error) {
	m.out <- bytes.Clone(b)
	return len(b), nil
}

func (m *memTUN) Close() error { m.once.Do(func() { close(m.done) }); return nil }

func (m *memTUN) next(t *testing.T) []byte {
	t.Helper()
	select {
	case p := <-m.out:
		return p
	case <-time.After(30 * time.Second): // a bound for a loaded machine (make test), not a speed
		t.Fatal("no packet came out of the TUN within 30s")
		return nil
	}
}

func (m *memTUN) none(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case p := <-m.out:
		t.Fatalf("unexpected packet of %d bytes", len(p))
	case <-time.After(within):
	}
}

var (
	cip = netip.MustParseAddr("198.18.0.1").As4()
	dip = netip.MustParseAddr("10.99.0.2").As4()
	sip = netip.MustParseAddr("10.200.0.10").As4()
)

const (
	sid   = 8080
	pSrv  = 80
	dport = 40000
)

// tcp builds an IPv4/TCP packet with valid checksums.
func tcp(src, dst [4]byte, sport, dport uint16, seq, ack uint32, flags byte, payload []byte) []byte {
	p := make([]byte, 40+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	p[6], p[8], p[9] = 0x40, 64, 6
	copy(p[12:], src[:])
	copy(p[16:], dst[:])
	binary.BigEndian.PutUint16(p[20:], sport)
	binary.BigEndian.PutUint16(p[22:], dport)
	binary.BigEndian.PutUint32(p[24:], seq)
	binary.BigEndian.PutUint32(p[28:], ack)
	p[32], p[33] = 5<<4, flags
	binary.BigEndian.PutUint16(p[34:], 64240)
	copy(p[40:], payload)
	lois.FixChecksums(p)
	return p
}

func udp(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func addrOf(c *net.UDPConn) netip.AddrPort { return c.LocalAddr().(*net.UDPAddr).AddrPort() }

// path is DI, CI and SI on loopback UDP with in-memory TUNs. The DI sends to a tap, which
// the test drives: it records every upload datagram and decides what reaches the CI.
type path struct {
	devTUN, srvTUN *memTUN
	tap, ciWire    *net.UDPConn
	m              *Metrics
	// runCI starts the CI when the path was made with pathOptions.holdCI.
	runCI func()
}

// pathOptions vary startPathWith: the CI's batch size and whether the CI waits for runCI
// (datagrams sent to it before queue in its socket and are read as bursts).
type pathOptions struct {
	batch  int
	holdCI bool
	stp    *lois.STPConfig
}

func startPath(t *testing.T, n uint32, stp ...lois.STPConfig) *path {
	t.Helper()
	var o pathOptions
	if len(stp) > 0 {
		o.stp = &stp[0]
	}
	return startPathWith(t, n, o)
}

func startPathWith(t *testing.T, n uint32, o pathOptions) *path {
	t.Helper()
	p := &path{devTUN: newMemTUN(), srvTUN: newMemTUN(), m: NewMetrics(nil)}
	diWire, ciWire, siWire := udp(t), udp(t), udp(t)
	p.tap, p.ciWire = udp(t), ciWire
	t.Cleanup(func() { p.tap.Close() })
	prov, err := Provision{Services: []uint16{sid}, N: n, Lifetime: time.Hour, Epoch: 1,
		DeviceIP: netip.AddrFrom4(dip), DeviceWire: addrOf(diWire)}.Run(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	core := lois.Config{CIP: cip}
	log := telemetry.Discard()
	pad := o.stp
	d, err := NewDevice(DeviceConfig{Core: core, Keys: prov.Device, TUN: p.devTUN, Wire: diWire, Cloud: addrOf(p.tap),
		Margin: time.Minute, Grace: time.Minute, Metrics: p.m, Log: log, STP: pad})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCloud(CloudConfig{Core: core, Keys: []*contract.Keys{prov.Cloud}, Wire: ciWire, Grace: time.Minute, Metrics: p.m, Log: log,
		Batch: o.batch, Backends: []ServerBackend{{SID: sid, Backend: lois.Backend{IP: sip, Port: pSrv}, Wire: addrOf(siWire)}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(ServerConfig{Core: core, Keys: prov.Server, Ports: map[uint16]uint16{pSrv: sid}, TUN: p.srvTUN, Wire: siWire,
		Margin: time.Minute, Grace: time.Minute, Metrics: p.m, Log: log, STP: pad})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := func(r func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	start(d.Run)
	start(s.Run)
	if o.holdCI {
		p.runCI = func() { start(c.Run) }
	} else {
		start(c.Run)
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return p
}

// capture reads the next datagram the DI sent.
func (p *path) capture(t *testing.T) []byte {
	t.Helper()
	buf := make([]byte, contract.MaxDatagram)
	p.tap.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _, err := p.tap.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func (p *path) toCI(t *testing.T, pkt []byte) {
	t.Helper()
	if _, err := p.tap.WriteToUDPAddrPort(pkt, addrOf(p.ciWire)); err != nil {
		t.Fatal(err)
	}
}

func (p *path) count(role, dir, result string) int {
	return int(testutil.ToFloat64(p.m.Packets.WithLabelValues(role, dir, result)))
}

// TestRolesRoundTrip: a packet from the device's TUN reaches the server's TUN with its
// header recovered (source, ports, seq, ack, flags, payload; checksums valid; destination
// the chosen backend), the wire copy shows none of those fields but the unified port, and
// the server's reply comes back out of the device's TUN from CIP:SID.
func TestRolesRoundTrip(t *testing.T) {
	p := startPath(t, 64)
	payload := []byte("GET / HTTP/1.1\r\n\r\n")
	p.devTUN.in <- tcp(dip, cip, dport, sid, 0x11223344, 0x55667788, 0x18, payload)
	wire := p.capture(t)
	checkHidden(t, wire, dport, sid, 0x11223344, 0x55667788)
	p.toCI(t, wire)
	got := p.srvTUN.next(t)
	if !lois.ChecksumsValid(got) {
		t.Fatal("recovered upload has bad checksums")
	}
	want := tcp(dip, sip, dport, pSrv, 0x11223344, 0x55667788, 0x18, payload)
	if !bytes.Equal(got[12:40], want[12:40]) || !bytes.Equal(got[40:], payload) {
		t.Fatalf("recovered upload\n got %x\nwant %x", got, want)
	}

	p.srvTUN.in <- tcp(sip, dip, pSrv, dport, 0xa0a0a0a0, 0x11223356, 0x18, []byte("HTTP/1.1 200 OK\r\n\r\n"))
	back := p.devTUN.next(t)
	wantBack := tcp(cip, dip, sid, dport, 0xa0a0a0a0, 0x11223356, 0x18, nil)
	if !lois.ChecksumsValid(back) || !bytes.Equal(back[12:34], wantBack[12:34]) {
		t.Fatalf("recovered download\n got %x\nwant %x", back[:40], wantBack[:40])
	}
	// A role counts a packet after writing it out: wait for every count (make test once
	// read the SI's before it was written).
	counted := func() bool {
		return p.count("di", "up", "ok") == 1 && p.count("ci", "up", "ok") == 1 && p.count("si", "up", "ok") == 1 &&
			p.count("si", "down", "ok") == 1 && p.count("di", "down", "ok") == 1
	}
	testEventually(t, counted)
	if !counted() {
		t.Fatal("every role should have counted one packet ok per direction")
	}
}

// checkHidden fails unless the wire packet shows neither the device's address and port nor
// the service, seq or ack, and addresses CIP at the unified port.
func checkHidden(t *testing.T, w []byte, sport, sidPort uint16, seq, ack uint32) {
	t.Helper()
	if [4]byte(w[16:20]) != cip || binary.BigEndian.Uint16(w[22:]) != lois.DefaultUnifiedPort {
		t.Fatalf("wire packet not addressed to CIP:U: %x", w[:40])
	}
	if [4]byte(w[12:16]) == dip || binary.BigEndian.Uint16(w[20:]) == sport ||
		binary.BigEndian.Uint32(w[24:]) == seq || binary.BigEndian.Uint32(w[28:]) == ack ||
		bytes.Contains(w[:52], binary.BigEndian.AppendUint16(nil, sidPort)) {
		t.Fatalf("wire packet shows an original header field: %x", w[:52])
	}
}

// TestRolesLossReorderDuplicateReplay (spec §3.10, T11, T12 on the role path): of 200
// uploads, the tap drops every third, delivers the rest in reverse order, duplicates every
// fifth delivered and finally replays the first one again. Exactly the delivered distinct
// packets reach the server, in the order delivered; every duplicate and the replay are
// rejected at CI and counted as replays, none as unknown.
func TestRolesLossReorderDuplicateReplay(t *testing.T) {
	p := startPath(t, 512)
	const n = 200
	var wire [][]byte
	for i := range n {
		p.devTUN.in <- tcp(dip, cip, dport, sid, uint32(i), 0, 0x10, fmt.Appendf(nil, "pkt %d", i))
		wire = append(wire, p.capture(t))
	}
	var want []int
	dups := 0
	for i := n - 1; i >= 0; i-- {
		if i%3 == 0 {
			continue // lost
		}
		p.toCI(t, wire[i])
		want = append(want, i)
		if len(want)%5 == 0 {
			p.toCI(t, wire[i])
			dups++
		}
	}
	for _, i := range want {
		got := p.srvTUN.next(t)
		if s := binary.BigEndian.Uint32(got[24:]); s != uint32(i) {
			t.Fatalf("server got seq %d, want %d", s, i)
		}
	}
	p.toCI(t, wire[n-1]) // replay of a consumed packet
	dups++
	testEventually(t, func() bool { return p.count("ci", "up", "replay") == dups })
	p.srvTUN.none(t, 200*time.Millisecond)
	if u := p.count("ci", "up", "unknown_id"); u != 0 {
		t.Fatalf("%d duplicates counted as unknown ids", u)
	}
	testEventually(t, func() bool { return p.count("ci", "up", "ok") == len(want) })
	// An id never issued is unknown, not a replay.
	forged := bytes.Clone(wire[1])
	binary.BigEndian.PutUint64(forged[44:], 0x0123456789abcdef)
	p.toCI(t, forged)
	testEventually(t, func() bool { return p.count("ci", "up", "unknown_id") == 1 })
}

// TestRolesExhaustion: with n keystreams, upload n+k drops k packets counted "exhausted"
// and never sends a keystream twice.
func TestRolesExhaustion(t *testing.T) {
	p := startPath(t, 8)
	seen := map[string]bool{}
	sent := 0
	for i := range 20 {
		p.devTUN.in <- tcp(dip, cip, dport, sid, uint32(i), 0, 0x10, nil)
	}
	testEventually(t, func() bool { return p.count("di", "up", "ok")+p.count("di", "up", "exhausted") == 20 })
	sent = p.count("di", "up", "ok")
	for range sent {
		w := p.capture(t)
		id := string(w[44:52])
		if seen[id] {
			t.Fatal("keystream id sent twice")
		}
		seen[id] = true
	}
	if sent > 8 || p.count("di", "up", "exhausted") != 20-sent {
		t.Fatalf("sent %d with 8 keystreams, exhausted %d", sent, p.count("di", "up", "exhausted"))
	}
}

func testEventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPlainRewriteChecksums: the baseline's incremental NAT keeps both checksums valid.
func TestPlainRewriteChecksums(t *testing.T) {
	p := tcp(dip, cip, dport, sid, 1, 2, 0x18, []byte("some payload bytes"))
	ihl, ok := plainParse(p)
	if !ok {
		t.Fatal("plainParse refused a valid packet")
	}
	plainRewrite(p, ihl, 16, 2, sip, pSrv)
	if !lois.ChecksumsValid(p) || [4]byte(p[16:20]) != sip || binary.BigEndian.Uint16(p[22:]) != pSrv {
		t.Fatalf("destination rewrite: %x", p[:40])
	}
	plainRewrite(p, ihl, 12, 0, cip, sid)
	if !lois.ChecksumsValid(p) || [4]byte(p[12:16]) != cip || binary.BigEndian.Uint16(p[20:]) != sid {
		t.Fatalf("source rewrite: %x", p[:40])
	}
}

// FuzzPlainPacket: the baseline's parser and NAT never panic on arbitrary input and keep
// valid checksums valid.
func FuzzPlainPacket(f *testing.F) {
	f.Add(tcp(dip, cip, dport, sid, 1, 2, 0x18, []byte("x")))
	f.Add([]byte{0x45, 0, 0, 20})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		ihl, ok := plainParse(pkt)
		if !ok {
			return
		}
		valid := lois.ChecksumsValid(pkt)
		plainRewrite(pkt, ihl, 16, 2, sip, pSrv)
		if valid && !lois.ChecksumsValid(pkt) {
			t.Fatal("rewrite broke valid checksums")
		}
	})
}

// TestRolesPadding (spec §4, T20 on the role path): with STP on (windows always open, 20 kB/s
// of cover), the DI sends upload pads and the SI download pads once a real flow exists; the
// CI forwards pads like any packet; the SI and the DI drop every pad they recover (counted
// pad_dropped, as many as were sent) and only the real packets reach the TUNs.
func TestRolesPadding(t *testing.T) {
	p := startPath(t, 4096, lois.STPConfig{Period: 200 * time.Millisecond, Q: 1, Rate: 20000, Tick: 10 * time.Millisecond})
	go func() { // the tap passes everything on
		buf := make([]byte, contract.MaxDatagram)
		for {
			n, _, err := p.tap.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			p.tap.WriteToUDPAddrPort(buf[:n], addrOf(p.ciWire))
		}
	}()
	p.devTUN.in <- tcp(dip, cip, dport, sid, 1, 0, 0x02, nil)
	if got := p.srvTUN.next(t); binary.BigEndian.Uint32(got[24:]) != 1 {
		t.Fatalf("server TUN got %x, want the real SYN", got[:40])
	}
	p.srvTUN.in <- tcp(sip, dip, pSrv, dport, 9, 2, 0x12, nil)
	if got := p.devTUN.next(t); binary.BigEndian.Uint32(got[24:]) != 9 {
		t.Fatalf("device TUN got %x, want the real SYN-ACK", got[:40])
	}
	testEventually(t, func() bool {
		return p.count("si", "up", "pad_dropped") >= 20 && p.count("di", "down", "pad_dropped") >= 20
	})
	p.srvTUN.none(t, 100*time.Millisecond)
	p.devTUN.none(t, 0)
	if up, sent := p.count("si", "up", "pad_dropped"), p.count("di", "up", "pad_sent"); up > sent || sent-up > 5 {
		t.Fatalf("SI dropped %d pads of %d sent", up, sent)
	}
	if p.count("si", "up", "ok") > 1 || p.count("di", "down", "ok") > 1 {
		t.Fatal("a pad was delivered as a real packet")
	}
}
