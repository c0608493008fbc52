package cluster

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/e2e/internal/netns"
	"github.com/obscura-iot/obscura/e2e/internal/ready"
	"github.com/obscura-iot/obscura/services/testenv"
)

// The HeaderGateway sample (config/samples/lois_v1alpha1_headergateway.yaml) in this run, with
// server.placement netns: the operator runs its cloud interface as a host-network pod on
// 127.0.0.1:7400, its registrar daemon (`lois registrar`) beside it, and the service's server
// interface as a pod (`lois si` on 127.0.0.1:7402) whose TUN it makes, addresses and routes
// inside the server's network namespace; the device (a device: its DI and curl) and the
// server (an HTTP server) live in two network namespaces the test makes, each with only its
// own addresses. Between the device namespace's loopback and the node's the test relays the
// emulated wire's datagrams (and the DI's NATS connection), so no address is added to the
// node. The device opens its session with the registrar pod (`lois hello`) and replenishes
// through it (`lois di --replenish`): with epochs of loisPerEpoch keystreams, at most the
// pool's low-water floor, both directions need grants from the first packets on.
const (
	loisAPI     = "lois.obscura.dev/v1alpha1"
	gatewayName = "edge"
	loisCIP     = "198.18.0.1"
	loisDIP     = "10.99.0.2"
	loisSIP     = "10.200.0.10"
	loisSID     = 8080
	loisPSrv    = 80
	loisUnified = 443
	loisCIWire  = "127.0.0.1:7400" // the sample's cloud.wirePort on the node (host network)
	loisDIWire  = "127.0.0.1:7401" // the DI's socket in the device namespace
	loisSIWire  = "127.0.0.1:7402" // the SI pod's socket on the node (host network): serverWire
	loisMetrics = "127.0.0.1:9090" // the DI's observability server in its namespace
	// loisDevices is server.deviceNetworks: the device address the SI routes into its TUN.
	loisDevices = loisDIP + "/32"
	// loisPerEpoch is spec.keystreams.perEpoch in this run: no more than the pools' low-water
	// floor (64), so the DI asks for an upload epoch (EPOCH_REQ) and the SI announces its low
	// water (a download grant through the registrar to the DI) after their first packets.
	loisPerEpoch = 64
)

// loisRun is one exchange's namespaces, processes and relays.
type loisRun struct {
	bin      string
	dev, srv loisNetns
	nats     *testenv.NATS
	// upRelay records what reaches the CI pod (device → cloud); downRelay what reaches the
	// device (the SI pod → device).
	upRelay, downRelay *udpRelay
	procs              []*testenv.Daemon
	// mon, when set, is the Prometheus that scrapes the run (prometheus_test.go): the DI
	// becomes its target once it runs (the pods are its targets anyway).
	mon *monitor
}

func (e *env) gateway() (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(loisAPI)
	u.SetKind("HeaderGateway")
	return u, e.k.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: gatewayName}, u)
}

