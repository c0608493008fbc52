package lois

import "encoding/binary"

// In-place IPv4/TCP handling (spec §3.8, §10 "wire"). A packet lives in buf[off:], and the
// hiding transforms need off ≥ Headroom: inserting the 12-byte option moves the 40-byte fixed
// header left rather than the payload right, and removing it moves the header right, so
// neither depends on the payload size. Checksums are updated incrementally (RFC 1624): the
// bytes after the fixed header shift by 12, an even number, so their one's-complement sum is
// unchanged and only the fixed header, the pseudo-header and the option enter the update.

// Offsets inside the IPv4 header (IHL = 5) and the TCP header that follows it.
const (
	ipHdrLen   = 20
	tcpFixed   = 20
	fixedHdr   = ipHdrLen + tcpFixed
	ipTotLen   = 2
	ipID       = 4
	ipFlags    = 6
	ipTTL      = 8
	ipProto    = 9
	ipCsum     = 10
	ipSrc      = 12
	ipDst      = 16
	tcpSport   = ipHdrLen + 0
	tcpDport   = ipHdrLen + 2
	tcpSeq     = ipHdrLen + 4
	tcpAck     = ipHdrLen + 8
	tcpDoff    = ipHdrLen + 12
	tcpFlags   = ipHdrLen + 13
	tcpCsum    = ipHdrLen + 16
	tcpOptions = ipHdrLen + tcpFixed
	protoTCP   = 6
	flagSYN    = 0x02
)

// parse checks that pkt is one whole unfragmented IPv4 packet with no IP options carrying TCP
// (D-14) and returns the TCP header length.
func parse(pkt []byte) (tcpHdr int, err error) {
	if len(pkt) < fixedHdr || pkt[0] != 0x45 || pkt[ipProto] != protoTCP {
		return 0, ErrMalformed
	}
	if int(binary.BigEndian.Uint16(pkt[ipTotLen:])) != len(pkt) {
		return 0, ErrMalformed
	}
	if binary.BigEndian.Uint16(pkt[ipFlags:])&0x3FFF != 0 { // MF or a fragment offset
		return 0, ErrMalformed
	}
	tcpHdr = int(pkt[tcpDoff]>>4) * 4
	if tcpHdr < tcpFixed || ipHdrLen+tcpHdr > len(pkt) {
		return 0, ErrMalformed
	}
	return tcpHdr, nil
}

// ParseID returns the identifier of the LOIS option at TCP+20, checking kind, length and
// ExID (spec §3.8: always the first option, so parsing is O(1)).
func ParseID(pkt []byte, exID uint16) (uint64, error) {
	th, err := parse(pkt)
	if err != nil {
		return 0, err
	}
	if th < tcpFixed+OptionLen {
		return 0, ErrNoOption
	}
	o := pkt[tcpOptions:]
	if o[0] != OptionKind || o[1] != OptionLen || binary.BigEndian.Uint16(o[2:]) != exID {
		return 0, ErrNoOption
	}
	return binary.BigEndian.Uint64(o[4:]), nil
}

