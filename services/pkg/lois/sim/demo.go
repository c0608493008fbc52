// Package sim runs a LOIS cloud in one process for the embedded demo (`obscura demo`): the
// device, cloud and server interfaces of services/pkg/lois/roles on loopback UDP (spec §10's
// emulated wire), with in-memory TUNs instead of kernel ones (no root needed), and one HTTP
// exchange of a device shown with its header fields before protection, on the wire, and as
// the server receives them.
package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/lois/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// DemoOptions configures the demo.
type DemoOptions struct {
	// Keystreams per service and direction the device registers.
	Keystreams uint32
	// Registerer, when set, holds the DI's, CI's and SI's metrics (e2e/dashboards scrapes
	// them); nil registers none.
	Registerer prometheus.Registerer
	// Hold keeps the roles running this long after the exchange, so a scraper sees what
	// their maintenance tick (every 250 ms) publishes: the Vacuum tables' gauges.
	Hold time.Duration
}

// DefaultDemoOptions are the demo's defaults.
func DefaultDemoOptions() DemoOptions { return DemoOptions{Keystreams: 64} }

// DemoSummary is what the demo showed.
type DemoSummary struct {
	// Packets is the number of packets of the exchange (both directions).
	Packets int
	// WireClean: no wire packet carried the device's address, its port, the service's port
	// or a seq/ack value the endpoints used; uploads showed only CIP and the unified port.
	WireClean bool
	// ServerSawDevice: every upload reached the server with the device's own address and
	// port; every reply reached the device from CIP and the service port.
	ServerSawDevice bool
	// Response is the HTTP status line the device received.
	Response string
}

var (
	cip = netip.MustParseAddr("198.18.0.1").As4()
	dip = netip.MustParseAddr("10.99.0.2").As4()
	sip = netip.MustParseAddr("10.200.0.10").As4()
)

const (
	sid    = 8080
	pSrv   = 80
	dport  = 40123
	dISN   = 0x3b9aca07
	sISN   = 0x7a11e5d3
	synACK = 0x12
	fACK   = 0x10
	fPSH   = 0x08
	fSYN   = 0x02
	fFIN   = 0x01
)