// applyGateway builds lois for the node, starts the session stream's NATS server on the
// node's loopback, makes the device and server namespaces and the device's relays, and
// applies the sample with this run's NATS URL and the operator running the server interface
// in the server namespace (server.placement netns).
func (e *env) applyGateway() *loisRun {
	e.t.Helper()
	for _, need := range []string{"/dev/net/tun"} {
		if _, err := os.Stat(need); err != nil {
			e.t.Fatalf("the LOIS phase needs %s: %v", need, err)
		}
	}
	r := &loisRun{bin: filepath.Join(e.dir, "lois")}
	cmd := exec.Command("go", "build", "-o", r.bin, "./services/cmd/lois")
	cmd.Dir = e.root
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("build lois: %v\n%s", err, out)
	}
	r.nats = testenv.StartNATS(e.t)
	s := strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
	r.dev, r.srv = newLoisNetns(e, "loisd-"+s), newLoisNetns(e, "loiss-"+s)

	natsAddr := strings.TrimPrefix(r.nats.URL(), "nats://")
	// The device interface reaches NATS at the same address inside its namespace (the SI pod
	// is on the node's network).
	startTCPRelay(e, r.dev, natsAddr, natsAddr)
	// device → CI pod: the DI's cloud wire is 127.0.0.1:7400 in its namespace, as on the node.
	r.upRelay = startUDPRelay(e, r.dev, loisCIWire, loisNetns{}, loisCIWire)
	// SI pod → device (direct server return): the device's wire address as the node sees it.
	r.downRelay = startUDPRelay(e, loisNetns{}, "127.0.0.1:0", r.dev, loisDIWire)

	u := e.readSample("lois_v1alpha1_headergateway.yaml")
	u.SetNamespace(e.ns)
	must(e, unstructured.SetNestedField(u.Object, r.nats.URL(), "spec", "registrar", "natsURL"))
	must(e, unstructured.SetNestedField(u.Object, int64(loisPerEpoch), "spec", "keystreams", "perEpoch"))
	svcs, _, _ := unstructured.NestedSlice(u.Object, "spec", "services")
	svcs[0].(map[string]any)["serverWire"] = loisSIWire
	svcs[0].(map[string]any)["networkNamespace"] = r.srv.name
	must(e, unstructured.SetNestedSlice(u.Object, svcs, "spec", "services"))
	must(e, unstructured.SetNestedField(u.Object, "netns", "spec", "server", "placement"))
	must(e, unstructured.SetNestedStringSlice(u.Object, []string{loisDevices}, "spec", "server", "deviceNetworks"))
	if err := e.k.Create(context.Background(), u); err != nil {
		e.t.Fatalf("apply the HeaderGateway sample: %v", err)
	}
	testenv.Eventually(e.t, 3*time.Minute, "HeaderGateway Ready (the CI, the registrar and the SI pods ready)", func() error {
		g, err := e.gateway()
		if err != nil {
			return err
		}
		if err := ready.Check(g); err != nil {
			return err
		}
		if n, _, _ := unstructured.NestedInt64(g.Object, "status", "serverReplicas"); n != 1 {
			return fmt.Errorf("status.serverReplicas %d", n)
		}
		return nil
	})
	// The SI pod made its TUN in the server namespace, with the server's address and the
	// device's route — and none of it on the node.
	siTUN := fmt.Sprintf("lois-si-%d", loisSID)
	addr, err := exec.Command("ip", "-n", r.srv.name, "-4", "addr", "show", "dev", siTUN).CombinedOutput()
	if err != nil || !strings.Contains(string(addr), "inet "+loisSIP+"/32") {
		e.t.Fatalf("the SI's TUN in the server namespace: %v\n%s", err, addr)
	}
	if route, err := exec.Command("ip", "-n", r.srv.name, "-4", "route", "show", loisDIP).CombinedOutput(); err != nil || !strings.Contains(string(route), "dev "+siTUN) {
		e.t.Fatalf("the device's route into the SI's TUN: %v\n%s", err, route)
	}
	if out, err := exec.Command("ip", "link", "show", siTUN).CombinedOutput(); err == nil {
		e.t.Fatalf("the SI's TUN is on the node: %s", out)
	}
	return r
}

