package lois_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/lois"
)

func fuzzSeeds(f *testing.F) *world {
	w := newWorld(f, false, []uint16{5}, 256, 1)
	for name := range optionSets {
		buf, off := packet(dip, cip, 1000, 5, 1, 2, 0x18, optionSets[name], []byte("payload"))
		f.Add(bytes.Clone(buf[off:]))
		noff, err := w.dev.HideUpload(buf, off, now)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(bytes.Clone(buf[noff:]))
	}
	f.Add([]byte{})
	f.Add(make([]byte, 40))
	return w
}

// FuzzPacketParsers feeds arbitrary bytes to every role's packet entry point: none may panic,
// every rejection is one of the package's errors, and whatever a hiding transform accepts
// leaves valid checksums.
func FuzzPacketParsers(f *testing.F) {
	w := fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) > 1600 {
			return
		}
		run := func(name string, fn func(buf []byte, off int) (int, error), hides bool) {
			buf := make([]byte, lois.Headroom+len(pkt))
			copy(buf[lois.Headroom:], pkt)
			noff, err := fn(buf, lois.Headroom)
			if err != nil {
				if !isLOISErr(err) {
					t.Fatalf("%s: unexpected error %v", name, err)
				}
				return
			}
			if hides && !lois.ChecksumsValid(buf[noff:]) && lois.ChecksumsValid(pkt) {
				t.Fatalf("%s: valid input gave invalid checksums", name)
			}
		}
		run("DI upload", func(b []byte, o int) (int, error) { return w.dev.HideUpload(b, o, now) }, true)
		run("CI", func(b []byte, o int) (int, error) { _, err := w.ci.Forward(b[o:]); return o, err }, false)
		run("CI batch", func(b []byte, o int) (int, error) { // the packet and a duplicate in one batch
			pkts := [][]byte{b[o:], bytes.Clone(b[o:])}
			var out [2]lois.Backend
			var errs [2]error
			w.ci.ForwardBatch(pkts, out[:], errs[:])
			if errs[0] == nil && errs[1] == nil {
				t.Fatalf("CI batch: one id forwarded twice")
			}
			if errs[0] != nil {
				return o, errs[0]
			}
			return o, errs[1]
		}, false)
		run("SI upload", func(b []byte, o int) (int, error) { n, _, err := w.si[0].RecoverUpload(b, o); return n, err }, false)
		run("SI download", func(b []byte, o int) (int, error) { return w.si[0].HideDownload(b, o, w.siPools[0], now) }, true)
		run("DI download", func(b []byte, o int) (int, error) { n, _, err := w.dev.RecoverDownload(b, o); return n, err }, false)
		_, _ = lois.ParseID(pkt, lois.DefaultExID)
		_ = lois.ChecksumsValid(pkt)
	})
}

func isLOISErr(err error) bool {
	for _, e := range []error{lois.ErrMalformed, lois.ErrNotLOIS, lois.ErrNoOption, lois.ErrUnknownID, lois.ErrExhausted,
		lois.ErrNoRoom, lois.ErrNoHeadroom, lois.ErrPad, lois.ErrUnknownSID} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// FuzzUnmarshalDVT feeds network/disk input to the table decoder: it must never panic, must
// reject with ErrBadSnapshot, and whatever it accepts re-marshals to the same bytes and
// answers lookups for the ids it holds.
func FuzzUnmarshalDVT(f *testing.F) {
	for _, fp16 := range []bool{false, true} {
		d, _ := lois.NewDVT(lois.DVTConfig{TableCapacity: 40, Fingerprint16: fp16, Dedup: !fp16, Key: [16]byte{1}})
		for i := range uint64(60) {
			d.Insert(i*0x9E3779B97F4A7C15+1, &[16]byte{byte(i)}, uint16(i), int64(i))
		}
		b, _ := d.MarshalBinary()
		f.Add(b)
		f.Add(b[:len(b)-3])
	}
	f.Add([]byte("LOISDVT1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := lois.UnmarshalDVT(b, 4096)
		if err != nil {
			if !errors.Is(err, lois.ErrBadSnapshot) {
				t.Fatalf("error %v is not ErrBadSnapshot", err)
			}
			return
		}
		again, _ := d.MarshalBinary()
		if !bytes.Equal(again, b) {
			t.Fatal("accepted snapshot does not re-marshal to itself")
		}
	})
}

// TestSnapshotRoundTrip: a DVT survives marshal/unmarshal with every entry, and the restored
// table keeps answering and consuming.
func TestSnapshotRoundTrip(t *testing.T) {
	for _, fp16 := range []bool{false, true} {
		d, _ := lois.NewDVT(lois.DVTConfig{TableCapacity: 100, Fingerprint16: fp16, Dedup: true})
		r := chacha("snap")
		ids := map[uint64][16]byte{}
		for len(ids) < 300 {
			var ks [16]byte
			r.Read(ks[:])
			id := r.Uint64()
			if d.InsertChecked(id, &ks, 7, expiry) == nil {
				ids[id] = ks
			}
		}
		b, err := d.MarshalBinary()
		must(t, err)
		d2, err := lois.UnmarshalDVT(b, 1000)
		must(t, err)
		if d2.Stats() != d.Stats() {
			t.Fatalf("stats %+v, want %+v", d2.Stats(), d.Stats())
		}
		for id, ks := range ids {
			got, sid, ok := d2.Take(id)
			if !ok || got != ks || sid != 7 {
				t.Fatal("restored table lost an entry")
			}
			if d2.ContainsKeystream(&ks) {
				t.Fatal("consumed keystream still in the rebuilt DVF")
			}
		}
		if _, err := lois.UnmarshalDVT(b, 10); !errors.Is(err, lois.ErrBadSnapshot) {
			t.Fatal("capacity limit not enforced")
		}
		binary.BigEndian.PutUint32(b[len(b)-20-8*btoi(!fp16)-4:], 1<<31)
		if _, err := lois.UnmarshalDVT(b, 1000); !errors.Is(err, lois.ErrBadSnapshot) {
			t.Fatal("corrupted slot index accepted")
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