// RunDemo runs one HTTP GET of a device through DI → CI → SI and back, printing each packet.
func RunDemo(ctx context.Context, o DemoOptions, out io.Writer) (*DemoSummary, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	devTUN, srvTUN := newMemTUN(), newMemTUN()
	listen := func() (*net.UDPConn, error) {
		return net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	}
	var conns []*net.UDPConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var socks [5]*net.UDPConn
	for i := range socks {
		c, err := listen()
		if err != nil {
			return nil, err
		}
		socks[i], conns = c, append(conns, c)
	}
	diWire, ciWire, siWire, upTap, downTap := socks[0], socks[1], socks[2], socks[3], socks[4]
	addr := func(c *net.UDPConn) netip.AddrPort { return c.LocalAddr().(*net.UDPAddr).AddrPort() }

	// The registrar's step: one session, its keys split by role (the seed is never handed out).
	prov, err := roles.Provision{Services: []uint16{sid}, N: o.Keystreams, Lifetime: time.Hour, Epoch: 1,
		DeviceIP: netip.AddrFrom4(dip), DeviceWire: addr(downTap)}.Run(time.Now())
	if err != nil {
		return nil, err
	}
	core := lois.Config{CIP: cip}
	m, log := roles.NewMetrics(o.Registerer), telemetry.Discard()
	d, err := roles.NewDevice(roles.DeviceConfig{Core: core, Keys: prov.Device, TUN: devTUN, Wire: diWire, Cloud: addr(upTap),
		Margin: time.Minute, Grace: time.Minute, Metrics: m, Log: log})
	if err != nil {
		return nil, err
	}
	c, err := roles.NewCloud(roles.CloudConfig{Core: core, Keys: []*contract.Keys{prov.Cloud}, Wire: ciWire, Grace: time.Minute, Metrics: m, Log: log,
		Backends: []roles.ServerBackend{{SID: sid, Backend: lois.Backend{IP: sip, Port: pSrv}, Wire: addr(siWire)}}})
	if err != nil {
		return nil, err
	}
	s, err := roles.NewServer(roles.ServerConfig{Core: core, Keys: prov.Server, Ports: map[uint16]uint16{pSrv: sid}, TUN: srvTUN, Wire: siWire,
		Margin: time.Minute, Grace: time.Minute, Metrics: m, Log: log})
	if err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); devTUN.Close(); srvTUN.Close(); wg.Wait() }()
	for _, r := range []func(context.Context) error{d.Run, c.Run, s.Run} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = r(rctx) }()
	}

	// The wire taps record every datagram and pass it on: device → cloud, server → device.
	var wireMu sync.Mutex
	var wire [][]byte
	relay := func(from *net.UDPConn, to netip.AddrPort) {
		defer wg.Done()
		buf := make([]byte, contract.MaxDatagram)
		for {
			n, _, err := from.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			wireMu.Lock()
			wire = append(wire, bytes.Clone(buf[:n]))
			wireMu.Unlock()
			_, _ = from.WriteToUDPAddrPort(buf[:n], to)
		}
	}
	wg.Add(2)
	go relay(upTap, addr(ciWire))
	go relay(downTap, addr(diWire))
	defer upTap.Close()
	defer downTap.Close()
	lastWire := func() []byte {
		wireMu.Lock()
		defer wireMu.Unlock()
		if len(wire) == 0 {
			return nil
		}
		return wire[len(wire)-1]
	}

	req, _ := http.NewRequest(http.MethodGet, "http://198.18.0.1:8080/status", nil)
	req.Header.Set("User-Agent", "obscura-demo-device/1")
	var reqBuf bytes.Buffer
	_ = req.Write(&reqBuf)
	body := "sensor ok\n"
	resp := &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Content-Type": {"text/plain"}},
		ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}
	var respBuf bytes.Buffer
	_ = resp.Write(&respBuf)

	type step struct {
		up       bool
		seq, ack uint32
		flags    byte
		payload  []byte
		what     string
	}
	dev := netip.AddrPortFrom(netip.AddrFrom4(dip), dport)
	steps := []step{
		{up: true, seq: dISN, flags: fSYN, what: "SYN"},
		{up: false, seq: sISN, ack: dISN + 1, flags: synACK, what: "SYN-ACK"},
		{up: true, seq: dISN + 1, ack: sISN + 1, flags: fACK | fPSH, payload: reqBuf.Bytes(), what: "GET /status"},
		{up: false, seq: sISN + 1, ack: dISN + 1 + uint32(reqBuf.Len()), flags: fACK | fPSH, payload: respBuf.Bytes(), what: "200 OK"},
		{up: true, seq: dISN + 1 + uint32(reqBuf.Len()), ack: sISN + 1 + uint32(respBuf.Len()), flags: fACK | fFIN, what: "FIN"},
	}
	sum := &DemoSummary{WireClean: true, ServerSawDevice: true}
	fmt.Fprintf(out, "device %s talks HTTP to service %d.%d.%d.%d:%d; the server is %d.%d.%d.%d:%d behind the server interface\n",
		dev, cip[0], cip[1], cip[2], cip[3], sid, sip[0], sip[1], sip[2], sip[3], pSrv)
	fmt.Fprintf(out, "%-12s %-44s %-44s %s\n", "packet", "before protection (sender's view)", "on the wire (what the network sees)", "after recovery (receiver's view)")
	var gotResp []byte
	for _, st := range steps {
		var pkt []byte
		if st.up {
			pkt = tcpPacket(dip, cip, dport, sid, st.seq, st.ack, st.flags, st.payload)
			devTUN.in <- pkt
		} else {
			// The server answers from its own address and port; the server interface hides it.
			pkt = tcpPacket(sip, dip, pSrv, dport, st.seq, st.ack, st.flags, st.payload)
			srvTUN.in <- pkt
		}
		var got []byte
		if st.up {
			got, err = srvTUN.next(ctx)
		} else {
			got, err = devTUN.next(ctx)
		}
		if err != nil {
			return sum, fmt.Errorf("%s: %w", st.what, err)
		}
		w := lastWire()
		sum.Packets++
		before, onWire, after := fields(pkt), fields(w), fields(got)
		fmt.Fprintf(out, "%-12s %-44s %-44s %s\n", st.what+arrow(st.up), before, onWire, after)
		// What the wire must not show: the device's port, the server's address and port, the
		// service port, and the seq/ack the endpoints used; an upload shows only CIP and the
		// unified port as its destination, a download only the unified port as its source and
		// the device as its destination (the path must reach it, spec §2.5).
		wsrc, wdst := endpoints(w)
		wseq, wack := binary.BigEndian.Uint32(w[24:]), binary.BigEndian.Uint32(w[28:])
		if wseq == st.seq || wack == st.ack {
			sum.WireClean = false
		}
		if st.up && (wdst != netip.AddrPortFrom(netip.AddrFrom4(cip), lois.DefaultUnifiedPort) || wsrc.Addr() == netip.AddrFrom4(dip) || wsrc.Port() == dport) {
			sum.WireClean = false
		}
		if !st.up && (wsrc.Port() != lois.DefaultUnifiedPort || wsrc.Addr() == netip.AddrFrom4(sip) || wsrc.Addr() == netip.AddrFrom4(cip) ||
			wdst.Addr() != netip.AddrFrom4(dip) || wdst.Port() == dport) {
			sum.WireClean = false
		}
		wantSrc, wantDst := dev, netip.AddrPortFrom(netip.AddrFrom4(sip), pSrv)
		if !st.up {
			wantSrc, wantDst = netip.AddrPortFrom(netip.AddrFrom4(cip), sid), dev
		}
		if src, dst := endpoints(got); src != wantSrc || dst != wantDst || !bytes.Equal(got[40:], st.payload) {
			sum.ServerSawDevice = false
		}
		if !st.up {
			gotResp = append(gotResp, got[40:]...)
		}
	}
	if r, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(gotResp)), req); err == nil {
		sum.Response = r.Proto + " " + r.Status
		r.Body.Close()
	}
	fmt.Fprintf(out, "on the wire every upload shows only %d.%d.%d.%d:%d (the unified port) and every download only the unified port as its source;\n"+
		"addresses, ports, seq, ack and flags are one-time XOR-masked, each with a keystream used once (id in the LOIS TCP option)\n",
		cip[0], cip[1], cip[2], cip[3], lois.DefaultUnifiedPort)
	fmt.Fprintf(out, "device received: %s; wire clean: %v; endpoints saw each other's real header: %v\n", sum.Response, sum.WireClean, sum.ServerSawDevice)
	if o.Hold > 0 {
		select {
		case <-time.After(o.Hold):
		case <-ctx.Done():
		}
	}
	return sum, nil
}

