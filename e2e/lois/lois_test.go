package lois

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
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/testenv"
)

var loisBin string

func TestMain(m *testing.M) {
	testenv.RunWithBinary(m, "github.com/obscura-iot/obscura/services/cmd/lois", &loisBin)
}

// Addresses, all inside the namespaces the test makes.
const (
	cipS      = "198.18.0.1"  // the cloud address the device dials
	dipS      = "10.99.0.2"   // the device's address (its TUN)
	sipS      = "10.200.0.10" // the server's address (the SI's TUN)
	sid       = 8080          // service id: the port the device dials on CIP
	pSrv      = 80            // the server's port
	unified   = 443
	devWire   = "10.0.1.2" // DI's end of the device–cloud veth
	cloudWire = "10.0.1.1"
	cloudSrv  = "10.0.2.1"
	srvWire   = "10.0.2.2"
	metrics   = "127.0.0.1:9090"
	ciPort    = 7400
	diPort    = 7401
	siPort    = 7402
)

// world is the three namespaces with the roles running in them.
type world struct {
	dev, cloud, srv    netns
	devTUN, srvTUN     string
	devVeth, cloudVeth string // the device–cloud wire
	keys               string
	di, ci, si         *testenv.Daemon
	server             *http.Server
}

type options struct {
	plain     bool // no LOIS: the same path as a plain tunnel and L4 NAT (benchmark baseline)
	paper     bool // LOIS in paper mode (no IP ID/TTL/TCP option normalisation)
	stp       bool // stochastic traffic padding at the DI and the SI
	registrar bool // keys through `lois register` and JetStream (nats-server in the cloud namespace) instead of provisioned files
	n         int  // keystreams per service and direction
	batch     int  // --batch of the roles (0: their default)
	cloudWire string
	devWire   string // where SIs send downloads (default the DI)
	handler   http.Handler
}

