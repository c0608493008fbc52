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
