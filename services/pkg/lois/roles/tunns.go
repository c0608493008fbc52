package roles

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// TUNSetup places and addresses a server interface's TUN device when no one else does (an
// SI run by the operator, docs/lois.md "Server interfaces run by the operator"): the device
// is made inside the server's network namespace, given the server's address and the MTU, set
// up, and the devices' networks are routed into it, so the server's replies reach the SI.
type TUNSetup struct {
	// Netns is a network namespace file (/run/netns/<name>); "" is the caller's own.
	Netns string
	// Addr, when valid, is given to the device as a /32 (the server's address SIP: the
	// recovered uploads are addressed to it).
	Addr netip.Addr
	// MTU, when positive, is the device's MTU.
	MTU int
	// Routes are routed into the device (the device addresses DIP the server answers).
	Routes []netip.Prefix
	// MultiQueue attaches one queue of a multi-queue device, made by the first of several
	// server interface replicas of one service and joined by the others: one device, one
	// address, one set of routes, the server's replies spread over the replicas by flow, and
	// the device (with its routes) kept while any replica runs. A replica that finds the
	// address already on the device leaves it as it is (setting it again would flush the
	// routes that use it as source while the others carry traffic).
	MultiQueue bool
}

// OpenTUNWith opens the TUN device name as OpenTUN does, inside s.Netns, and configures it.
// The descriptor stays bound to that namespace's device after the calling thread is back in
// its own namespace. The device goes with its descriptor: a restarted SI makes and configures
// it again.
func OpenTUNWith(name string, s TUNSetup) (*os.File, error) {
	var f *os.File
	err := inNetns(s.Netns, func() error {
		var err error
		if f, err = openTUN(name, s.MultiQueue); err != nil {
			return err
		}
		if err = configureTUN(name, s); err != nil {
			f.Close()
			return fmt.Errorf("tun %s: %w", name, err)
		}
		return nil
	})
	return f, err
}

// inNetns runs fn on a locked OS thread moved into the network namespace path: the sockets and
// devices fn makes belong to it. The thread moves back afterwards; one that cannot is not
// returned to the scheduler (it ends with the goroutine).
func inNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	defer target.Close()
	runtime.LockOSThread()
	own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("own network namespace: %w", err)
	}
	defer own.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace %s (needs CAP_SYS_ADMIN): %w", path, err)
	}
	ferr := fn()
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		return errors.Join(ferr, fmt.Errorf("leave network namespace %s: %w", path, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// configureTUN sets the address, MTU, up flag and routes of device name in the calling
// thread's network namespace.
func configureTUN(name string, s TUNSetup) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr := func() *unix.Ifreq {
		r, _ := unix.NewIfreq(name) // OpenTUN checked the name
		return r
	}
	if s.Addr.IsValid() && !(s.MultiQueue && hasAddr(fd, name, s.Addr)) {
		if !s.Addr.Is4() {
			return fmt.Errorf("address %s: want IPv4", s.Addr)
		}
		r := ifr()
		if err := r.SetInet4Addr(s.Addr.AsSlice()); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFADDR, r); err != nil {
			return fmt.Errorf("address %s: %w", s.Addr, err)
		}
		r = ifr()
		if err := r.SetInet4Addr([]byte{255, 255, 255, 255}); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFNETMASK, r); err != nil {
			return fmt.Errorf("netmask /32: %w", err)
		}
	}
	if s.MTU > 0 {
		r := ifr()
		r.SetUint32(uint32(s.MTU))
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFMTU, r); err != nil {
			return fmt.Errorf("mtu %d: %w", s.MTU, err)
		}
	}
	r := ifr()
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, r); err != nil {
		return err
	}
	r.SetUint16(r.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, r); err != nil {
		return fmt.Errorf("set up: %w", err)
	}
	if len(s.Routes) == 0 {
		return nil
	}
	r = ifr()
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, r); err != nil {
		return err
	}
	index := r.Uint32()
	for _, p := range s.Routes {
		if err := addRoute(index, p, s.Addr); err != nil {
			return fmt.Errorf("route %s: %w", p, err)
		}
	}
	return nil
}

// hasAddr says whether device name's IPv4 address is a (SIOCGIFADDR on socket fd).
func hasAddr(fd int, name string, a netip.Addr) bool {
	r, err := unix.NewIfreq(name)
	if err != nil {
		return false
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFADDR, r); err != nil {
		return false // EADDRNOTAVAIL: no address yet
	}
	got, err := r.Inet4Addr()
	return err == nil && netip.AddrFrom4([4]byte(got)) == a
}

// addRoute adds (or replaces) the route dst via interface index in the main table, with src
// as the preferred source when valid (RTM_NEWROUTE over rtnetlink).
func addRoute(index uint32, dst netip.Prefix, src netip.Addr) error {
	if !dst.Addr().Is4() {
		return errors.New("want an IPv4 prefix")
	}
	dst = dst.Masked()
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	attr := func(b []byte, typ uint16, val []byte) []byte {
		l := unix.SizeofRtAttr + len(val)
		b = binary.NativeEndian.AppendUint16(b, uint16(l))
		b = binary.NativeEndian.AppendUint16(b, typ)
		b = append(b, val...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	msg := make([]byte, unix.SizeofNlMsghdr, 64)
	msg = append(msg, unix.AF_INET, byte(dst.Bits()), 0, 0, // family, dst_len, src_len, tos
		unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_LINK, unix.RTN_UNICAST)
	msg = binary.NativeEndian.AppendUint32(msg, 0) // flags
	msg = attr(msg, unix.RTA_DST, dst.Addr().AsSlice())
	msg = attr(msg, unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, index))
	if src.IsValid() && src.Is4() {
		msg = attr(msg, unix.RTA_PREFSRC, src.AsSlice())
	}
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], unix.RTM_NEWROUTE)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_REPLACE)
	binary.NativeEndian.PutUint32(msg[8:], 1) // seq
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	if n < unix.SizeofNlMsghdr+4 || binary.NativeEndian.Uint16(buf[4:]) != unix.NLMSG_ERROR {
		return fmt.Errorf("unexpected rtnetlink answer (%d bytes)", n)
	}
	if code := int32(binary.NativeEndian.Uint32(buf[unix.SizeofNlMsghdr:])); code != 0 {
		return unix.Errno(-code)
	}
	return nil
}
