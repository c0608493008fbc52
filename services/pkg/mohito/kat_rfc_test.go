package mohito

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/nacl/secretbox"
)

// Spec §9 invariant #6: known-answer tests for the primitives the protocol uses, through
// the package's own wrappers. The wrappers take fixed shapes (a 32-byte k_prf and the
// 12-byte j ‖ t for z, a 32-byte device secret and fixed labels for HKDF, label ‖ z as the
// AEAD's associated data), which no published vector has. So each test closes a chain:
// the RFC vectors pin an independent reference (HMAC and HKDF written out from RFC 2104 /
// RFC 5869 over SHA-256, and the x/crypto AEAD the wrapper calls), and the wrapper must
// equal that reference on its own inputs. Where a vector's inputs fit the wrapper's
// keyed state (RFC 4231 keys of ≤ 32 bytes are zero-padded to the block size by HMAC, so
// k ‖ 0…0 is the same key), the vector runs through the wrapper's own HMAC object.

func katHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rep(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

func seq(from, to int) []byte { // bytes from..to inclusive
	b := make([]byte, 0, to-from+1)
	for i := from; i <= to; i++ {
		b = append(b, byte(i))
	}
	return b
}

// refHMAC is HMAC-SHA256 written out from RFC 2104 (no crypto/hmac).
func refHMAC(key, msg []byte) []byte {
	const block = 64
	if len(key) > block {
		s := sha256.Sum256(key)
		key = s[:]
	}
	k := make([]byte, block)
	copy(k, key)
	ipad, opad := make([]byte, block), make([]byte, block)
	for i := range k {
		ipad[i], opad[i] = k[i]^0x36, k[i]^0x5c
	}
	inner := sha256.Sum256(append(ipad, msg...))
	outer := sha256.Sum256(append(opad, inner[:]...))
	return outer[:]
}

// refHKDF is HKDF-SHA256 (RFC 5869 §2.2–2.3) over refHMAC; it returns PRK and OKM.
func refHKDF(ikm, salt, info []byte, l int) (prk, okm []byte) {
	if len(salt) == 0 {
		salt = make([]byte, sha256.Size)
	}
	prk = refHMAC(salt, ikm)
	var prev []byte
	for i := byte(1); len(okm) < l; i++ {
		prev = refHMAC(prk, append(append(append([]byte{}, prev...), info...), i))
		okm = append(okm, prev...)
	}
	return prk, okm[:l]
}

type hmacVector struct {
	name      string
	key, data []byte
	mac       string // full or, for TC5, the 128-bit truncation
}

func rfc4231(t testing.TB) []hmacVector {
	return []hmacVector{
		{"TC1", rep(0x0b, 20), []byte("Hi There"), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
		{"TC2", []byte("Jefe"), []byte("what do ya want for nothing?"), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
		{"TC3", rep(0xaa, 20), rep(0xdd, 50), "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
		{"TC4", seq(0x01, 0x19), rep(0xcd, 50), "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
		{"TC5", rep(0x0c, 20), []byte("Test With Truncation"), "a3b6167473100ee06e0c796c2955552b"},
		{"TC6", rep(0xaa, 131), []byte("Test Using Larger Than Block-Size Key - Hash Key First"), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
		{"TC7", rep(0xaa, 131), []byte("This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm."), "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
	}
}

// TestHMACSHA256RFC4231 (#6): RFC 4231 §4.2–4.8 pin refHMAC; TC1–TC5 (keys ≤ 32 bytes)
// run through the HMAC state of an IDDeriver keyed with k ‖ 0…0, after Derive has used
// it (the key schedule survives the per-id Reset); and Derive(j, t) equals HMAC-SHA256(k_prf, BE32(j) ‖ BE64(t)),
// untruncated (EphemeralIDSize = 32), for random keys and edge values of j and t.
func TestHMACSHA256RFC4231(t *testing.T) {
	for _, v := range rfc4231(t) {
		want := katHex(t, v.mac)
		if got := refHMAC(v.key, v.data); !bytes.Equal(got[:len(want)], want) {
			t.Fatalf("reference HMAC %s: %x, want %x", v.name, got, want)
		}
		if len(v.key) > KeySize {
			continue
		}
		var k [KeySize]byte
		copy(k[:], v.key)
		d := NewIDDeriver(&k)
		for range 2 { // the keyed state, already used by Derive, is reset and reused
			d.Derive(7, 1<<40)
			d.mac.Reset()
			d.mac.Write(v.data)
			if got := d.mac.Sum(d.sum[:0]); !bytes.Equal(got[:len(want)], want) {
				t.Fatalf("IDDeriver HMAC %s: %x, want %x", v.name, got, want)
			}
		}
	}
	rnd := rand.New(rand.NewPCG(6, 4231))
	for i := range 200 {
		var k [KeySize]byte
		for j := range k {
			k[j] = byte(rnd.Uint32())
		}
		d := NewIDDeriver(&k)
		js := []uint32{1, 2, 0xffffffff, rnd.Uint32()}
		ts := []uint64{0, 1, 1 << 63, rnd.Uint64()}
		for _, j := range js {
			for _, tt := range ts {
				var msg [12]byte
				binary.BigEndian.PutUint32(msg[:4], j)
				binary.BigEndian.PutUint64(msg[4:], tt)
				want := refHMAC(k[:], msg[:])[:EphemeralIDSize]
				if z := d.Derive(j, tt); !bytes.Equal(z[:], want) {
					t.Fatalf("key %d: Derive(%d, %d) = %x, want HMAC-SHA256(k_prf, j‖t) = %x", i, j, tt, z, want)
				}
				if z := DeriveEphemeralID(&k, j, tt); !bytes.Equal(z[:], want) {
					t.Fatalf("key %d: DeriveEphemeralID(%d, %d) differs from HMAC-SHA256", i, j, tt)
				}
			}
		}
	}
}

// TestHKDFSHA256RFC5869 (#6): RFC 5869 A.1–A.3 pin refHKDF (PRK and OKM) and the
// hkdf.Key call shape the wrapper uses; then DeviceSecret.Keys() must be
// HKDF-SHA256(IKM = s_D, salt = none, info = "mohito/v1/prf" | "mohito/v1/ae", L = 32)
// (spec §3.1, §3.4) for random secrets, with k_prf ≠ k_ae.
func TestHKDFSHA256RFC5869(t *testing.T) {
	vectors := []struct {
		name            string
		ikm, salt, info []byte
		l               int
		prk, okm        string
	}{
		{"A.1", rep(0x0b, 22), seq(0x00, 0x0c), seq(0xf0, 0xf9), 42,
			"077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5",
			"3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"},
		{"A.2", seq(0x00, 0x4f), seq(0x60, 0xaf), seq(0xb0, 0xff), 82,
			"06a6b88c5853361a06104c9ceb35b45cef760014904671014a193f40c15fc244",
			"b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71cc30c58179ec3e87c14c01d5c1f3434f1d87"},
		{"A.3", rep(0x0b, 22), nil, nil, 42,
			"19ef24a32c717b167f33a91d6f648bdf96596776afdb6377ac434c1c293ccb04",
			"8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"},
	}
	for _, v := range vectors {
		prk, okm := refHKDF(v.ikm, v.salt, v.info, v.l)
		if !bytes.Equal(prk, katHex(t, v.prk)) || !bytes.Equal(okm, katHex(t, v.okm)) {
			t.Fatalf("reference HKDF %s: prk %x okm %x", v.name, prk, okm)
		}
		got, err := hkdf.Key(sha256.New, v.ikm, v.salt, string(v.info), v.l)
		if err != nil || !bytes.Equal(got, okm) {
			t.Fatalf("hkdf.Key %s: %x, %v", v.name, got, err)
		}
	}
	rnd := rand.New(rand.NewPCG(6, 5869))
	for range 100 {
		var s DeviceSecret
		for j := range s {
			s[j] = byte(rnd.Uint32())
		}
		k := s.Keys()
		_, prf := refHKDF(s[:], nil, []byte("mohito/v1/prf"), KeySize)
		_, ae := refHKDF(s[:], nil, []byte("mohito/v1/ae"), KeySize)
		if !bytes.Equal(k.PRF[:], prf) || !bytes.Equal(k.AE[:], ae) {
			t.Fatalf("Keys(%x) = (%x, %x), want HKDF (%x, %x)", s, k.PRF, k.AE, prf, ae)
		}
		if k.PRF == k.AE {
			t.Fatal("k_prf = k_ae")
		}
	}
}

// fixedReader returns its bytes, then fails the test if read further.
type fixedReader struct {
	t testing.TB
	b []byte
}

func (r *fixedReader) Read(p []byte) (int, error) {
	if len(p) > len(r.b) {
		r.t.Fatalf("nonce source read %d bytes, %d available", len(p), len(r.b))
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// TestDeviceAEADKnownAnswer (#6, the user–device AE; it replaces the paper's secretbox):
// the XChaCha20-Poly1305 vector of draft-irtf-cfrg-xchacha-03 §A.3.1 (the libsodium
// crypto_aead_xchacha20poly1305_ietf construction) pins the AEAD sealDevice calls; then
// sealDevice(key, label, z, pt) with that key and nonce must be exactly
// nonce ‖ AEAD(key, nonce, pt, aad = label ‖ z) — pinned bytes for both directions
// (known answers for our format) — and openDevice must return pt, and fail on a flipped
// byte anywhere, on the other direction's label, on another z, and on a short input.
func TestDeviceAEADKnownAnswer(t *testing.T) {
	key := katHex(t, "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f")
	nonce := katHex(t, "404142434445464748494a4b4c4d4e4f5051525354555657")
	aad := katHex(t, "50515253c0c1c2c3c4c5c6c7")
	pt := []byte("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.")
	want := katHex(t, "bd6d179d3e83d43b9576579493c0e939572a1700252bfaccbed2902c21396cbb"+
		"731c7f1b0b4aa6440bf3a82f4eda7e39ae64c6708c54c216cb96b72e1213b452"+
		"2f8c9ba40db5d945b11b69b982c1bb9e3f3fac2bc369488f76b2383565d3fff9"+
		"21f9664c97637da9768812f615c68b13b52e"+"c0875924c1c7987947deafd8780acf49")
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		t.Fatal(err)
	}
	if got := aead.Seal(nil, nonce, pt, aad); !bytes.Equal(got, want) {
		t.Fatalf("XChaCha20-Poly1305 A.3.1: %x", got)
	}

	var k [KeySize]byte
	copy(k[:], key)
	var z EphemeralID
	copy(z[:], seq(0xa0, 0xbf))
	pinned := map[string]string{
		aadCommand:  katDeviceCommand,
		aadResponse: katDeviceResponse,
	}
	for _, label := range []string{aadCommand, aadResponse} {
		ct, err := sealDevice(&k, label, &z, pt, &fixedReader{t: t, b: nonce})
		if err != nil {
			t.Fatal(err)
		}
		ref := append(append([]byte{}, nonce...), aead.Seal(nil, nonce, pt, append([]byte(label), z[:]...))...)
		if !bytes.Equal(ct, ref) {
			t.Fatalf("%s: sealDevice ≠ nonce ‖ XChaCha20-Poly1305(aad = label ‖ z)", label)
		}
		if len(ct) != len(pt)+DeviceAEOverhead {
			t.Fatalf("%s: overhead %d, want %d", label, len(ct)-len(pt), DeviceAEOverhead)
		}
		if got := hex.EncodeToString(ct); got != pinned[label] {
			t.Fatalf("%s: known answer changed:\n got %s\nwant %s", label, got, pinned[label])
		}
		if got, err := openDevice(&k, label, &z, ct); err != nil || !bytes.Equal(got, pt) {
			t.Fatalf("%s: open: %q, %v", label, got, err)
		}
		for i := range ct {
			bad := bytes.Clone(ct)
			bad[i] ^= 0x01
			if _, err := openDevice(&k, label, &z, bad); err != ErrDecrypt {
				t.Fatalf("%s: byte %d flipped: %v", label, i, err)
			}
		}
		other := aadResponse
		if label == aadResponse {
			other = aadCommand
		}
		z2 := z
		z2[31] ^= 1
		if _, err := openDevice(&k, other, &z, ct); err != ErrDecrypt {
			t.Fatalf("%s opened under %s", label, other)
		}
		if _, err := openDevice(&k, label, &z2, ct); err != ErrDecrypt {
			t.Fatalf("%s opened under another z", label)
		}
		if _, err := openDevice(&k, label, &z, ct[:DeviceAEOverhead-1]); err != ErrDecrypt {
			t.Fatalf("%s: short input: %v", label, err)
		}
	}
}

// Known answers of sealDevice with the A.3.1 key, nonce and plaintext, z = a0…bf.
const (
	katDeviceCommand  = "404142434445464748494a4b4c4d4e4f5051525354555657bd6d179d3e83d43b9576579493c0e939572a1700252bfaccbed2902c21396cbb731c7f1b0b4aa6440bf3a82f4eda7e39ae64c6708c54c216cb96b72e1213b4522f8c9ba40db5d945b11b69b982c1bb9e3f3fac2bc369488f76b2383565d3fff921f9664c97637da9768812f615c68b13b52eed502ad8dff88788433a790e610524ff"
	katDeviceResponse = "404142434445464748494a4b4c4d4e4f5051525354555657bd6d179d3e83d43b9576579493c0e939572a1700252bfaccbed2902c21396cbb731c7f1b0b4aa6440bf3a82f4eda7e39ae64c6708c54c216cb96b72e1213b4522f8c9ba40db5d945b11b69b982c1bb9e3f3fac2bc369488f76b2383565d3fff921f9664c97637da9768812f615c68b13b52e324eee6ededbd8eb838b0633a5e5498d"
)

// TestResponseLayerSecretboxInterop (#6, secretbox): the response-path layer
// xorRespLayer is the XSalsa20 stream of NaCl/libsodium secretbox. secretbox.Seal
// (x/crypto, libsodium-compatible) uses the first 32 keystream bytes as the Poly1305
// key and XORs the message with the rest, so for any key and nonce, secretbox's
// ciphertext body must equal msg ⊕ xorRespLayer-keystream[32:]; both role nonces are
// checked, on lengths that cross the 64-byte Salsa20 block boundary.
func TestResponseLayerSecretboxInterop(t *testing.T) {
	rnd := rand.New(rand.NewPCG(6, 0x5ec7))
	for _, n := range []int{1, 31, 32, 63, 64, 65, 200} {
		for _, nonce := range []*[24]byte{&nonceRespIntegrator, &nonceRespShuffler} {
			var key [KeySize]byte
			for i := range key {
				key[i] = byte(rnd.Uint32())
			}
			msg := make([]byte, n)
			for i := range msg {
				msg[i] = byte(rnd.Uint32())
			}
			ks := make([]byte, 32+n)
			xorRespLayer(ks, &key, nonce)
			box := secretbox.Seal(nil, msg, nonce, &key)
			for i := range msg {
				if box[secretbox.Overhead+i] != msg[i]^ks[32+i] {
					t.Fatalf("len %d: byte %d of the layer differs from secretbox's XSalsa20 stream", n, i)
				}
			}
			// The layer is its own inverse (an XOR), as the G1 fix requires.
			b := bytes.Clone(msg)
			xorRespLayer(b, &key, nonce)
			xorRespLayer(b, &key, nonce)
			if !bytes.Equal(b, msg) {
				t.Fatal("layer is not an involution")
			}
		}
	}
}
