package lois

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	netnsx "github.com/obscura-iot/obscura/e2e/internal/netns"
)

// needRoot skips the test unless it can make namespaces and TUN devices.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test makes network namespaces, veth pairs and TUN devices (run as root, e.g. sudo -E go test ./lois/)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("needs /dev/net/tun: %v", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2)")
	}
}

// sh runs a command and fails the test on error.
func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// netns is a network namespace the test made (deleted at cleanup).
type netns struct{ name string }

func newNetns(t *testing.T, name string) netns {
	t.Helper()
	sh(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	n := netns{name}
	n.ip(t, "link", "set", "lo", "up")
	return n
}

func (n netns) ip(t *testing.T, args ...string) string {
	t.Helper()
	return sh(t, append([]string{"ip", "-n", n.name}, args...)...)
}

func (n netns) sysctl(t *testing.T, kv string) {
	t.Helper()
	sh(t, "ip", "netns", "exec", n.name, "sysctl", "-qw", kv)
}

// cmd is a command run inside the namespace (ip netns exec execs it, so its pid is the
// command's own).
func (n netns) cmd(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.name, name}, args...)...)
}

// do runs f inside the namespace: sockets f creates belong to it (netns.Do).
func (n netns) do(f func() error) error { return netnsx.Do(n.name, f) }

// dial connects inside the namespace.
func (n netns) dial(network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.do(func() (err error) {
		c, err = net.DialTimeout(network, addr, 10*time.Second)
		return err
	})
	return c, err
}

func suffix() string {
	var b [3]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// capture records the frames of one interface of a namespace through an AF_PACKET socket.
type capture struct {
	fd     int
	mu     sync.Mutex
	frames [][]byte
	stop   chan struct{}
	done   chan struct{}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func startCapture(t *testing.T, n netns, ifname string) *capture {
	t.Helper()
	c := &capture{stop: make(chan struct{}), done: make(chan struct{})}
	err := n.do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, int(htons(syscall.ETH_P_ALL)))
		if err != nil {
			return err
		}
		if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(syscall.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			syscall.Close(fd)
			return err
		}
		tv := syscall.Timeval{Usec: 100_000}
		if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
			syscall.Close(fd)
			return err
		}
		syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<20)
		c.fd = fd
		return nil
	})
	if err != nil {
		t.Fatalf("capture on %s in %s: %v", ifname, n.name, err)
	}
	go func() {
		defer close(c.done)
		defer syscall.Close(c.fd)
		buf := make([]byte, 65536)
		for {
			select {
			case <-c.stop:
				return
			default:
			}
			k, _, err := syscall.Recvfrom(c.fd, buf, 0)
			if err != nil || k <= 0 {
				continue
			}
			c.mu.Lock()
			c.frames = append(c.frames, bytes.Clone(buf[:k]))
			c.mu.Unlock()
		}
	}()
	t.Cleanup(c.close)
	return c
}

func (c *capture) close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

// take stops the capture and returns its frames.
func (c *capture) take() [][]byte {
	c.close()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames
}
