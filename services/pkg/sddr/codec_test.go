package sddr

import (
	"bytes"
	"errors"
	"testing"
)

// T11: the decoder rejects every malformed field with its own reason.
func TestParseBeaconRejects(t *testing.T) {
	good := newDevice(t, 1).Advert().Frame
	mut := func(f func(*Frame)) []byte { g := good; f(&g); return g[:] }
	for _, tc := range []struct {
		name  string
		frame []byte
		want  error
	}{
		{"short", good[:239], ErrFrameLength},
		{"long", append(good[:], 0), ErrFrameLength},
		{"eir length", mut(func(f *Frame) { f[0] = 0xEE }), ErrHeader},
		{"eir type", mut(func(f *Frame) { f[1] = 0x09 }), ErrHeader},
		{"version 2", mut(func(f *Frame) { f[2] = 0x20 }), ErrVersion},
		{"reserved flag", mut(func(f *Frame) { f[2] = 0x12 }), ErrVersion},
		{"count 255", mut(func(f *Frame) { f[3] = 0xFF }), ErrCount},
		{"zero key", mut(func(f *Frame) { clear(f[4:36]) }), ErrPublicKey},
		{"key p", mut(func(f *Frame) {
			f[4] = 0xED
			for i := 5; i < 35; i++ {
				f[i] = 0xFF
			}
			f[35] = 0x7F
		}), ErrPublicKey},
		{"key p high bit", mut(func(f *Frame) {
			f[4] = 0xED
			for i := 5; i < 36; i++ {
				f[i] = 0xFF
			}
		}), ErrPublicKey},
	} {
		if _, err := ParseBeacon(tc.frame); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := ParseBeacon(good[:]); err != nil {
		t.Fatal(err)
	}
}

// Every small-order X25519 point in the reject list really gives the all-zero secret, which
// crypto/ecdh refuses: the list rejects exactly the keys ECDH would fail on.
func TestLowOrderList(t *testing.T) {
	d := newDevice(t, 1)
	for i, pk := range lowOrder {
		if _, err := d.ep.priv.ECDH(mustPublic(&pk)); err == nil {
			t.Errorf("entry %d is not a small-order point", i)
		}
	}
}

// BLE 5 extended-advertising profile: the frame is the AdvData, fits one AUX_ADV_IND, and is
// found next to other AD structures.
func TestAdvertisingData(t *testing.T) {
	f := newDevice(t, 1).Advert().Frame
	ad := AdvertisingData(&f)
	if len(ad) > MaxExtAdvDataPerPDU {
		t.Fatalf("%d bytes do not fit one PDU", len(ad))
	}
	withFlags := append([]byte{0x02, 0x01, 0x06}, ad...)
	for _, in := range [][]byte{ad, withFlags} {
		b, err := ParseAdvertisingData(in)
		if err != nil || b.Marshal() != f {
			t.Fatalf("round trip: %v", err)
		}
	}
	if _, err := ParseAdvertisingData([]byte{0x02, 0x01, 0x06}); !errors.Is(err, ErrNoBeacon) {
		t.Fatalf("no beacon: %v", err)
	}
	if _, err := ParseAdvertisingData([]byte{0x05, 0x01}); !errors.Is(err, ErrFrameLength) {
		t.Fatalf("overrun: %v", err)
	}
}

func TestMessageRoundTrips(t *testing.T) {
	c := Confirm{Role: 1}
	c.ID[0], c.Tag[31] = 1, 2
	if got, err := ParseConfirm(c.Marshal()); err != nil || got != c {
		t.Fatalf("confirm: %v", err)
	}
	v := Verify{}
	v.Nonce[3] = 9
	if got, err := ParseVerify(v.Marshal()); err != nil || got != v {
		t.Fatalf("verify: %v", err)
	}
	q := Inquiry{ID: 0x0102030405060708}
	if got, err := ParseInquiry(q.Marshal()); err != nil || got != q {
		t.Fatalf("inquiry: %v", err)
	}
	r := Response{InquiryID: 7, Addr: Address{1, 2, 3, 4, 5, 6}, RSSI: -70, Frame: newDevice(t, 2).Advert().Frame}
	enc := r.Marshal()
	if len(enc) != 263 {
		t.Fatalf("response is %d bytes, spec says 263", len(enc))
	}
	if got, err := ParseResponse(enc); err != nil || got != r {
		t.Fatalf("response: %v", err)
	}
	for _, bad := range [][]byte{nil, c.Marshal()[:10], bytes.Repeat([]byte{3}, ConfirmSize)} {
		if _, err := ParseConfirm(bad); !errors.Is(err, ErrMessage) {
			t.Fatalf("bad confirm accepted")
		}
	}
}
