package pps

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"testing"
)

func TestSessionKeysAgree(t *testing.T) {
	for range 20 {
		c, _ := ecdh.X25519().GenerateKey(rand.Reader)
		s, _ := ecdh.X25519().GenerateKey(rand.Reader)
		ck, err := ClientSessionKeys(c, s.PublicKey().Bytes())
		if err != nil {
			t.Fatal(err)
		}
		sk, err := ServerSessionKeys(s, c.PublicKey().Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if ck != sk {
			t.Fatalf("client and server derive different session keys")
		}
		if ck.ClientToServer == ck.ServerToClient {
			t.Fatalf("both directions share one key")
		}
		if PublisherRatchetKey(&ck) != PublisherRatchetKey(&sk) {
			t.Fatalf("K_0 differs between publisher and Garbler")
		}
	}
}

func TestSessionKeysRejectLowOrderPeer(t *testing.T) {
	c, _ := ecdh.X25519().GenerateKey(rand.Reader)
	for _, pk := range [][]byte{make([]byte, 32), append([]byte{1}, make([]byte, 31)...)} {
		if _, err := ClientSessionKeys(c, pk); err == nil {
			t.Errorf("peer key %x (low order) accepted", pk)
		}
	}
	if _, err := ClientSessionKeys(c, make([]byte, 31)); err == nil {
		t.Errorf("a 31-byte peer key accepted")
	}
}

func TestGrantRoundTripAndTamper(t *testing.T) {
	var k SessionKeys
	copy(k.ServerToClient[:], bytes.Repeat([]byte{7}, 32))
	g := Grant{Key: *testSeed(12), Round: 42, Epoch: 3}
	ad := []byte("fn|edpk|transcript")
	sealed, err := SealGrant(&k, &g, ad, rand.Reader)
	if err != nil || len(sealed) != SealedGrantSize {
		t.Fatalf("SealGrant: %d bytes, %v", len(sealed), err)
	}
	got, err := OpenGrant(&k, sealed, ad)
	if err != nil || got != g {
		t.Fatalf("OpenGrant = %+v, %v", got, err)
	}
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 1
		if _, err := OpenGrant(&k, bad, ad); err == nil {
			t.Fatalf("a grant with byte %d flipped opened", i)
		}
	}
	if _, err := OpenGrant(&k, sealed, []byte("other fn")); err == nil {
		t.Fatalf("a grant opened under another function's AD")
	}
	if _, err := OpenGrant(&k, sealed[:len(sealed)-1], ad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short grant: %v, want ErrMalformed", err)
	}
}

func FuzzOpenGrant(f *testing.F) {
	var k SessionKeys
	sealed, _ := SealGrant(&k, &Grant{Round: 1}, nil, rand.Reader)
	f.Add(sealed, []byte(nil))
	f.Add([]byte{}, []byte("x"))
	f.Fuzz(func(t *testing.T, b, ad []byte) {
		if g, err := OpenGrant(&k, b, ad); err == nil {
			// Only an authentic grant opens; re-sealing it must open to the same grant.
			again, _ := SealGrant(&k, &g, ad, rand.Reader)
			if g2, err := OpenGrant(&k, again, ad); err != nil || g2 != g {
				t.Fatalf("re-sealed grant does not round-trip")
			}
		}
	})
}
