package roles

import (
	"encoding/binary"

	"github.com/obscura-iot/obscura/services/pkg/lois"
)

// Plain mode is the same packet path without LOIS — the benchmark's baseline for "packets/s
// through the TUN path vs the same path without it" (issue 17 benchmarks): DI and SI tunnel
// the packets unchanged, CI is a plain L4 NAT (destination CIP:SID rewritten to a backend
// chosen by the flow's clear source), SI translates the replies' source back to CIP:SID.
// Headers travel in clear; never deploy it.

// plainParse checks an IPv4/TCP packet and returns its IP header length.
func plainParse(pkt []byte) (int, bool) {
	if len(pkt) < 40 || pkt[0]>>4 != 4 || pkt[9] != 6 {
		return 0, false
	}
	ihl := int(pkt[0]&0xf) * 4
	if ihl < 20 || len(pkt) < ihl+20 {
		return 0, false
	}
	return ihl, true
}

// csumReplace updates a one's-complement checksum for one 16-bit word changing from old to
// new (RFC 1624, eqn. 3).
func csumReplace(c, old, new uint16) uint16 {
	s := uint32(^c) + uint32(^old) + uint32(new)
	s = s&0xffff + s>>16
	s = s&0xffff + s>>16
	return ^uint16(s)
}

// plainRewrite sets the address at addrOff (12: source, 16: destination) and the TCP port
// at portOff (0: source, 2: destination), updating both checksums incrementally.
func plainRewrite(pkt []byte, ihl, addrOff, portOff int, ip [4]byte, port uint16) {
	ipc := binary.BigEndian.Uint16(pkt[10:])
	tc := binary.BigEndian.Uint16(pkt[ihl+16:])
	for i := 0; i < 4; i += 2 {
		o, n := binary.BigEndian.Uint16(pkt[addrOff+i:]), binary.BigEndian.Uint16(ip[i:])
		ipc, tc = csumReplace(ipc, o, n), csumReplace(tc, o, n)
		binary.BigEndian.PutUint16(pkt[addrOff+i:], n)
	}
	tc = csumReplace(tc, binary.BigEndian.Uint16(pkt[ihl+portOff:]), port)
	binary.BigEndian.PutUint16(pkt[ihl+portOff:], port)
	binary.BigEndian.PutUint16(pkt[10:], ipc)
	binary.BigEndian.PutUint16(pkt[ihl+16:], tc)
}

// plainBackends picks a service's backend by the flow's clear source.
type plainBackends map[uint16][]lois.Backend

func (p plainBackends) pick(pkt []byte, ihl int) (lois.Backend, bool) {
	bs := p[binary.BigEndian.Uint16(pkt[ihl+2:])]
	if len(bs) == 0 {
		return lois.Backend{}, false
	}
	h := binary.BigEndian.Uint32(pkt[12:]) ^ uint32(binary.BigEndian.Uint16(pkt[ihl:]))*0x9e3779b1
	return bs[h%uint32(len(bs))], true
}
