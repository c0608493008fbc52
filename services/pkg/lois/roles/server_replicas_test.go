package roles

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// sharedWire binds addr with SO_REUSEPORT (what `lois si --wire-reuse-port` does).
func sharedWire(t *testing.T, addr string) *net.UDPConn {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	return pc.(*net.UDPConn)
}

// TestTwoServerReplicasShareOneTUN (server.placement netns with server.replicas 2): two SI
// replicas of one service, holding the two partitions of the session's download keystreams,
// share one multi-queue TUN in a server namespace the test makes (a real kernel TCP listener
// on the server's address behind it) and one wire address (SO_REUSEPORT). A device's SYNs go
// DI → CI → an SI → the kernel, whose SYN-ACKs come back through an SI to the device,
// recovered. Then the replica that carried them stops: its queue and socket go, the device
// and its route stay, and the next SYNs are answered through the other replica, with its own
// partition. Every reply the DI recovered was hidden by one of the replicas (their counts
// add up; the DI rejects none: no keystream was used twice).
func TestTwoServerReplicasShareOneTUN(t *testing.T) {
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Fatalf("needs /dev/net/tun: %v", err)
	}
	ns := "lois-sir-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	for _, kv := range []string{"net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"} {
		if out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-w", kv).CombinedOutput(); err != nil {
			t.Fatalf("sysctl %s: %v\n%s", kv, err, out)
		}
	}
	netnsPath := "/run/netns/" + ns
	setup := TUNSetup{Netns: netnsPath, Addr: netip.AddrFrom4(sip), MTU: 1400,
		Routes: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4(dip), 32)}, MultiQueue: true}

	m, log := NewMetrics(nil), telemetry.Discard()
	devTUN, diWire, ciWire := newMemTUN(), udp(t), udp(t)
	prov, err := Provision{Services: []uint16{sid}, N: 256, Lifetime: time.Hour, Epoch: 1, Replicas: 2,
		DeviceIP: netip.AddrFrom4(dip), DeviceWire: addrOf(diWire)}.Run(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	core := lois.Config{CIP: cip}
	probe := udp(t)
	wireAddr := addrOf(probe).String()
	probe.Close()
	type replica struct {
		m    *Metrics
		stop context.CancelFunc
		done chan struct{}
	}
	var reps [2]replica
	for r := range reps {
		tun, err := OpenTUNWith("lsir0", setup)
		if err != nil {
			t.Fatalf("replica %d: %v", r, err)
		}
		rm := NewMetrics(nil)
		s, err := NewServer(ServerConfig{Core: core, Keys: []*contract.Keys{prov.Server[r]}, Ports: map[uint16]uint16{pSrv: sid}, TUN: tun,
			Wire: sharedWire(t, wireAddr), Margin: time.Minute, Grace: time.Minute, Metrics: rm, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		reps[r] = replica{m: rm, stop: cancel, done: make(chan struct{})}
		go func() {
			defer close(reps[r].done)
			if err := s.Run(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	t.Cleanup(func() {
		for _, r := range reps {
			r.stop()
			<-r.done
		}
	})
	d, err := NewDevice(DeviceConfig{Core: core, Keys: prov.Device, TUN: devTUN, Wire: diWire, Cloud: addrOf(ciWire),
		Margin: time.Minute, Grace: time.Minute, Metrics: m, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCloud(CloudConfig{Core: core, Keys: []*contract.Keys{prov.Cloud}, Wire: ciWire, Grace: time.Minute, Metrics: m, Log: log,
		Backends: []ServerBackend{{SID: sid, Backend: lois.Backend{IP: sip, Port: pSrv}, Wire: netip.MustParseAddrPort(wireAddr)}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{d.Run, c.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	// The server: a kernel TCP listener on its address in the namespace (it answers SYNs).
	var l net.Listener
	if err := inNetns(netnsPath, func() (err error) {
		l, err = net.Listen("tcp4", netip.AddrPortFrom(netip.AddrFrom4(sip), pSrv).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	hid := func(r int) int {
		return int(testutil.ToFloat64(reps[r].m.Packets.WithLabelValues("si", "down", contract.ResultOK)))
	}
	// syns sends a SYN of ports [from, from+n) and waits for a SYN-ACK of each at the DI.
	syns := func(from, n uint16) {
		t.Helper()
		for p := from; p < from+n; p++ {
			devTUN.in <- tcp(dip, cip, p, sid, 1000, 0, 0x02, nil)
		}
		answered := map[uint16]bool{}
		for len(answered) < int(n) {
			pkt := devTUN.next(t)
			port := binary.BigEndian.Uint16(pkt[22:])
			if [4]byte(pkt[12:16]) != cip || binary.BigEndian.Uint16(pkt[20:]) != sid || pkt[33]&0x12 != 0x12 || port < from || port >= from+n {
				continue // a retransmitted SYN-ACK of an earlier round
			}
			answered[port] = true
		}
	}
	syns(41000, 16)
	first := 0
	if hid(1) > hid(0) {
		first = 1
	}
	if hid(first) == 0 {
		t.Fatalf("no replica hid a reply: %d, %d", hid(0), hid(1))
	}
	t.Logf("16 SYN-ACKs: replica 0 hid %d replies, replica 1 %d", hid(0), hid(1))
	// The replica that carried the flows goes (as a pod would): the other takes the wire and
	// the replies; the device and its route stay.
	reps[first].stop()
	<-reps[first].done
	other := 1 - first
	before := hid(other)
	syns(42000, 16)
	if hid(other)-before < 16 {
		t.Errorf("after replica %d stopped, replica %d hid %d replies, want ≥ 16", first, other, hid(other)-before)
	}
	if rej := m.Packets.WithLabelValues("di", "down", contract.ResultUnknownID); testutil.ToFloat64(rej) != 0 {
		t.Errorf("the DI rejected %v downloads as unknown (a keystream used twice, or not installed)", testutil.ToFloat64(rej))
	}
	testEventually(t, func() bool {
		return int(testutil.ToFloat64(m.Packets.WithLabelValues("di", "down", contract.ResultOK))) == hid(0)+hid(1)
	})
}
