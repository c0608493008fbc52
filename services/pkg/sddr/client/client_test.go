package client

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/sddr"
)

func boxes(t testing.TB) (*Box, *Box) {
	var id sddr.EncounterID
	var sk [sddr.KeySize]byte
	rand.Read(id[:])
	rand.Read(sk[:])
	a, err := New(id, sk, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(id, sk, 1)
	return a, b
}

func TestSealOpen(t *testing.T) {
	a, b := boxes(t)
	if a.Address != b.Address {
		t.Fatal("the two sides derive different addresses")
	}
	for _, n := range []int{0, 1, 62, 63, 64, 1000, MaxPlaintext} {
		msg := bytes.Repeat([]byte{7}, n)
		s, err := a.Seal(msg)
		if err != nil {
			t.Fatal(err)
		}
		if len(s) > MaxSealed || (len(s)-Overhead)%PadBlock != 0 {
			t.Fatalf("%d: sealed length %d", n, len(s))
		}
		got, err := b.Open(s)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("%d: open: %v", n, err)
		}
		if _, err := a.Open(s); !errors.Is(err, ErrOpen) {
			t.Fatalf("own message opened: %v", err)
		}
		s[len(s)-1] ^= 1
		if _, err := b.Open(s); !errors.Is(err, ErrOpen) {
			t.Fatalf("tampered message opened: %v", err)
		}
	}
	if _, err := a.Seal(make([]byte, MaxPlaintext+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatal("oversized plaintext sealed")
	}
	// Another encounter (another id, same key) cannot open it.
	s, _ := a.Seal([]byte("x"))
	other, _ := New(sddr.EncounterID{1}, a.key, 1)
	if _, err := other.Open(s); err == nil {
		t.Fatal("opened under another encounter id")
	}
	if AddressOf(a.ID) == AddressOf(sddr.EncounterID{}) {
		t.Fatal("address does not depend on the id")
	}
}

func TestParseAddress(t *testing.T) {
	a, _ := boxes(t)
	got, err := ParseAddress(a.Address.String())
	if err != nil || got != a.Address {
		t.Fatal(err)
	}
	for _, s := range []string{"", "00", a.Address.String()[1:] + "g"} {
		if _, err := ParseAddress(s); err == nil {
			t.Fatalf("accepted %q", s)
		}
	}
}

func FuzzOpen(f *testing.F) {
	a, b := boxes(f)
	s, _ := a.Seal([]byte("seed"))
	f.Add(s)
	f.Fuzz(func(t *testing.T, in []byte) {
		if p, err := b.Open(in); err == nil && len(p) > MaxPlaintext {
			t.Fatal("oversized plaintext")
		}
	})
}

func FuzzDecodeMessages(f *testing.F) {
	f.Add([]byte(`{"messages":["AQ=="]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := DecodeMessages(in)
		if err == nil {
			for _, s := range m.Messages {
				if len(s) > MaxSealed {
					t.Fatal("oversized message accepted")
				}
			}
		}
	})
}

func FuzzParseAddress(f *testing.F) {
	f.Add(Address{}.String())
	f.Fuzz(func(t *testing.T, s string) {
		if a, err := ParseAddress(s); err == nil && a.String() != s {
			t.Fatalf("%q parsed as %s", s, a)
		}
	})
}
