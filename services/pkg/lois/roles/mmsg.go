package roles

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"golang.org/x/sys/unix"
)

// mmsghdr is struct mmsghdr of recvmmsg(2)/sendmmsg(2): the message header and the length
// the kernel received or sent (Go pads the struct to the header's alignment, as C does).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// maxBatch is the most datagrams one sendmmsg takes (UIO_MAXIOV).
const maxBatch = 1024

// wireBatch reads and writes bursts of UDP datagrams with one recvmmsg/sendmmsg each
// (spec §10's batching; golang.org/x/net/ipv4's ReadBatch does the same but allocates the
// source address of every datagram it reads, which the CI does not need). Its buffers,
// headers and destination addresses are allocated once: a burst allocates nothing.
type wireBatch struct {
	rc   syscall.RawConn
	bufs [][]byte
	rhdr []mmsghdr
	riov []unix.Iovec
	whdr []mmsghdr
	wiov []unix.Iovec
	nw   int
	// the read and write closures, bound once (a closure per call would allocate)
	rfn, wfn func(uintptr) bool
	rn, wn   int
	rerr     error
	werr     error
}

// newWireBatch is a batch of up to n datagrams of up to size bytes on conn (size 0: it only
// writes).
func newWireBatch(conn *net.UDPConn, n, size int) (*wireBatch, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	domain := -1
	if cerr := rc.Control(func(fd uintptr) { domain, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN) }); cerr != nil {
		return nil, cerr
	}
	if err != nil || domain != unix.AF_INET {
		return nil, fmt.Errorf("wire batch: an IPv4 socket is required (domain %d, %v)", domain, err)
	}
	b := &wireBatch{rc: rc, bufs: make([][]byte, n), rhdr: make([]mmsghdr, n), riov: make([]unix.Iovec, n),
		whdr: make([]mmsghdr, n), wiov: make([]unix.Iovec, n)}
	mem := make([]byte, n*size)
	for i := range n {
		if size == 0 { // a batch that only writes
			break
		}
		b.bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
		b.riov[i].Base = &b.bufs[i][0]
		b.riov[i].SetLen(size)
		b.rhdr[i].hdr.Iov = &b.riov[i]
		b.rhdr[i].hdr.SetIovlen(1)
	}
	b.rfn = func(fd uintptr) bool {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.rhdr[0])), uintptr(len(b.rhdr)), unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false // wait until readable (EINTR: try again)
		}
		b.rn, b.rerr = int(r), nil
		if e != 0 {
			b.rn, b.rerr = 0, e
		}
		return true
	}
	b.wfn = func(fd uintptr) bool {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.whdr[b.wn])), uintptr(b.nw-b.wn), unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		if e != 0 {
			b.werr = e
			return true
		}
		b.wn += int(r)
		return true
	}
	return b, nil
}

// read waits for at least one datagram and returns how many it read (up to len(bufs)): the
// datagram i is bufs[i][:size(i)].
func (b *wireBatch) read() (int, error) {
	for i := range b.rhdr {
		b.rhdr[i].n = 0
	}
	if err := b.rc.Read(b.rfn); err != nil {
		return 0, err
	}
	return b.rn, b.rerr
}

// size is the length of the datagram read into bufs[i].
func (b *wireBatch) size(i int) int { return int(b.rhdr[i].n) }

// queue adds pkt (which must stay unchanged until flush) for to, whose address is sa.
func (b *wireBatch) queue(pkt []byte, sa *unix.RawSockaddrInet4) {
	h := &b.whdr[b.nw]
	b.wiov[b.nw].Base = &pkt[0]
	b.wiov[b.nw].SetLen(len(pkt))
	h.hdr = unix.Msghdr{Name: (*byte)(unsafe.Pointer(sa)), Namelen: unix.SizeofSockaddrInet4, Iov: &b.wiov[b.nw]}
	h.hdr.SetIovlen(1)
	b.nw++
}

// flush sends the queued datagrams with as few sendmmsg calls as the kernel allows and
// returns how many were sent and how many failed (a datagram the kernel refuses is skipped
// and counted, the rest still go out).
func (b *wireBatch) flush() (sent, failed int, err error) {
	b.wn = 0
	for b.wn < b.nw && err == nil {
		b.werr = nil
		if err = b.rc.Write(b.wfn); err == nil && b.werr != nil {
			b.wn++ // the first datagram of the rest failed: skip it
			failed++
		}
	}
	sent = b.wn - failed
	failed += b.nw - b.wn // not attempted: the socket closed
	b.nw = 0
	return sent, failed, err
}

// sockaddr4 is the sockaddr_in of an IPv4 wire address.
func sockaddr4(ap netip.AddrPort) *unix.RawSockaddrInet4 {
	sa := &unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: ap.Addr().Unmap().As4()}
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(ap.Port()>>8), byte(ap.Port())
	return sa
}

// tunReader reads bursts of packets from a TUN device: as many as are queued, up to
// len(bufs), one read(2) each (a TUN without IFF_VNET_HDR gives one packet per read) but
// one wait for all of them, so the caller can send them on in one sendmmsg. Packet i is
// bufs[i][off:off+size(i)]. Another io.Reader (a test's in-memory TUN) is read one packet at
// a time.
type tunReader struct {
	rc   syscall.RawConn
	r    io.Reader
	bufs [][]byte
	n    []int
	k    int
	err  error
	fn   func(uintptr) bool
}

// newTUNReader reads tun into n buffers of size bytes, each packet at offset lois.Headroom.
func newTUNReader(tun io.Reader, n, size int) (*tunReader, error) {
	t := &tunReader{r: tun, bufs: make([][]byte, n), n: make([]int, n)}
	for i := range n {
		t.bufs[i] = make([]byte, size)
	}
	f, ok := tun.(*os.File)
	if !ok {
		t.bufs, t.n = t.bufs[:1], t.n[:1]
		return t, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	t.rc = rc
	t.fn = func(fd uintptr) bool {
		for t.k < len(t.bufs) {
			r, err := unix.Read(int(fd), t.bufs[t.k][lois.Headroom:])
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				return t.k > 0 // none yet: wait until readable
			case err != nil:
				t.err = err
				return true
			}
			t.n[t.k] = r
			t.k++
		}
		return true
	}
	return t, nil
}

func (t *tunReader) batched() bool { return t.rc != nil }

// read waits for at least one packet and returns how many it read.
func (t *tunReader) read() (int, error) {
	if t.rc == nil {
		n, err := t.r.Read(t.bufs[0][lois.Headroom:])
		if err != nil {
			return 0, err
		}
		t.n[0] = n
		return 1, nil
	}
	t.k, t.err = 0, nil
	if err := t.rc.Read(t.fn); err != nil {
		return 0, err
	}
	if t.k > 0 {
		return t.k, nil // an error after some packets comes back with the next read
	}
	return 0, t.err
}

// size is the length of packet i of the last read.
func (t *tunReader) size(i int) int { return t.n[i] }
