package lois_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/lois"
)

var flagCombos = []byte{0x02, 0x12, 0x10, 0x18, 0x11, 0x04, 0x14, 0x01, 0x29, 0x3F & ^byte(0x07), 0xC2, 0x50}

// TestUploadRoundTrip is spec T1 and T4: DI → CI → SI delivers the packet byte for byte
// except dst = SIP:P_srv (and, hardened, the normalised fields), with valid checksums; the
// wire packet carries CIP:U, the option first, doff + 3 and length + 12.
func TestUploadRoundTrip(t *testing.T) {
	for _, paper := range []bool{true, false} {
		w := newWorld(t, paper, []uint16{5, 80, 1883}, 1024, 2)
		r := chacha(fmt.Sprint("t1", paper))
		for optName := range optionSets {
			for _, fl := range flagCombos {
				for _, size := range []int{0, 1, 100, 1460} {
					sid := w.sids[int(fl)%len(w.sids)]
					buf, off := randPacket(r, dip, cip, sid, optName, fl, size)
					orig := bytes.Clone(buf[off:])
					want := normalised(orig, paper)
					noff, err := w.dev.HideUpload(buf, off, now)
					if err != nil {
						t.Fatal(err)
					}
					wire := buf[noff:]
					checkWireUpload(t, wire, orig, w)
					wireCopy := bytes.Clone(wire)
					be, err := w.ci.Forward(wire)
					if err != nil {
						t.Fatal(err)
					}
					checkCIView(t, wireCopy, wire, be)
					ri := int(be.IP[3]) - 1
					roff, gotSID, err := w.si[ri].RecoverUpload(buf, noff)
					if err != nil || gotSID != sid {
						t.Fatalf("SI: sid %d err %v", gotSID, err)
					}
					got := buf[roff:]
					copy(want[16:20], be.IP[:])
					binary.BigEndian.PutUint16(want[22:], be.Port)
					if !paper { // the IP ID is random by design (D-11)
						copy(want[4:6], got[4:6])
					}
					lois.FixChecksums(want)
					if !bytes.Equal(got, want) {
						t.Fatalf("paper=%v opts=%s flags=%#x size=%d:\n got %x\nwant %x", paper, optName, fl, size, got, want)
					}
					if !lois.ChecksumsValid(got) {
						t.Fatal("checksums of delivered packet do not verify")
					}
				}
			}
		}
	}
}

// normalised is what the hardened DI turns a device packet into before hiding (D-10, D-11):
// TTL 64, DF, TS and SACK options NOPed, SYN MSS clamped to 1448. Paper mode changes nothing.
func normalised(p []byte, paper bool) []byte {
	q := bytes.Clone(p)
	if paper {
		return q
	}
	q[8] = 64
	binary.BigEndian.PutUint16(q[6:], 0x4000)
	opts := q[40 : 20+int(q[32]>>4)*4]
	for i := 0; i < len(opts); {
		switch opts[i] {
		case 0:
			i = len(opts)
			continue
		case 1:
			i++
			continue
		}
		l := int(opts[i+1])
		switch opts[i] {
		case 2:
			if q[33]&0x02 != 0 && binary.BigEndian.Uint16(opts[i+2:]) > 1448 {
				binary.BigEndian.PutUint16(opts[i+2:], 1448)
			}
		case 4, 5, 8:
			for j := i; j < i+l; j++ {
				opts[j] = 1
			}
		}
		i += l
	}
	lois.FixChecksums(q)
	return q
}

func checkWireUpload(t *testing.T, wire, orig []byte, w *world) {
	t.Helper()
	if !lois.ChecksumsValid(wire) {
		t.Fatal("wire packet checksums do not verify")
	}
	if !bytes.Equal(wire[16:20], cip[:]) || binary.BigEndian.Uint16(wire[22:]) != lois.DefaultUnifiedPort {
		t.Fatalf("wire dst %v:%d, want CIP:U", wire[16:20], binary.BigEndian.Uint16(wire[22:]))
	}
	if wire[40] != lois.OptionKind || wire[41] != lois.OptionLen || binary.BigEndian.Uint16(wire[42:]) != lois.DefaultExID {
		t.Fatalf("option %x not first", wire[40:52])
	}
	if wire[32]>>4 != orig[32]>>4+3 || len(wire) != len(orig)+12 || int(binary.BigEndian.Uint16(wire[2:])) != len(wire) {
		t.Fatal("doff or length not adjusted")
	}
	if !bytes.Equal(wire[52:], orig[40:]) && wire[8] == orig[8] { // paper mode: options unchanged
		t.Fatal("options or payload changed")
	}
}

