package sddr

import (
	"errors"
	"testing"
)

func beaconSeeds(f *testing.F) *Device {
	d := newDevice(f, 1)
	p := newDevice(f, 2)
	fr := p.Advert().Frame
	f.Add(fr[:])
	f.Add(AdvertisingData(&fr))
	f.Add(append([]byte{2, 1, 6}, fr[:]...))
	f.Add([]byte{})
	f.Add(make([]byte, FrameSize))
	return d
}

// FuzzBeacon feeds arbitrary frames to the beacon and advertising-data decoders and to the
// engine: no panic, every rejection a package error, every accepted frame re-encodes to itself.
func FuzzBeacon(f *testing.F) {
	d := beaconSeeds(f)
	known := []error{ErrFrameLength, ErrHeader, ErrVersion, ErrCount, ErrPublicKey, ErrNoBeacon,
		ErrOwnBeacon, ErrDuplicate, ErrInquiryFull}
	isKnown := func(err error) bool {
		for _, k := range known {
			if errors.Is(err, k) {
				return true
			}
		}
		return false
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		b, err := ParseBeacon(in)
		if err == nil {
			if fr := b.Marshal(); string(fr[:]) != string(in) {
				t.Fatal("accepted frame does not re-encode to itself")
			}
		} else if !isKnown(err) {
			t.Fatalf("unexpected error %v", err)
		}
		if _, err := ParseAdvertisingData(in); err != nil && !isKnown(err) {
			t.Fatalf("unexpected AD error %v", err)
		}
		d.BeginInquiry()
		if _, err := d.OnBeacon(in, Address{}, t0); err != nil && !isKnown(err) {
			t.Fatalf("unexpected engine error %v", err)
		}
	})
}

// FuzzMessages feeds arbitrary bytes to every network message decoder and to the engine's
// Confirm and Verify handlers.
func FuzzMessages(f *testing.F) {
	d := newDevice(f, 1)
	p := newDevice(f, 2)
	s := hear(f, p, d, t0)
	c, _ := d.ConfirmMessage(s.ID)
	f.Add(c.Marshal())
	f.Add((&Verify{ID: s.ID}).Marshal())
	f.Add(Inquiry{ID: 1}.Marshal())
	f.Add((&Response{}).Marshal())
	f.Fuzz(func(t *testing.T, in []byte) {
		if c, err := ParseConfirm(in); err == nil {
			if string(c.Marshal()) != string(in) {
				t.Fatal("confirm does not re-encode")
			}
		} else if !errors.Is(err, ErrMessage) {
			t.Fatal(err)
		}
		if v, err := ParseVerify(in); err == nil {
			if string(v.Marshal()) != string(in) {
				t.Fatal("verify does not re-encode")
			}
		} else if !errors.Is(err, ErrMessage) {
			t.Fatal(err)
		}
		if q, err := ParseInquiry(in); err == nil && string(q.Marshal()) != string(in) {
			t.Fatal("inquiry does not re-encode")
		}
		if r, err := ParseResponse(in); err == nil && string(r.Marshal()) != string(in) {
			t.Fatal("response does not re-encode")
		}
		if _, err := d.OnConfirm(in); err == nil {
			t.Fatal("a fuzzed confirm verified")
		}
		if _, err := d.OnVerify(in); err == nil {
			t.Fatal("a fuzzed verify verified")
		}
	})
}