func must(e *env, err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// runGateway starts an HTTP server in the server namespace (behind the operator's SI pod),
// opens the device's session with the operator's registrar pod (HELLO, with the settings the
// operator rendered),
// starts the device interface replenishing through the registrar (READY, EPOCH_REQ, download
// grants), and has curl in the device namespace fetch a page from the server through the CI
// pod. The wire shows neither endpoint's address or port, the device was granted epochs both
// ways by the registrar pod, and the gateway's status counts the device and the keystreams
// the CI pod consumed.
func (e *env) runGateway(r *loisRun) {
	e.t.Helper()
	ctx := context.Background()
	var cm corev1.ConfigMap
	if err := e.k.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: gatewayName + "-lois-registrar"}, &cm); err != nil {
		e.t.Fatal(err)
	}
	var regEnv []string
	for k, v := range cm.Data {
		regEnv = append(regEnv, k+"="+v)
	}
	common := []string{"--metrics-addr", loisMetrics, "--health-addr", loisMetrics}
	start := func(n loisNetns, name string, args ...string) {
		c := n.cmd(r.bin, append(args, common...)...)
		c.Env = append(os.Environ(), regEnv...)
		d := testenv.StartDaemon(e.t, name, c)
		r.procs = append(r.procs, d)
		testenv.Eventually(e.t, 30*time.Second, name+" ready", func() error {
			if err := d.Exited(); err != nil {
				return err
			}
			return n.httpGet("http://" + loisMetrics + "/readyz")
		})
	}
	// The SI pod opens the sealed session records with the gateway's record key (the
	// operator's Secret, mounted); no pod log may hold the key.
	var rk corev1.Secret
	if err := e.k.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: gatewayName + "-lois-record-key"}, &rk); err != nil {
		e.t.Fatal(err)
	}
	e.secrets["lois session record key"] = string(rk.Data["record.key"])
	diTUN := "ltd" + r.dev.name[6:]
	// The server answers on every address of its namespace (the SI's TUN holds SIP).
	var l net.Listener
	if err := r.srv.do(func() (err error) {
		l, err = net.Listen("tcp4", fmt.Sprintf(":%d", loisPSrv))
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fmt.Fprintf(w, "hello %s, this is %s\n", req.RemoteAddr, req.Host)
	})}
	go srv.Serve(l)
	defer srv.Close()

	// HELLO to the operator's registrar pod with the rendered settings: the device's keys (and
	// its session's control key) only once the CI pod and the server interface acknowledged
	// installing its session. The registrar pod may still be connecting: HELLO is retried.
	keys := filepath.Join(e.dir, "lois-device")
	var helloOut []byte
	testenv.Eventually(e.t, 2*time.Minute, "lois hello answered by the registrar pod", func() error {
		hello := exec.Command(r.bin, "hello", "--out-dir", keys, "--device-ip", loisDIP, "--device-wire", r.downRelay.listen, "--timeout", "30s")
		hello.Env = append(os.Environ(), regEnv...)
		out, err := hello.CombinedOutput()
		helloOut = out
		if err != nil {
			return fmt.Errorf("lois hello: %v: %s", err, tail(string(out), 500))
		}
		return nil
	})
	e.t.Logf("lois hello: %s", strings.TrimSpace(string(helloOut)))
	start(r.dev, "lois di", "di", "--tun", diTUN, "--wire-listen", loisDIWire, "--keys-file", filepath.Join(keys, "di.json"), "--replenish")
	if r.mon != nil {
		r.mon.scrapeInNetns(r.dev, loisMetrics, "di")
	}
	r.dev.ip(e, "addr", "add", loisDIP+"/32", "dev", diTUN)
	r.dev.ip(e, "link", "set", diTUN, "mtu", "1400", "up")
	r.dev.ip(e, "route", "add", loisCIP+"/32", "dev", diTUN, "src", loisDIP)

	out, err := r.dev.cmd("curl", "-sS", "--max-time", "30", fmt.Sprintf("http://%s:%d/cluster", loisCIP, loisSID)).CombinedOutput()
	if err != nil {
		e.t.Fatalf("curl in the device namespace: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("hello %s:", loisDIP); !strings.HasPrefix(string(out), want) || !strings.Contains(string(out), fmt.Sprintf("this is %s:%d", loisCIP, loisSID)) {
		e.t.Fatalf("response %q: want the server to see the device's address and the client the cloud address", out)
	}

	// The wire: uploads (as the CI pod received them) show only CIP and the unified port;
	// downloads only the unified port as source and the device as destination.
	ups, downs := r.upRelay.take(), r.downRelay.take()
	if len(ups) < 3 || len(downs) < 2 {
		e.t.Fatalf("%d uploads and %d downloads on the wire", len(ups), len(downs))
	}
	cip, dip, sip := netip.MustParseAddr(loisCIP), netip.MustParseAddr(loisDIP), netip.MustParseAddr(loisSIP)
	for i, p := range ups {
		src, dst := ipv4Endpoints(p)
		if dst != netip.AddrPortFrom(cip, loisUnified) || src.Addr() == dip || src.Addr() == sip {
			e.t.Errorf("upload %d on the wire: %s → %s", i, src, dst)
		}
	}
	for i, p := range downs {
		src, dst := ipv4Endpoints(p)
		if src.Port() != loisUnified || src.Addr() == sip || src.Addr() == cip || dst.Addr() != dip || dst.Port() == loisPSrv {
			e.t.Errorf("download %d on the wire: %s → %s", i, src, dst)
		}
	}

	// Replenishment through the registrar pod: the DI asked for and got upload epochs
	// (EPOCH_REQ) and got download epochs the SI's low water brought (EPOCH_GRANT).
	var granted map[string]float64
	testenv.Eventually(e.t, time.Minute, "the DI granted epochs both ways by the registrar pod", func() error {
		var err error
		if granted, err = r.dev.counters("http://"+loisMetrics+"/metrics", "lois_epochs_granted_total"); err != nil {
			return err
		}
		if granted[`dir="up",role="di"`] < 1 || granted[`dir="down",role="di"`] < 1 {
			return fmt.Errorf("epochs granted at the DI: %v", granted)
		}
		return nil
	})

	// What the operator reads from the CI pod's metrics.
	testenv.Eventually(e.t, 90*time.Second, "HeaderGateway status counts the device and its consumed keystreams", func() error {
		g, err := e.gateway()
		if err != nil {
			return err
		}
		devices, _, _ := unstructured.NestedInt64(g.Object, "status", "devices")
		consumed, _, _ := unstructured.NestedInt64(g.Object, "status", "keystreamsConsumed")
		installed, _, _ := unstructured.NestedInt64(g.Object, "status", "keystreamsInstalled")
		// installed counts the upload entries the CI pod holds unused: with epochs of
		// loisPerEpoch the device's padding may have used every one (the full-mode run of
		// 16:44: 128 consumed, 0 installed). Installed and consumed together show the CI pod
		// took more than the session's first epoch: a grant's record reached it.
		if devices != 1 || consumed < int64(len(ups)) || installed+consumed <= loisPerEpoch {
			return fmt.Errorf("devices %d, keystreams consumed %d (want ≥ %d uploads), installed %d (want installed + consumed > %d)",
				devices, consumed, len(ups), installed, loisPerEpoch)
		}
		// And from the SI pod's metrics: the uploads it recovered, and the pad ratio (the
		// sample pads, and only the SIs tell cover packets from real ones).
		recovered, _, _ := unstructured.NestedInt64(g.Object, "status", "server", "uploadsRecovered")
		pad, _, _ := unstructured.NestedString(g.Object, "status", "padRatio")
		if recovered < 1 || pad == "" {
			return fmt.Errorf("server interfaces recovered %d uploads (want ≥ 1), pad ratio %q (want a figure)", recovered, pad)
		}
		return nil
	})
	cols := e.run("kubectl", "get", "headergateways", "-n", e.ns, gatewayName)
	e.t.Logf("kubectl get headergateways:\n%s", cols)
	e.report.Notes = append(e.report.Notes, fmt.Sprintf("lois: HELLO to the registrar pod, curl through the CI pod and the SI pod, %d uploads and %d downloads on the wire; epochs granted to the DI: %v",
		len(ups), len(downs), granted))
}