// checkCIView is spec T3: CI writes only dst IP, dst port and the checksums.
func checkCIView(t *testing.T, before, after []byte, be lois.Backend) {
	t.Helper()
	for i := range before {
		switch {
		case i >= 16 && i < 20, i == 22, i == 23, i == 10, i == 11, i == 36, i == 37:
			continue
		}
		if before[i] != after[i] {
			t.Fatalf("CI changed byte %d", i)
		}
	}
	if !bytes.Equal(after[16:20], be.IP[:]) || binary.BigEndian.Uint16(after[22:]) != be.Port {
		t.Fatal("CI did not address the backend")
	}
	if !lois.ChecksumsValid(after) {
		t.Fatal("CI output checksums do not verify")
	}
}

// TestDownloadRoundTrip is spec T2 and T4: SI → DI delivers the reply from CIP:SID, byte for
// byte; on the wire the source port is U and the destination DIP.
func TestDownloadRoundTrip(t *testing.T) {
	for _, paper := range []bool{true, false} {
		w := newWorld(t, paper, []uint16{5, 80}, 1024, 3)
		r := chacha(fmt.Sprint("t2", paper))
		for optName := range optionSets {
			for i, fl := range flagCombos {
				sid := w.sids[i%2]
				rep := i % 3
				buf, off := randPacket(r, [4]byte{10, 0, 0, byte(rep + 1)}, dip, 0, optName, fl, 17*i)
				binary.BigEndian.PutUint16(buf[off+20:], portOff+sid) // reply from P_srv …
				binary.BigEndian.PutUint16(buf[off+22:], 40000+uint16(i))
				lois.FixChecksums(buf[off:])
				want := normalised(buf[off:], paper)
				copy(want[12:16], cip[:]) // … arrives from CIP:SID
				binary.BigEndian.PutUint16(want[20:], sid)
				noff, err := w.si[rep].HideDownload(buf, off, w.siPools[rep], now)
				if err != nil {
					t.Fatal(err)
				}
				wire := buf[noff:]
				if !lois.ChecksumsValid(wire) || !bytes.Equal(wire[16:20], dip[:]) || binary.BigEndian.Uint16(wire[20:]) != lois.DefaultUnifiedPort {
					t.Fatalf("download wire packet: %x", wire[:52])
				}
				roff, gotSID, err := w.dev.RecoverDownload(buf, noff)
				if err != nil || gotSID != sid {
					t.Fatalf("DI: sid %d, %v", gotSID, err)
				}
				got := buf[roff:]
				if !paper {
					copy(want[4:6], got[4:6])
				}
				lois.FixChecksums(want)
				if !bytes.Equal(got, want) {
					t.Fatalf("opts=%s flags=%#x:\n got %x\nwant %x", optName, fl, got, want)
				}
			}
		}
	}
}

// TestXORMapping is spec T6: each keystream byte range touches only its field, and flags
// outside the mask are untouched.
func TestXORMapping(t *testing.T) {
	for _, paper := range []bool{true, false} {
		w := newWorld(t, paper, []uint16{5}, 64, 1)
		pairs := w.up[5].Pairs(nil, 1, 0)
		for k, first := range pairs[:32] {
			buf, off := packet(dip, cip, 1000, 5, 0, 0, 0, nil, nil)
			orig := bytes.Clone(buf[off:])
			noff, err := w.dev.HideUpload(buf, off, now)
			if err != nil || w.dev.Up.Get(5).Len() != len(pairs)-k-1 {
				t.Fatal(err)
			}
			wire := buf[noff:]
			ks := first.KS
			checks := []struct {
				name     string
				got, exp []byte
			}{
				{"src ip", wire[12:16], ks[0:4]},
				{"src port", wire[20:22], xor(orig[20:22], ks[4:6])},
				{"seq", wire[24:28], ks[6:10]},
				{"ack", wire[28:32], ks[10:14]},
			}
			for i := range 4 {
				checks[0].exp[i] ^= orig[12+i]
			}
			for _, c := range checks {
				if !bytes.Equal(c.got, c.exp) {
					t.Errorf("paper=%v %s: %x, want %x", paper, c.name, c.got, c.exp)
				}
			}
			mask := byte(lois.FlagMaskHardened)
			if paper {
				mask = lois.FlagMaskPaper
			}
			if wire[33] != ks[14]&mask {
				t.Errorf("flags %#x, want %#x", wire[33], ks[14]&mask)
			}
			if binary.BigEndian.Uint64(wire[44:]) != first.ID {
				t.Error("option does not carry the pair's id")
			}
			if !bytes.Equal(wire[34:36], orig[34:36]) || !bytes.Equal(wire[38:40], orig[38:40]) {
				t.Error("window or urgent pointer changed")
			}
		}
	}
}