func setup(t *testing.T, o options) *world {
	t.Helper()
	needRoot(t)
	s := suffix()
	w := &world{dev: newNetns(t, "loisd-"+s), cloud: newNetns(t, "loisc-"+s), srv: newNetns(t, "loiss-"+s),
		devTUN: "ltd" + s, srvTUN: "lts" + s, devVeth: "lvd" + s, cloudVeth: "lvc" + s}
	for _, n := range []netns{w.dev, w.cloud, w.srv} {
		n.sysctl(t, "net.ipv6.conf.all.disable_ipv6=1")
		n.sysctl(t, "net.ipv6.conf.default.disable_ipv6=1")
		n.sysctl(t, "net.ipv4.conf.all.rp_filter=0")
		n.sysctl(t, "net.ipv4.conf.default.rp_filter=0")
	}
	w.cloud.sysctl(t, "net.ipv4.ip_forward=1")
	// device ⟷ cloud, cloud ⟷ server
	cs, sc := "lwc"+s, "lws"+s
	sh(t, "ip", "link", "add", "name", w.devVeth, "netns", w.dev.name, "type", "veth", "peer", "name", w.cloudVeth, "netns", w.cloud.name)
	sh(t, "ip", "link", "add", "name", cs, "netns", w.cloud.name, "type", "veth", "peer", "name", sc, "netns", w.srv.name)
	for _, a := range []struct {
		n         netns
		dev, cidr string
	}{{w.dev, w.devVeth, devWire + "/24"}, {w.cloud, w.cloudVeth, cloudWire + "/24"}, {w.cloud, cs, cloudSrv + "/24"}, {w.srv, sc, srvWire + "/24"}} {
		a.n.ip(t, "addr", "add", a.cidr, "dev", a.dev)
		a.n.ip(t, "link", "set", a.dev, "up")
	}
	w.dev.ip(t, "route", "add", "default", "via", cloudWire)
	w.srv.ip(t, "route", "add", "default", "via", cloudSrv)

	w.keys = t.TempDir()
	n := o.n
	if n == 0 {
		n = 4096
	}
	dw := o.devWire
	if dw == "" {
		dw = fmt.Sprintf("%s:%d", devWire, diPort)
	}
	if !o.registrar {
		sh(t, loisBin, "provision", "--out-dir", w.keys, "--services", strconv.Itoa(sid), "--device-ip", dipS,
			"--device-wire", dw, "--n", strconv.Itoa(n))
	}
	cw := o.cloudWire
	if cw == "" {
		cw = fmt.Sprintf("%s:%d", cloudWire, ciPort)
	}
	common := []string{"--cip", cipS, "--metrics-addr", metrics, "--health-addr", metrics, "--mtu", "1400"}
	if o.batch > 0 {
		common = append(common, "--batch", strconv.Itoa(o.batch))
	}
	if o.plain {
		common = append(common, "--plain")
	}
	if o.paper {
		common = append(common, "--paper-mode")
	}
	stp := []string{}
	if o.stp { // windows always open, ≈ 100 cover packets/s each way
		stp = []string{"--stp", "--stp-q", "1", "--stp-period", "1s", "--stp-rate", "15000"}
	}
	start := func(n netns, name string, args ...string) *testenv.Daemon {
		d := testenv.StartDaemon(t, name, n.cmd(loisBin, append(args, common...)...))
		t.Cleanup(func() { d.Terminate(); d.Stopped(10 * time.Second) })
		testenv.Eventually(t, 20*time.Second, name+" ready", func() error {
			if err := d.Exited(); err != nil {
				return err
			}
			_, err := w.get(n, "/readyz")
			return err
		})
		return d
	}
	ciKeys := []string{"--keys-files", filepath.Join(w.keys, "ci.json")}
	siKeys := []string{"--keys-files", filepath.Join(w.keys, "si-0.json")}
	if o.registrar {
		startNATS(t, w.cloud)
		ciKeys = []string{"--nats-url", "nats://127.0.0.1:4222", "--replica-name", "ci-0"}
		siKeys = []string{"--nats-url", "nats://" + cloudSrv + ":4222", "--replica-name", "si-0", "--replica", "0"}
	}
	w.ci = start(w.cloud, "ci", append([]string{"ci", "--wire-listen", fmt.Sprintf("0.0.0.0:%d", ciPort),
		"--backends", fmt.Sprintf("%d=%s:%d@%s:%d", sid, sipS, pSrv, srvWire, siPort)}, ciKeys...)...)
	w.si = start(w.srv, "si", append([]string{"si", "--tun", w.srvTUN, "--wire-listen", fmt.Sprintf("%s:%d", srvWire, siPort),
		"--services", fmt.Sprintf("%d=%d", pSrv, sid)}, append(siKeys, stp...)...)...)
	if o.registrar {
		// The device's keys exist only once the CI and the SI acknowledged the session.
		out, err := w.cloud.cmd(loisBin, "register", "--nats-url", "nats://127.0.0.1:4222", "--out-dir", w.keys,
			"--services", strconv.Itoa(sid), "--device-ip", dipS, "--device-wire", dw, "--n", strconv.Itoa(n),
			"--wait-for", "ci-0,si-0").CombinedOutput()
		if err != nil {
			t.Fatalf("lois register: %v\n%s", err, out)
		}
	}
	w.di = start(w.dev, "di", append([]string{"di", "--tun", w.devTUN, "--wire-listen", fmt.Sprintf("%s:%d", devWire, diPort),
		"--cloud-wire", cw, "--keys-file", filepath.Join(w.keys, "di.json")}, stp...)...)
	// The roles created their TUN devices; address and route them now.
	for _, a := range []struct {
		n          netns
		dev, local string
		peer       string
	}{{w.dev, w.devTUN, dipS, cipS}, {w.srv, w.srvTUN, sipS, dipS}} {
		a.n.ip(t, "addr", "add", a.local+"/32", "dev", a.dev)
		a.n.ip(t, "link", "set", a.dev, "mtu", "1400", "up")
		a.n.ip(t, "route", "add", a.peer+"/32", "dev", a.dev, "src", a.local)
	}
	// A real HTTP server behind the SI, listening on the server's address there.
	var l net.Listener
	if err := w.srv.do(func() (err error) {
		l, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", sipS, pSrv))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	h := o.handler
	if h == nil {
		h = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(rw, "hello %s, this is %s\n", r.RemoteAddr, r.Host)
		})
	}
	w.server = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go w.server.Serve(l)
	t.Cleanup(func() { w.server.Close() })
	return w
}

// client is an HTTP client whose connections are made in namespace n.
func client(n netns) *http.Client {
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) { return n.dial(network, addr) }}}
}

// get fetches path from the role's observability server in namespace n.
func (w *world) get(n netns, path string) (string, error) {
	resp, err := client(n).Get("http://" + metrics + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), nil
}

