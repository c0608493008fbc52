package lois

import (
	"encoding/binary"
	mrand "math/rand/v2"
	"testing"
)

// unhideRef is the two-pass unhide (XOR in place, move the header, recompute both checksums
// from the header words) that the one-pass unhide replaced; TestUnhideMatchesReference holds
// them byte-equal.
func unhideRef(buf []byte, off int, ks *[KeystreamSize]byte, xorPortOff int, mask byte, setPortOff int, port uint16) int {
	pkt := buf[off:]
	old := tcpHeadSum(pkt, pkt[tcpOptions:tcpOptions+OptionLen])
	xorFields(pkt, ks, xorPortOff, mask)
	if setPortOff > 0 {
		binary.BigEndian.PutUint16(pkt[setPortOff:], port)
	}
	n := off + OptionLen
	copy(buf[n:n+fixedHdr], pkt[:fixedHdr])
	pkt = buf[n:]
	binary.BigEndian.PutUint16(pkt[ipTotLen:], uint16(len(pkt)))
	pkt[tcpDoff] -= OptionLen / 4 << 4
	adjustTCP(pkt, old, tcpHeadSum(pkt, nil))
	pkt[ipCsum], pkt[ipCsum+1] = 0, 0
	binary.BigEndian.PutUint16(pkt[ipCsum:], ^fold(sum16(pkt[:ipHdrLen])))
	return n
}

func TestUnhideMatchesReference(t *testing.T) {
	r := mrand.New(mrand.NewPCG(17, 1))
	for i := range 20000 {
		size := ipHdrLen + tcpFixed + OptionLen + 12 + r.IntN(1500-64) // room for 3 more option words
		a := make([]byte, size)
		for j := range a {
			a[j] = byte(r.Uint32())
		}
		a[0] = 0x45
		binary.BigEndian.PutUint16(a[ipTotLen:], uint16(size))
		a[ipProto] = protoTCP
		a[ipFlags], a[ipFlags+1] = 0x40, 0 // DF, not a fragment
		a[tcpDoff] = byte((tcpFixed+OptionLen)/4+r.IntN(4))<<4 | a[tcpDoff]&0x0F
		FixChecksums(a)
		if !ChecksumsValid(a) {
			t.Fatalf("case %d: test packet invalid", i)
		}
		b := append([]byte(nil), a...)
		var ks [KeystreamSize]byte
		for j := range ks {
			ks[j] = byte(r.Uint32())
		}
		xorOff, setOff, mask := tcpSport, 0, byte(0xFF)
		if i%2 == 1 {
			xorOff, setOff = tcpDport, tcpSport
		}
		if i%3 == 0 {
			mask = 0x3F
		}
		port := uint16(r.Uint32())
		na := unhide(a, 0, &ks, xorOff, mask, setOff, port)
		nb := unhideRef(b, 0, &ks, xorOff, mask, setOff, port)
		if na != nb || string(a[na:]) != string(b[nb:]) {
			t.Fatalf("case %d: one-pass unhide differs from the reference\n got %x\nwant %x", i, a[na:na+fixedHdr], b[nb:nb+fixedHdr])
		}
		if !ChecksumsValid(a[na:]) {
			t.Fatalf("case %d: checksums invalid after unhide", i)
		}
	}
}