func xor(a, b []byte) []byte {
	out := make([]byte, len(a))
	for i := range a {
		out[i] = a[i] ^ b[i]
	}
	return out
}

// TestReplayAndDuplicates is spec T12: with delete on use, a duplicate or replayed wire
// packet is dropped at CI, at SI and at DI; in paper (count-only) mode it decrypts again.
func TestReplayAndDuplicates(t *testing.T) {
	w := newWorld(t, false, []uint16{5}, 64, 1)
	buf, off := packet(dip, cip, 1000, 5, 1, 2, 0x18, nil, []byte("hello"))
	noff, err := w.dev.HideUpload(buf, off, now)
	must(t, err)
	dup := bytes.Clone(buf)
	if _, err := w.ci.Forward(buf[noff:]); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ci.Forward(bytes.Clone(dup[noff:])); !errors.Is(err, lois.ErrUnknownID) {
		t.Fatalf("CI accepted a replay: %v", err)
	}
	forwarded := bytes.Clone(buf)
	if _, _, err := w.si[0].RecoverUpload(buf, noff); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.si[0].RecoverUpload(forwarded, noff); !errors.Is(err, lois.ErrUnknownID) {
		t.Fatalf("SI accepted a duplicate: %v", err)
	}
	// Download duplicate at DI.
	dbuf, doff := packet([4]byte{10, 0, 0, 1}, dip, portOff+5, 4000, 1, 2, 0x10, nil, nil)
	dn, err := w.si[0].HideDownload(dbuf, doff, w.siPools[0], now)
	must(t, err)
	ddup := bytes.Clone(dbuf)
	if _, _, err := w.dev.RecoverDownload(dbuf, dn); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.dev.RecoverDownload(ddup, dn); !errors.Is(err, lois.ErrUnknownID) {
		t.Fatalf("DI accepted a duplicate: %v", err)
	}

	// Paper mode: count only, so a duplicate decrypts again (informational in spec T12).
	cfg := lois.DVTConfig{TableCapacity: 64, Fingerprint16: true, CountOnly: true}
	d, _ := lois.NewDVT(cfg)
	must(t, d.Insert(42, &[16]byte{1}, 5, expiry))
	must(t, d.Insert(43, &[16]byte{2}, 5, expiry))
	if _, _, ok := d.Take(42); !ok {
		t.Fatal("miss")
	}
	if _, _, ok := d.Take(42); !ok {
		t.Fatal("count-only mode must accept the duplicate")
	}
}

// TestUnknownIDsRejected is spec T13 in exact mode: random ids never match.
func TestUnknownIDsRejected(t *testing.T) {
	w := newWorld(t, false, []uint16{5, 6}, 1024, 1)
	r := chacha("t13")
	for range 20000 {
		buf, off := packet(dip, cip, 1000, 5, 1, 2, 0x10, nil, nil)
		off, err := w.dev.HideUpload(buf, off, now)
		if err != nil {
			// pools run dry after 1024: refill is not the point here
			buf, off = packet(dip, cip, 1000, 5, 1, 2, 0x10, nil, nil)
			w.dev.Up.Get(5).Add(w.up[5], 1, 0, expiry-margin)
			off, err = w.dev.HideUpload(buf, off, now)
			must(t, err)
		}
		binary.BigEndian.PutUint64(buf[off+44:], r.Uint64()) // forge the id
		if _, err := w.ci.Forward(buf[off:]); !errors.Is(err, lois.ErrUnknownID) {
			t.Fatalf("random id accepted: %v", err)
		}
	}
}

