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
		uint64(binary.BigEndian.Uint16(pkt[tcpCsum+2:]))
	if len(extra) == OptionLen { // the LOIS option alone: three words, no loop
		s += uint64(binary.BigEndian.Uint32(extra)) + uint64(binary.BigEndian.Uint32(extra[4:])) +
			uint64(binary.BigEndian.Uint32(extra[8:]))
	} else {
		s += uint64(sum16(extra))
	}
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

// setIPChecksum recomputes the IPv4 header checksum of pkt (IHL = 5) from its five words,
// the checksum field left out: unrolled, because every transform calls it once per packet.
func setIPChecksum(pkt []byte) {
	_ = pkt[ipHdrLen-1]
	s := uint64(binary.BigEndian.Uint32(pkt[0:])) + uint64(binary.BigEndian.Uint32(pkt[4:])) +
		uint64(binary.BigEndian.Uint16(pkt[8:])) + uint64(binary.BigEndian.Uint32(pkt[12:])) +
		uint64(binary.BigEndian.Uint32(pkt[16:]))
	s = s>>32 + s&0xFFFFFFFF
	s = s>>32 + s&0xFFFFFFFF
	binary.BigEndian.PutUint16(pkt[ipCsum:], ^fold(uint32(s)))
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
	moveHdr(buf, off, n)
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
// offset (off + OptionLen). If setPortOff > 0 (it can only be tcpSport) the source port is
// set to port (DI download restores the SID as the source port) within the same checksum
// update. It is one pass: the 40-byte header and the option are loaded as words, decrypted,
// re-lengthed and re-checksummed in registers and stored once at the new offset, so no store
// is read back (an in-place XOR followed by a 40-byte move stalled on store forwarding).
func unhide(buf []byte, off int, ks *[KeystreamSize]byte, xorPortOff int, mask byte, setPortOff int, port uint16) int {
	be := binary.BigEndian
	pkt := buf[off:]
	_ = pkt[fixedHdr+OptionLen-1]
	w0, w1, w2 := be.Uint64(pkt[0:]), be.Uint64(pkt[8:]), be.Uint64(pkt[16:])
	w3, w4 := be.Uint64(pkt[24:]), be.Uint64(pkt[32:])
	o0, o1 := be.Uint32(pkt[40:]), be.Uint64(pkt[44:])
	tcpLen := uint64(len(pkt) - ipHdrLen)
	// The words as tcpHeadSum sees them: pseudo-header, fixed TCP header without its checksum,
	// and (before) the option.
	oldSum := w1&0xFFFFFFFF + w2>>32 + protoTCP + tcpLen + w2&0xFFFFFFFF + w3>>32 + w3&0xFFFFFFFF +
		w4>>32 + w4&0xFFFF + uint64(o0) + o1>>32 + o1&0xFFFFFFFF
	// Field map (spec §3.8): source address (w1 low), the device's port (w2 low: source at
	// bits 16–31, destination at 0–15), seq and ack (w3), flags (byte 33: w4 bits 48–55).
	w1 ^= uint64(be.Uint32(ks[0:]))
	kp := uint64(be.Uint16(ks[4:]))
	if xorPortOff == tcpSport {
		w2 ^= kp << 16
	} else {
		w2 ^= kp
	}
	if setPortOff > 0 {
		w2 = w2&^(0xFFFF<<16) | uint64(port)<<16
	}
	w3 ^= uint64(be.Uint32(ks[6:]))<<32 | uint64(be.Uint32(ks[10:]))
	w4 ^= uint64(ks[14]&mask) << 48
	// Lengths: total length (bytes 2–3: w0 bits 32–47), data offset (byte 32: w4 bits 60–63).
	w0 = w0&^(0xFFFF<<32) | uint64(len(pkt)-OptionLen)<<32
	w4 -= uint64(OptionLen/4) << 60
	tcpLen -= OptionLen
	newSum := w1&0xFFFFFFFF + w2>>32 + protoTCP + tcpLen + w2&0xFFFFFFFF + w3>>32 + w3&0xFFFFFFFF +
		w4>>32 + w4&0xFFFF
	// TCP checksum (bytes 36–37: w4 bits 16–31), RFC 1624 eqn 3.
	c := uint16(w4 >> 16)
	cs := uint32(^c) + uint32(^fold(fold64(oldSum))) + uint32(fold(fold64(newSum)))
	w4 = w4&^(0xFFFF<<16) | uint64(^fold(cs))<<16
	// IPv4 header checksum (bytes 10–11: w1 bits 32–47) over w0, TTL/protocol and the addresses.
	is := w0>>32 + w0&0xFFFFFFFF + w1>>48 + w1&0xFFFFFFFF + w2>>32
	w1 = w1&^(0xFFFF<<32) | uint64(^fold(fold64(is)))<<32
	n := off + OptionLen
	out := buf[n : n+fixedHdr]
	be.PutUint64(out[0:], w0)
	be.PutUint64(out[8:], w1)
	be.PutUint64(out[16:], w2)
	be.PutUint64(out[24:], w3)
	be.PutUint64(out[32:], w4)
	return n
}

// fold64 reduces a sum of 32-bit words to 32 bits without changing it mod 2¹⁶−1.
func fold64(s uint64) uint32 {
	s = s>>32 + s&0xFFFFFFFF
	s = s>>32 + s&0xFFFFFFFF
	return uint32(s)
}

// moveHdr moves the 40-byte fixed header from buf[from:] to buf[to:]; the ranges overlap, so
// it goes through a register-sized temporary instead of a memmove call.
func moveHdr(buf []byte, from, to int) {
	h := [fixedHdr]byte(buf[from : from+fixedHdr])
	*(*[fixedHdr]byte)(buf[to : to+fixedHdr]) = h
}
