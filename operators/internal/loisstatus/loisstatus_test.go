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
	var metrics string
	testenv.Eventually(t, 30*time.Second, "lois ci serving metrics", func() error {
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

	c, err := net.Dial("udp4", wire)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("not an IPv4 packet")); err != nil {
		t.Fatal(err)
	}
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
