package mohito

import (
	"bytes"
	"crypto/hpke"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRFC9180Vector runs RFC 9180 A.2.1 (the base-mode vector of our default
// suite) through the package's key derivation, parsing and open path.
func TestRFC9180Vector(t *testing.T) {
	raw, err := os.ReadFile("testdata/rfc9180-a2-base.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Info        string `json:"info"`
		IkmE        string `json:"ikmE"`
		PkEm        string `json:"pkEm"`
		SkEm        string `json:"skEm"`
		IkmR        string `json:"ikmR"`
		PkRm        string `json:"pkRm"`
		SkRm        string `json:"skRm"`
		Enc         string `json:"enc"`
		Encryptions []struct {
			Seq int    `json:"sequence_number"`
			PT  string `json:"pt"`
			AAD string `json:"aad"`
			CT  string `json:"ct"`
		} `json:"encryptions"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	for _, kp := range []struct{ ikm, sk, pk string }{{v.IkmE, v.SkEm, v.PkEm}, {v.IkmR, v.SkRm, v.PkRm}} {
		k, err := DeriveKey(SuiteX25519, unhex(t, kp.ikm))
		if err != nil {
			t.Fatal(err)
		}
		// Go serializes X25519 private keys clamped (RFC 9180 §7.1.2), the
		// RFC lists them unclamped.
		want := unhex(t, kp.sk)
		want[0] &= 248
		want[31] = want[31]&127 | 64
		skb, _ := k.Bytes()
		if !bytes.Equal(skb, want) || !bytes.Equal(k.PublicKey().Bytes(), unhex(t, kp.pk)) {
			t.Fatalf("DeriveKeyPair mismatch for ikm %s", kp.ikm)
		}
	}
	if v.PkEm != v.Enc {
		t.Fatal("enc ≠ pkEm")
	}
	sk, err := ParsePrivateKey(SuiteX25519, unhex(t, v.SkRm))
	if err != nil {
		t.Fatal(err)
	}
	// Sequence 0 through the package's single-shot open.
	e0 := v.Encryptions[0]
	pt, err := sk.open(unhex(t, v.Info), unhex(t, e0.AAD), append(unhex(t, v.Enc), unhex(t, e0.CT)...))
	if err != nil || !bytes.Equal(pt, unhex(t, e0.PT)) {
		t.Fatalf("seq 0: %v", err)
	}
	// Every sequence number through one recipient context.
	r, err := hpke.NewRecipient(unhex(t, v.Enc), sk.sk, hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), unhex(t, v.Info))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range v.Encryptions {
		pt, err := r.Open(unhex(t, e.AAD), unhex(t, e.CT))
		if err != nil || !bytes.Equal(pt, unhex(t, e.PT)) {
			t.Fatalf("seq %d: %v", e.Seq, err)
		}
	}
}

func TestSuitesRoundTrip(t *testing.T) {
	for _, s := range []Suite{SuiteX25519, SuiteMLKEM768X25519} {
		k, err := GenerateKey(s)
		if err != nil {
			t.Fatal(err)
		}
		pk, err := ParsePublicKey(s, k.PublicKey().Bytes())
		if err != nil {
			t.Fatal(err)
		}
		ct, err := pk.seal([]byte("info"), []byte("aad"), []byte("hello"))
		if err != nil {
			t.Fatal(err)
		}
		if len(ct) != 5+s.Overhead() {
			t.Fatalf("%v: overhead %d, want %d", s, len(ct)-5, s.Overhead())
		}
		if pt, err := k.open([]byte("info"), []byte("aad"), ct); err != nil || string(pt) != "hello" {
			t.Fatalf("%v: %v", s, err)
		}
		ct[len(ct)-1] ^= 1
		if _, err := k.open([]byte("info"), []byte("aad"), ct); err != ErrDecrypt {
			t.Fatalf("%v: tampered ciphertext: %v", s, err)
		}
		if _, err := k.open([]byte("info"), nil, ct[:3]); err != ErrDecrypt {
			t.Fatal("short ciphertext")
		}
	}
}