// deleteGateway deletes the sample (its objects go with it) and stops the run's processes.
func (e *env) deleteGateway(r *loisRun) {
	for _, d := range r.procs {
		d.Terminate()
		d.Stopped(10 * time.Second)
	}
	g, err := e.gateway()
	if err == nil {
		err = e.k.Delete(context.Background(), g)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		e.t.Errorf("delete the HeaderGateway: %v", err)
	}
}

func ipv4Endpoints(p []byte) (src, dst netip.AddrPort) {
	if len(p) < 40 || p[0]>>4 != 4 {
		return
	}
	ihl := int(p[0]&0xf) * 4
	if len(p) < ihl+4 {
		return
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(p[12:16])), binary.BigEndian.Uint16(p[ihl:])),
		netip.AddrPortFrom(netip.AddrFrom4([4]byte(p[16:20])), binary.BigEndian.Uint16(p[ihl+2:]))
}

// loisNetns is a network namespace the test made (the zero value is the node's own).
type loisNetns struct{ name string }

func newLoisNetns(e *env, name string) loisNetns {
	e.t.Helper()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		e.t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	e.t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	n := loisNetns{name}
	n.ip(e, "link", "set", "lo", "up")
	return n
}

func (n loisNetns) ip(e *env, args ...string) {
	e.t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", n.name}, args...)...).CombinedOutput(); err != nil {
		e.t.Fatalf("ip -n %s %s: %v\n%s", n.name, strings.Join(args, " "), err, out)
	}
}