// sum16 is the one's-complement sum of b as big-endian 16-bit words, accumulated over 32-bit
// words (2³² ≡ 1 mod 2¹⁶−1, so folding the carries later gives the same checksum).
func sum16(b []byte) uint32 {
	var s uint64
	for len(b) >= 8 {
		s += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	if len(b) >= 4 {
		s += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	s = s>>32 + s&0xFFFFFFFF
	s = s>>32 + s&0xFFFFFFFF
	return uint32(s)
}

func fold(s uint32) uint16 {
	x := uint64(s)
	x = x>>16 + x&0xFFFF
	x = x>>16 + x&0xFFFF
	return uint16(x)
}

// tcpHeadSum is the one's-complement sum of everything in the TCP checksum that a transform
// may change: the pseudo-header (addresses, protocol, TCP length) and the fixed TCP header
// without its checksum field. extra adds the option area that is being inserted or removed.
func tcpHeadSum(pkt []byte, extra []byte) uint32 {
	_ = pkt[fixedHdr-1]
	s := uint64(binary.BigEndian.Uint32(pkt[ipSrc:])) + uint64(binary.BigEndian.Uint32(pkt[ipDst:])) +
		protoTCP + uint64(len(pkt)-ipHdrLen) +
		uint64(binary.BigEndian.Uint32(pkt[tcpSport:])) + uint64(binary.BigEndian.Uint32(pkt[tcpSeq:])) +
		uint64(binary.BigEndian.Uint32(pkt[tcpAck:])) + uint64(binary.BigEndian.Uint32(pkt[tcpDoff:])) +
		uint64(binary.BigEndian.Uint16(pkt[tcpCsum+2:])) + uint64(sum16(extra))
	s = s>>32 + s&0xFFFFFFFF
	s = s>>32 + s&0xFFFFFFFF
	return uint32(s)
}

// adjustTCP applies RFC 1624 eqn 3: HC' = ~(~HC + ~m + m').
func adjustTCP(pkt []byte, old, new uint32) {
	c := binary.BigEndian.Uint16(pkt[tcpCsum:])
	s := uint32(^c) + uint32(^fold(old)) + uint32(fold(new))
	binary.BigEndian.PutUint16(pkt[tcpCsum:], ^fold(s))
}

func setIPChecksum(pkt []byte) {
	pkt[ipCsum], pkt[ipCsum+1] = 0, 0
	binary.BigEndian.PutUint16(pkt[ipCsum:], ^fold(sum16(pkt[:ipHdrLen])))
}

// ChecksumsValid reports whether the IPv4 header checksum and the TCP checksum of pkt verify.
func ChecksumsValid(pkt []byte) bool {
	if _, err := parse(pkt); err != nil {
		return false
	}
	if fold(sum16(pkt[:ipHdrLen])) != 0xFFFF {
		return false
	}
	return fold(fullTCPSum(pkt)) == 0xFFFF
}

func fullTCPSum(pkt []byte) uint32 {
	s := uint64(sum16(pkt[ipSrc:ipDst+4])) + protoTCP + uint64(len(pkt)-ipHdrLen) + uint64(sum16(pkt[ipHdrLen:]))
	s = s>>32 + s&0xFFFFFFFF
	s = s>>32 + s&0xFFFFFFFF
	return uint32(s)
}

// FixChecksums recomputes both checksums from scratch (for packets a role builds itself).
func FixChecksums(pkt []byte) {
	setIPChecksum(pkt)
	pkt[tcpCsum], pkt[tcpCsum+1] = 0, 0
	binary.BigEndian.PutUint16(pkt[tcpCsum:], ^fold(fullTCPSum(pkt)))
}

// xorFields XORs the keystream into the fields of the map in spec §3.8: source address,
// the device's port (source on upload, destination on download), seq, ack and the flags
// under mask. XOR is its own inverse, so hiding and recovery are the same call.
func xorFields(pkt []byte, ks *[KeystreamSize]byte, portOff int, mask byte) {
	a := binary.BigEndian.Uint32(pkt[ipSrc:]) ^ binary.BigEndian.Uint32(ks[0:])
	binary.BigEndian.PutUint32(pkt[ipSrc:], a)
	p := binary.BigEndian.Uint16(pkt[portOff:]) ^ binary.BigEndian.Uint16(ks[4:])
	binary.BigEndian.PutUint16(pkt[portOff:], p)
	s := binary.BigEndian.Uint32(pkt[tcpSeq:]) ^ binary.BigEndian.Uint32(ks[6:])
	binary.BigEndian.PutUint32(pkt[tcpSeq:], s)
	k := binary.BigEndian.Uint32(pkt[tcpAck:]) ^ binary.BigEndian.Uint32(ks[10:])
	binary.BigEndian.PutUint32(pkt[tcpAck:], k)
	pkt[tcpFlags] ^= ks[14] & mask
}

// hide encrypts the header of buf[off:] with p, puts port into setPortOff (U), inserts the
// option and fixes lengths and checksums. It returns the new offset (off − OptionLen). old is
// tcpHeadSum of the packet as it arrived, taken over its first optLen option bytes: a caller
// that rewrote those options (normalisation) or other header fields in between gets a single
// checksum update for everything.
func hide(buf []byte, off int, p *Pair, xorPortOff, setPortOff int, port uint16, mask byte, exID uint16, old uint32, optLen int) int {
	pkt := buf[off:]
	xorFields(pkt, &p.KS, xorPortOff, mask)
	binary.BigEndian.PutUint16(pkt[setPortOff:], port)
	n := off - OptionLen
	copy(buf[n:n+fixedHdr], pkt[:fixedHdr])
	pkt = buf[n:]
	o := pkt[tcpOptions : tcpOptions+OptionLen]
	o[0], o[1] = OptionKind, OptionLen
	binary.BigEndian.PutUint16(o[2:], exID)
	binary.BigEndian.PutUint64(o[4:], p.ID)
	binary.BigEndian.PutUint16(pkt[ipTotLen:], uint16(len(pkt)))
	pkt[tcpDoff] += OptionLen / 4 << 4
	adjustTCP(pkt, old, tcpHeadSum(pkt, pkt[tcpOptions:tcpOptions+OptionLen+optLen]))
	setIPChecksum(pkt)
	return n
}

// unhide removes the option of buf[off:] and decrypts the header with ks. It returns the new
// offset (off + OptionLen). If setPortOff > 0 that port is set to port (DI download restores
// the SID as the source port) within the same checksum update.
func unhide(buf []byte, off int, ks *[KeystreamSize]byte, xorPortOff int, mask byte, setPortOff int, port uint16) int {
	pkt := buf[off:]
	old := tcpHeadSum(pkt, pkt[tcpOptions:tcpOptions+OptionLen])
	xorFields(pkt, ks, xorPortOff, mask)
	if setPortOff > 0 {
		binary.BigEndian.PutUint16(pkt[setPortOff:], port)
	}
	n := off + OptionLen
	copy(buf[n:n+fixedHdr], pkt[:fixedHdr]) // copy handles the overlap like memmove
	pkt = buf[n:]
	binary.BigEndian.PutUint16(pkt[ipTotLen:], uint16(len(pkt)))
	pkt[tcpDoff] -= OptionLen / 4 << 4
	adjustTCP(pkt, old, tcpHeadSum(pkt, nil))
	setIPChecksum(pkt)
	return n
}
