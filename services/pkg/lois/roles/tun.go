package roles

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenTUN attaches to the TUN device name (creating it if it does not exist) in the network
// namespace of the calling process, without packet information headers: each Read returns
// one IPv4 (or IPv6) packet, each Write injects one. The descriptor is non-blocking, so the
// runtime poller serves it and Close ends a pending Read.
func OpenTUN(name string) (*os.File, error) {
	if len(name) == 0 || len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("tun name %q: want 1 to %d bytes", name, unix.IFNAMSIZ-1)
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach tun %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "tun:"+name), nil
}
