package roles

import (
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestOpenTUNWithPlacesAndAddressesTheDevice: an operator-run SI's TUN is made inside the
// server's network namespace (one the test makes), with the server's address as a /32, the
// MTU, up, and the devices' network routed into it — and nothing of it in the caller's own
// namespace.
func TestOpenTUNWithPlacesAndAddressesTheDevice(t *testing.T) {
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Fatalf("needs /dev/net/tun: %v", err)
	}
	ns := "lois-tunns-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	const dev = "ltunns0"
	f, err := OpenTUNWith(dev, TUNSetup{Netns: "/run/netns/" + ns, Addr: netip.MustParseAddr("10.200.0.10"), MTU: 1400,
		Routes: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24"), netip.MustParsePrefix("10.98.0.7/32")}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ipn := func(args ...string) string {
		out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip -n %s %v: %v\n%s", ns, args, err, out)
		}
		return string(out)
	}
	link := ipn("link", "show", dev)
	if !strings.Contains(link, "mtu 1400") || !strings.Contains(link, ",UP") {
		t.Errorf("link in the namespace: %s", link)
	}
	if addr := ipn("-4", "addr", "show", dev); !strings.Contains(addr, "inet 10.200.0.10/32") {
		t.Errorf("address in the namespace: %s", addr)
	}
	routes := ipn("-4", "route", "show", "dev", dev)
	for _, want := range []string{"10.99.0.0/24 ", "10.98.0.7 "} {
		if !strings.Contains(routes, want) {
			t.Errorf("route %s missing in the namespace: %s", want, routes)
		}
	}
	if !strings.Contains(routes, "src 10.200.0.10") {
		t.Errorf("routes without the server's address as source: %s", routes)
	}
	if out, err := exec.Command("ip", "link", "show", dev).CombinedOutput(); err == nil {
		t.Errorf("the device is in the caller's namespace too: %s", out)
	}
	// The calling goroutine is back in its own namespace: a device made now is not in ns.
	g, err := OpenTUNWith("ltunns1", TUNSetup{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if out, err := exec.Command("ip", "-n", ns, "link", "show", "ltunns1").CombinedOutput(); err == nil {
		t.Errorf("a device made after the namespace was left is in it: %s", out)
	}
	// A second SI in the same namespace with the same device name attaches to the device in
	// use: refused (a TUN device takes one descriptor).
	if h, err := OpenTUNWith(dev, TUNSetup{Netns: "/run/netns/" + ns}); err == nil {
		h.Close()
		t.Error("a second descriptor attached to the namespace's device in use")
	}
	if _, err := OpenTUNWith("ltunns2", TUNSetup{Netns: "/run/netns/none-such-" + ns}); err == nil {
		t.Error("a missing namespace accepted")
	}
}

// TestMultiQueueTUNSharedByReplicas: several server interface replicas of one service attach
// queues of one multi-queue TUN in the server's namespace (TUNSetup.MultiQueue): the second
// replica joins the device the first made without touching its address or routes; packets
// the namespace routes into the device reach the replicas' queues, every one exactly once;
// the device and its route outlive the replica that made it, and go with the last one.
func TestMultiQueueTUNSharedByReplicas(t *testing.T) {
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Fatalf("needs /dev/net/tun: %v", err)
	}
	ns := "lois-mq-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	const dev = "lmq0"
	setup := TUNSetup{Netns: "/run/netns/" + ns, Addr: netip.MustParseAddr("10.200.0.10"), MTU: 1400,
		Routes: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")}, MultiQueue: true}
	first, err := OpenTUNWith(dev, setup)
	if err != nil {
		t.Fatal(err)
	}
	second, err := OpenTUNWith(dev, setup)
	if err != nil {
		first.Close()
		t.Fatalf("a second replica could not attach a queue: %v", err)
	}
	defer second.Close()
	ipn := func(args ...string) string {
		out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip -n %s %v: %v\n%s", ns, args, err, out)
		}
		return string(out)
	}
	if addr := ipn("-4", "addr", "show", dev); strings.Count(addr, "inet ") != 1 || !strings.Contains(addr, "inet 10.200.0.10/32") {
		t.Errorf("address after the second replica: %s", addr)
	}
	// 64 datagrams to 64 ports of a device address: each read once, by one queue or the other.
	const n = 64
	send := "for p in $(seq 20000 20063); do echo x > /dev/udp/10.99.0.7/$p; done"
	if out, err := exec.Command("ip", "netns", "exec", ns, "bash", "-c", send).CombinedOutput(); err != nil {
		t.Fatalf("send: %v\n%s", err, out)
	}
	seen := map[uint16]int{}
	for _, f := range []*os.File{first, second} {
		buf := make([]byte, 2048)
		for {
			f.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			k, err := f.Read(buf)
			if err != nil {
				break
			}
			p := buf[:k]
			// IPv4 UDP to 10.99.0.7 (the kernel also sends IPv6 router solicitations).
			if k >= 28 && p[0]>>4 == 4 && p[9] == 17 && netip.AddrFrom4([4]byte(p[16:20])) == netip.MustParseAddr("10.99.0.7") {
				seen[uint16(p[22])<<8|uint16(p[23])]++
			}
		}
	}
	if len(seen) != n {
		t.Errorf("%d of %d datagrams read from the queues", len(seen), n)
	}
	for port, c := range seen {
		if c != 1 {
			t.Errorf("port %d read %d times", port, c)
		}
	}
	first.Close()
	if routes := ipn("-4", "route", "show", "dev", dev); !strings.Contains(routes, "10.99.0.0/24") {
		t.Errorf("the route went with the replica that made the device: %q", routes)
	}
	second.Close()
	testEventually(t, func() bool {
		return exec.Command("ip", "-n", ns, "link", "show", dev).Run() != nil
	})
}