// packets reads lois_packets_total{role,dir,result} from the role's metrics.
func (w *world) packets(t *testing.T, n netns, role, dir, result string) int {
	t.Helper()
	body, err := w.get(n, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`lois_packets_total{dir="%s",result="%s",role="%s"} `, dir, result, role)
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(f)
		}
	}
	t.Fatalf("no %s in the %s metrics", want, role)
	return 0
}

// curl runs curl in the device namespace against the service on the cloud address.
func (w *world) curl(t *testing.T, path string) string {
	t.Helper()
	out, err := w.dev.cmd("curl", "-sS", "--max-time", "30", fmt.Sprintf("http://%s:%d%s", cipS, sid, path)).CombinedOutput()
	if err != nil {
		t.Fatalf("curl in the device namespace: %v\n%s", err, out)
	}
	return string(out)
}

// TestHTTPThroughLOIS (issue 17 item 2): curl in the device namespace talks HTTP to a real
// server behind the SI through DI → CI → SI and back (SI → DI directly). The server sees
// the device's own address, the client the cloud address and service port. A capture on the
// cloud's wire interface holds every LOIS packet of the exchange: none shows the client's or
// the server's address, the client port, the service or server port, or any seq/ack the
// endpoints used (taken from a capture on the device's TUN); uploads show only CIP and the
// unified port, downloads only the unified port as source and the device address as their
// destination (which the path needs, spec §2.5); no two wire packets share the hidden
// address, seq or ack (T8: grouping by a hidden field gives singletons). Padding (STP) runs at the DI and the SI; the
// capture holds their cover packets too, and each receiver drops them. Then a captured upload replayed at the CI
// is rejected and counted as a replay, and does not reach the server.
func TestHTTPThroughLOIS(t *testing.T) {
	w := setup(t, options{stp: true})
	wire := startCapture(t, w.cloud, w.cloudVeth)
	plain := startCapture(t, w.dev, w.devTUN)

	out := w.curl(t, "/hello")
	want := fmt.Sprintf("hello %s:", dipS)
	if !strings.HasPrefix(out, want) || !strings.Contains(out, fmt.Sprintf("this is %s:%d", cipS, sid)) {
		t.Fatalf("response %q: want the server to see the device address (%s…) and the client the cloud address", out, want)
	}
	testenv.Eventually(t, 5*time.Second, "the last packets captured", func() error {
		if w.packets(t, w.dev, "di", "down", "ok") < 4 {
			return fmt.Errorf("DI recovered fewer than 4 downloads")
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // let the capture read what the kernel queued
	ups, downs := checkWire(t, wire.take(), plainFields(t, plain.take()))
	t.Logf("capture on %s: %d uploads, %d downloads (cover packets included), no original header field", w.cloudVeth, len(ups), len(downs))
	// Padding ran both ways, and every cover packet was dropped by its receiver.
	testenv.Eventually(t, 5*time.Second, "cover packets dropped at SI and DI", func() error {
		if si, di := w.packets(t, w.srv, "si", "up", "pad_dropped"), w.packets(t, w.dev, "di", "down", "pad_dropped"); si == 0 || di == 0 {
			return fmt.Errorf("pads dropped: SI %d, DI %d", si, di)
		}
		return nil
	})
	if len(ups) < 4 || len(downs) < 4 {
		t.Fatalf("captured %d uploads and %d downloads, want ≥ 4 each (handshake, request, response, close)", len(ups), len(downs))
	}

	// Replay: a captured upload sent to the CI again from the device namespace.
	siOK := w.packets(t, w.srv, "si", "up", "ok")
	c, err := w.dev.dial("udp4", fmt.Sprintf("%s:%d", cloudWire, ciPort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(ups[len(ups)/2]); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the replay counted at the CI", func() error {
		if n := w.packets(t, w.cloud, "ci", "up", "replay"); n != 1 {
			return fmt.Errorf("ci replays %d", n)
		}
		return nil
	})
	if n := w.packets(t, w.srv, "si", "up", "ok"); n != siOK {
		t.Fatalf("the replayed packet reached the server interface (%d → %d)", siOK, n)
	}
	// A forged id is unknown, not a replay.
	forged := bytes.Clone(ups[0])
	binary.BigEndian.PutUint64(forged[44:], 0x0123456789abcdef)
	c.Write(forged)
	testenv.Eventually(t, 10*time.Second, "the forged id counted", func() error {
		if n := w.packets(t, w.cloud, "ci", "up", "unknown_id"); n != 1 {
			return fmt.Errorf("ci unknown ids %d", n)
		}
		return nil
	})

	for _, d := range []*testenv.Daemon{w.di, w.ci, w.si} {
		d.Terminate()
	}
	for _, d := range []*testenv.Daemon{w.di, w.ci, w.si} {
		if err := d.Stopped(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

// fields are the header values the endpoints used, from the device-side plaintext capture.
type fields struct {
	seqs  map[uint32]bool
	ports map[uint16]bool
}

func plainFields(t *testing.T, frames [][]byte) fields {
	t.Helper()
	f := fields{seqs: map[uint32]bool{}, ports: map[uint16]bool{sid: true, pSrv: true}}
	for _, p := range frames {
		if len(p) < 40 || p[0] != 0x45 || p[9] != 6 {
			continue
		}
		f.ports[binary.BigEndian.Uint16(p[20:])] = true
		f.ports[binary.BigEndian.Uint16(p[22:])] = true
		f.seqs[binary.BigEndian.Uint32(p[24:])] = true
		if p[33]&0x10 != 0 {
			f.seqs[binary.BigEndian.Uint32(p[28:])] = true
		}
	}
	if len(f.seqs) < 4 {
		t.Fatalf("the device TUN capture holds %d seq/ack values", len(f.seqs))
	}
	return f
}

// checkWire checks every UDP-carried LOIS packet of the wire capture and returns the
// uploads and downloads (their UDP payloads).
func checkWire(t *testing.T, frames [][]byte, plain fields) (ups, downs [][]byte) {
	t.Helper()
	cip, dip, sip := netip.MustParseAddr(cipS).As4(), netip.MustParseAddr(dipS).As4(), netip.MustParseAddr(sipS).As4()
	seen := map[[2]uint64]bool{}
	for _, fr := range frames {
		if len(fr) < 14+28 || binary.BigEndian.Uint16(fr[12:]) != 0x0800 {
			continue
		}
		ip := fr[14:]
		ihl := int(ip[0]&0xf) * 4
		if ip[9] != 17 || len(ip) < ihl+8 {
			continue
		}
		udp := ip[ihl:]
		dst := binary.BigEndian.Uint16(udp[2:])
		if dst != ciPort && dst != diPort {
			continue
		}
		in := udp[8:]
		if len(in) < 52 || in[0] != 0x45 || in[9] != 6 || in[40] != 253 || in[41] != 12 {
			t.Fatalf("a wire datagram to port %d is not a LOIS packet: %x", dst, in[:min(len(in), 60)])
		}
		hdr := in[:52]
		if bytes.Contains(hdr, sip[:]) {
			t.Fatalf("the server address shows on the wire: %x", hdr)
		}
		sport, dport := binary.BigEndian.Uint16(in[20:]), binary.BigEndian.Uint16(in[22:])
		if dst == ciPort {
			if [4]byte(in[16:20]) != cip || dport != unified || bytes.Contains(hdr, dip[:]) || plain.ports[sport] {
				t.Fatalf("upload shows an original field (want only CIP:%d): %x", unified, hdr)
			}
			ups = append(ups, bytes.Clone(in))
		} else {
			if sport != unified || [4]byte(in[12:16]) == cip || plain.ports[dport] || [4]byte(in[16:20]) != dip {
				t.Fatalf("download shows an original field (want source port %d only): %x", unified, hdr)
			}
			downs = append(downs, bytes.Clone(in))
		}
		if plain.seqs[binary.BigEndian.Uint32(in[24:])] || plain.seqs[binary.BigEndian.Uint32(in[28:])] {
			t.Fatalf("a seq or ack the endpoints used shows on the wire: %x", hdr)
		}
		// Unlinkability (T8): no two packets share a hidden 32-bit field — the hidden address
		// (source for uploads, source for downloads too), seq and ack are fresh every packet,
		// so grouping packets by any of them gives singletons (16-bit ports would collide by
		// chance at this count and are left out).
		for i, off := range []int{12, 24, 28} {
			k := [2]uint64{uint64(dst)<<8 | uint64(i), uint64(binary.BigEndian.Uint32(in[off:]))}
			if seen[k] {
				t.Fatalf("two %d-bound packets share the hidden field at offset %d: %x", dst, off, hdr)
			}
			seen[k] = true
		}
	}
	return ups, downs
}