// TestMalformedRejected: bad input is an error, never a panic (D-14).
func TestMalformedRejected(t *testing.T) {
	w := newWorld(t, false, []uint16{5}, 64, 1)
	good, off := packet(dip, cip, 1000, 5, 1, 2, 0x10, optionSets["mss"], []byte("x"))
	cases := map[string]func(p []byte) []byte{
		"short":      func(p []byte) []byte { return p[:30] },
		"ipv6":       func(p []byte) []byte { p[0] = 0x60; return p },
		"ip options": func(p []byte) []byte { p[0] = 0x46; return p },
		"udp":        func(p []byte) []byte { p[9] = 17; return p },
		"fragment":   func(p []byte) []byte { p[6] |= 0x20; return p },
		"length":     func(p []byte) []byte { p[3]++; return p },
		"doff":       func(p []byte) []byte { p[32] = 0xF0; return p },
		"doff small": func(p []byte) []byte { p[32] = 0x40; return p },
		"bad option": func(p []byte) []byte { p[41] = 9; return p },
	}
	for name, mut := range cases {
		buf := bytes.Clone(good)
		p := mut(buf[off:])
		buf = buf[:off+len(p)]
		if _, err := w.dev.HideUpload(buf, off, now); !errors.Is(err, lois.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	// 32 bytes of options leave no room for the option (D-10).
	big := append(bytes.Repeat([]byte{1}, 28), 2, 4, 5, 0xb4)
	buf, off := packet(dip, cip, 1000, 5, 1, 2, 0x10, big, nil)
	if _, err := w.dev.HideUpload(buf, off, now); !errors.Is(err, lois.ErrNoRoom) {
		t.Errorf("40 B of options: %v, want ErrNoRoom", err)
	}
	buf, _ = packet(dip, cip, 1000, 5, 1, 2, 0x10, nil, nil)
	if _, err := w.dev.HideUpload(buf[lois.Headroom-1:], 1, now); !errors.Is(err, lois.ErrNoHeadroom) {
		t.Errorf("no headroom: %v", err)
	}
	buf, off = packet(dip, [4]byte{1, 1, 1, 1}, 1000, 5, 1, 2, 0x10, nil, nil)
	if _, err := w.dev.HideUpload(buf, off, now); !errors.Is(err, lois.ErrNotLOIS) {
		t.Errorf("non-CIP: %v", err)
	}
}

// TestHotPathAllocs is spec T21's zero-allocation gate for every role's transform.
func TestHotPathAllocs(t *testing.T) {
	w := newWorld(t, false, []uint16{5}, 4096, 1)
	up, off := packet(dip, cip, 1000, 5, 1, 2, 0x18, optionSets["syn-linux"], make([]byte, 200))
	src := bytes.Clone(up)
	var noff, roff int
	var err error
	a := testing.AllocsPerRun(500, func() {
		copy(up, src)
		noff, err = w.dev.HideUpload(up, off, now)
		if err != nil {
			panic(err)
		}
		if _, err = w.ci.Forward(up[noff:]); err != nil {
			panic(err)
		}
		if roff, _, err = w.si[0].RecoverUpload(up, noff); err != nil || roff != off {
			panic(err)
		}
	})
	if a != 0 {
		t.Errorf("upload path: %v allocs per packet", a)
	}
	down, doff := packet([4]byte{10, 0, 0, 1}, dip, portOff+5, 4000, 1, 2, 0x10, nil, make([]byte, 200))
	dsrc := bytes.Clone(down)
	a = testing.AllocsPerRun(500, func() {
		copy(down, dsrc)
		noff, err = w.si[0].HideDownload(down, doff, w.siPools[0], now)
		if err != nil {
			panic(err)
		}
		if _, _, err = w.dev.RecoverDownload(down, noff); err != nil {
			panic(err)
		}
	})
	if a != 0 {
		t.Errorf("download path: %v allocs per packet", a)
	}
}
