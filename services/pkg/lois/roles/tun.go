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
func OpenTUN(name string) (*os.File, error) { return openTUN(name, false) }

// openTUN is OpenTUN; multiQueue attaches one queue of a multi-queue device
// (IFF_MULTI_QUEUE): several processes attach to one device, the kernel spreads the packets
// it routes into the device over the queues by flow, and the device lives while any queue is
// attached. A device made without the flag cannot be attached with it, nor the reverse.
func openTUN(name string, multiQueue bool) (*os.File, error) {
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
	flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if multiQueue {
		flags |= unix.IFF_MULTI_QUEUE
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach tun %s: %w", name, err)
	}
	if err := raiseTxQueue(name, TUNQueueLen); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tun %s queue: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "tun:"+name), nil
}

// TUNQueueLen is the transmit queue OpenTUN gives its device (packets the kernel holds for
// the role's reader; the kernel's default is 500). A TUN device drops what does not fit
// (tx_dropped) instead of pushing back on the sender, and a burst of a TCP sender behind it
// (the server's downloads at the SI, the device's uploads at the DI) outruns one reader by
// more than 500 packets: every drop then costs the flow a loss recovery, which hardened
// LOIS makes without SACK (D-10). 4096 packets of 1400 B is 5.7 MB, a few ms at the path's
// rate.
const TUNQueueLen = 4096

// raiseTxQueue sets the transmit queue of device name to at least n packets
// (SIOCSIFTXQLEN). Without CAP_NET_ADMIN (a device made beforehand for an unprivileged
// role) the queue is left as it is.
func raiseTxQueue(name string, n uint32) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFTXQLEN, ifr); err != nil {
		return err
	}
	if ifr.Uint32() >= n {
		return nil
	}
	ifr.SetUint32(n)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFTXQLEN, ifr); err != nil && err != unix.EPERM {
		return err
	}
	return nil
}