// cmd is a command run inside the namespace (ip netns exec execs it: the pid is its own).
func (n loisNetns) cmd(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.name, name}, args...)...)
}

// do runs f on an OS thread moved into the namespace (the node's for the zero value):
// sockets f creates belong to it.
func (n loisNetns) do(f func() error) error {
	if n.name == "" {
		return f()
	}
	return netns.Do(n.name, f)
}

// httpClient is an HTTP client whose connections are dialled from inside the namespace.
func (n loisNetns) httpClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(_ context.Context, network, addr string) (conn net.Conn, err error) {
			err = n.do(func() error { conn, err = net.DialTimeout(network, addr, 5*time.Second); return err })
			return conn, err
		}}}
}

// httpGet fetches url from inside the namespace and wants 200.
func (n loisNetns) httpGet(url string) error {
	c := n.httpClient()
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// counters fetches a Prometheus text page from inside the namespace and returns the samples
// of metric by their label set as written (`a="x",b="y"`).
func (n loisNetns) counters(url, metric string) (map[string]float64, error) {
	c := n.httpClient()
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok {
			continue
		}
		labels, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %v", url, line, err)
		}
		out[labels] = v
	}
	return out, nil
}

// udpRelay passes datagrams one way from a socket in one namespace to an address in another,
// recording each.
type udpRelay struct {
	listen string
	mu     sync.Mutex
	seen   [][]byte
}

func startUDPRelay(e *env, from loisNetns, listen string, to loisNetns, dst string) *udpRelay {
	e.t.Helper()
	var in, out *net.UDPConn
	if err := from.do(func() (err error) {
		in, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(listen)))
		return err
	}); err != nil {
		e.t.Fatalf("relay listen %s in %q: %v", listen, from.name, err)
	}
	if err := to.do(func() (err error) {
		out, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	r := &udpRelay{listen: in.LocalAddr().String()}
	to4 := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(dst))
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65535)
		for {
			k, _, err := in.ReadFromUDP(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.seen = append(r.seen, append([]byte(nil), buf[:k]...))
			r.mu.Unlock()
			out.WriteToUDP(buf[:k], to4)
		}
	}()
	e.t.Cleanup(func() { in.Close(); out.Close(); <-done })
	return r
}

func (r *udpRelay) take() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen
}

// startTCPRelay accepts connections on listen inside namespace from and joins each to dst on
// the node.
func startTCPRelay(e *env, from loisNetns, listen, dst string) {
	e.t.Helper()
	var l net.Listener
	if err := from.do(func() (err error) {
		l, err = net.Listen("tcp4", listen)
		return err
	}); err != nil {
		e.t.Fatalf("relay listen %s in %s: %v", listen, from.name, err)
	}
	relayTCP(e, l, func() (net.Conn, error) { return net.DialTimeout("tcp4", dst, 5*time.Second) })
}

// relayTCP joins each connection l accepts to one dial makes, both ways, until the test ends
// (then it closes l and every connection, and waits for its goroutines).
func relayTCP(e *env, l net.Listener, dial func() (net.Conn, error)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := dial()
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(u, c); u.Close() }()
			go func() { defer wg.Done(); io.Copy(c, u); c.Close() }()
		}
	}()
	e.t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}