func arrow(up bool) string {
	if up {
		return " →"
	}
	return " ←"
}

// endpoints are an IPv4/TCP packet's source and destination.
func endpoints(p []byte) (src, dst netip.AddrPort) {
	if len(p) < 40 {
		return
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(p[12:16])), binary.BigEndian.Uint16(p[20:])),
		netip.AddrPortFrom(netip.AddrFrom4([4]byte(p[16:20])), binary.BigEndian.Uint16(p[22:]))
}

// fields prints what a header shows, read at the standard offsets.
func fields(p []byte) string {
	if len(p) < 40 {
		return "?"
	}
	src, dst := endpoints(p)
	return fmt.Sprintf("%s→%s s=%08x a=%08x f=%02x", src, dst, binary.BigEndian.Uint32(p[24:]), binary.BigEndian.Uint32(p[28:]), p[33])
}

// tcpPacket builds an IPv4/TCP packet with valid checksums.
func tcpPacket(src, dst [4]byte, sport, dport uint16, seq, ack uint32, flags byte, payload []byte) []byte {
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

// memTUN stands in for a TUN device: packets the demo injects are read by the role, packets
// the role writes are delivered to the demo.
type memTUN struct {
	in, out chan []byte
	done    chan struct{}
	once    sync.Once
}

func newMemTUN() *memTUN {
	return &memTUN{in: make(chan []byte, 64), out: make(chan []byte, 64), done: make(chan struct{})}
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
	select {
	case m.out <- bytes.Clone(b):
	case <-m.done:
		return 0, os.ErrClosed
	}
	return len(b), nil
}

func (m *memTUN) Close() error { m.once.Do(func() { close(m.done) }); return nil }

func (m *memTUN) next(ctx context.Context) ([]byte, error) {
	select {
	case p := <-m.out:
		return p, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no packet came out of the TUN: %w", ctx.Err())
	}
}
