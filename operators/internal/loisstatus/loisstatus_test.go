package loisstatus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/testenv"
)

var loisBin string

func TestMain(m *testing.M) {
	testenv.RunWithBinary(m, "github.com/obscura-iot/obscura/services/cmd/lois", &loisBin)
}

// TestCloudReportsFromARealCloudInterface: a real `lois ci` with one provisioned device
// session reports one device and the session's upload keystreams; a malformed datagram on
// its wire shows up as one rejection (by its reason), and nothing was consumed.
func TestCloudReportsFromARealCloudInterface(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command(loisBin, "provision", "--out-dir", dir, "--services", "8080", "--device-ip", "10.99.0.2",
		"--device-wire", "127.0.0.1:7401", "--n", "256").CombinedOutput(); err != nil {
		t.Fatalf("lois provision: %v\n%s", err, out)
	}
	addrFile := filepath.Join(dir, "addr")
	// The wire port is fixed for the test to send to; pick one the kernel gives.
	probe, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	wire := probe.LocalAddr().String()
	probe.Close()
	d := testenv.StartDaemon(t, "lois ci", exec.Command(loisBin, "ci", "--keys-files", filepath.Join(dir, "ci.json"),
		"--backends", "8080=10.200.0.10:80@127.0.0.1:7402", "--wire-listen", wire,
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0", "--addr-file", addrFile))
	t.Cleanup(func() { d.Terminate(); d.Stopped(10 * time.Second) })
	metrics := metricsAddr(t, d, addrFile, "lois ci")
	// The table gauge is set on the role's maintenance tick (250 ms); a replica that does
	// not answer (127.0.0.1:1) is skipped.
	testenv.Eventually(t, 20*time.Second, "one device and its upload keystreams reported", func() error {
		rep, err := Metrics{}.Cloud(context.Background(), []string{metrics, "127.0.0.1:1"})
		if err != nil {
			return err
		}
		// 256 upload keystreams, less the registrar's duplicate indices (ids seen before).
		if rep.Replicas != 1 || rep.Devices != 1 || rep.Installed < 250 || rep.Installed > 256 || rep.Consumed != 0 || len(rep.Rejected) != 0 {
			return fmt.Errorf("report %+v", rep)
		}
		return nil
	})

	sendMalformed(t, wire)
	testenv.Eventually(t, 20*time.Second, "the malformed datagram counted", func() error {
		rep, err := Metrics{}.Cloud(context.Background(), []string{metrics})
		if err != nil {
			return err
		}
		total := int64(0)
		for _, v := range rep.Rejected {
			total += v
		}
		if total != 1 || rep.Rejected["malformed"]+rep.Rejected["not_lois"] != 1 || rep.Consumed != 0 {
			return fmt.Errorf("rejected %v, consumed %d", rep.Rejected, rep.Consumed)
		}
		return nil
	})

	// A page that is not a cloud interface's is not a report.
	if _, err := Merge(nil); !errors.Is(err, ErrNotReported) {
		t.Fatalf("empty merge: %v", err)
	}
}

// startSI runs a real `lois si` replica of service 8080 as the operator runs several
// (server.replicas 2): with keys file keys, named si-8080-<replica>, attached to the
// multi-queue TUN dev in the network namespace netns, sharing the wire address wire, its
// metrics at metricsBase + replica (--ordinal-ports); it returns the metrics address the role
// bound.
func startSI(t *testing.T, keys, netns, dev, wire string, metricsBase, replica int) (metrics string) {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	d := testenv.StartDaemon(t, fmt.Sprintf("lois si %d", replica), exec.Command(loisBin, "si", "--keys-files", keys, "--services", "80=8080",
		"--replica-name", fmt.Sprintf("si-8080-%d", replica), "--replica", fmt.Sprint(replica),
		"--tun", dev, "--netns", "/run/netns/"+netns, "--tun-multi-queue", "--wire-listen", wire, "--wire-reuse-port", "--ordinal-ports",
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", metricsBase), "--health-addr", "127.0.0.1:0", "--addr-file", addrFile))
	t.Cleanup(func() { d.Terminate(); d.Stopped(10 * time.Second) })
	metrics = metricsAddr(t, d, addrFile, "lois si")
	if want := fmt.Sprintf("127.0.0.1:%d", metricsBase+replica); metrics != want {
		t.Fatalf("replica %d serves its metrics at %s, want %s", replica, metrics, want)
	}
	return metrics
}

// freePort is a port the kernel gives for a 127.0.0.1 listener of network.
func freePort(t *testing.T, network string) int {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestServerReportsFromRealServerInterfaces: two real `lois si` replicas of one service, run
// with the flags the operator gives server.replicas 2 (keys provisioned for two; one
// multi-queue TUN in a network namespace the test makes, one shared wire address, metrics at
// consecutive ports) report one device each and, summed, the session's download keystreams — each replica only its
// partition, half (spec §3.11); no packet has passed, so there is no pad ratio. A datagram
// that is no LOIS packet on one's wire shows up as one rejected upload by its reason. (What
// the kernel sends into a fresh TUN — IPv6 router solicitations — are rejected downloads,
// "down/malformed", and not counted here.)
func TestServerReportsFromRealServerInterfaces(t *testing.T) {
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Fatalf("needs /dev/net/tun: %v", err)
	}
	ns := fmt.Sprintf("lois-status-%d", time.Now().UnixNano()%1e6)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	dir := t.TempDir()
	if out, err := exec.Command(loisBin, "provision", "--out-dir", dir, "--services", "8080", "--device-ip", "10.99.0.2",
		"--device-wire", "127.0.0.1:7401", "--n", "256", "--replicas", "2").CombinedOutput(); err != nil {
		t.Fatalf("lois provision: %v\n%s", err, out)
	}
	wire0 := fmt.Sprintf("127.0.0.1:%d", freePort(t, "udp"))
	base := freePort(t, "tcp")
	m0 := startSI(t, filepath.Join(dir, "si-0.json"), ns, "lstat0", wire0, base, 0)
	m1 := startSI(t, filepath.Join(dir, "si-1.json"), ns, "lstat0", wire0, base, 1)

	ctx := context.Background()
	// The pool gauge is set on the role's maintenance tick; 127.0.0.1:1 does not answer.
	testenv.Eventually(t, 20*time.Second, "two replicas, one device, the download keystreams split", func() error {
		rep, err := Metrics{}.Server(ctx, []string{m0, m1, "127.0.0.1:1"})
		if err != nil {
			return err
		}
		if rep.Replicas != 2 || rep.Devices != 1 || rep.DownloadKeystreams != 256 || rep.Packets() != 0 || uploadsRejected(rep) != 0 {
			return fmt.Errorf("report %+v", rep)
		}
		for _, m := range []string{m0, m1} {
			one, err := Metrics{}.Server(ctx, []string{m})
			if err != nil {
				return err
			}
			if one.DownloadKeystreams != 128 {
				return fmt.Errorf("replica at %s holds %d download keystreams, want its partition of 128", m, one.DownloadKeystreams)
			}
		}
		if _, ok := rep.PadRatio(); ok {
			return errors.New("a pad ratio before any packet")
		}
		return nil
	})

	sendMalformed(t, wire0)
	testenv.Eventually(t, 20*time.Second, "the malformed datagram counted", func() error {
		rep, err := Metrics{}.Server(ctx, []string{m0, m1})
		if err != nil {
			return err
		}
		if uploadsRejected(rep) != 1 || rep.Rejected["up/malformed"]+rep.Rejected["up/not_lois"] != 1 || rep.Packets() != 0 {
			return fmt.Errorf("rejected %v, packets %d", rep.Rejected, rep.Packets())
		}
		return nil
	})

	// A cloud interface's page is no server interface's report.
	if _, err := MergeServers(nil); !errors.Is(err, ErrNotReported) {
		t.Fatalf("empty merge: %v", err)
	}
}

// uploadsRejected sums the rejected uploads ("up/<reason>") of rep.
func uploadsRejected(rep *ServerReport) int64 {
	n := int64(0)
	for k, v := range rep.Rejected {
		if strings.HasPrefix(k, "up/") {
			n += v
		}
	}
	return n
}

// metricsAddr waits for role d to write its metrics address to addrFile (the metrics= line).
func metricsAddr(t *testing.T, d *testenv.Daemon, addrFile, role string) (metrics string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, role+" serving metrics", func() error {
		if err := d.Exited(); err != nil {
			return err
		}
		b, err := os.ReadFile(addrFile)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "metrics="); ok {
				metrics = v
				return nil
			}
		}
		return errors.New("no metrics address yet")
	})
	return metrics
}

// sendMalformed sends one datagram that is not an IPv4 packet to a role's wire address.
func sendMalformed(t *testing.T, wire string) {
	t.Helper()
	c, err := net.Dial("udp4", wire)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("not an IPv4 packet")); err != nil {
		t.Fatal(err)
	}
}
