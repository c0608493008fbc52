package gc_test

import (
	"bytes"
	"crypto/aes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// The Bristol Fashion circuits (testdata/README.md) take and give values as big-endian
// integers, wire i = bit i (bigEndianBits):
//   - aes_128.txt: input 0 is the key, input 1 the plaintext block, output the ciphertext;
//   - sha256.txt: input 0 is the 64-byte message block, input 1 the chaining state H0‖…‖H7
//     (H0 in the most significant bits), output the next state — the compression function,
//     with no padding: the caller pads.

// TestKnownAnswerAES128 garbles, evaluates and decodes the AES-128 circuit on the FIPS-197
// Appendix C.1 vector and on random keys checked against crypto/aes.
func TestKnownAnswerAES128(t *testing.T) {
	p := mustCompile(t, readBristolFile(t, "aes_128.txt"))
	check := func(key, pt, want []byte) {
		t.Helper()
		out := garbleBits(t, p, append(bigEndianBits(key), bigEndianBits(pt)...))
		if got := bitsToBigEndian(out); !bytes.Equal(got, want) {
			t.Errorf("AES-128(%x, %x) = %x, want %x", key, pt, got, want)
		}
	}
	key, _ := hex.DecodeString("000102030405060708090a0b0c0d0e0f")
	pt, _ := hex.DecodeString("00112233445566778899aabbccddeeff")
	want, _ := hex.DecodeString("69c4e0d86a7b0430d8cdb78070b4c55a")
	check(key, pt, want)
	for range 4 {
		rand.Read(key)
		rand.Read(pt)
		blk, _ := aes.NewCipher(key)
		blk.Encrypt(want, pt)
		check(key, pt, want)
	}
}

// TestKnownAnswerSHA256 checks the compression function on the padded blocks of "" and
// "abc" (whose digests are the FIPS 180-4 examples) and on random two-block chains against
// crypto/sha256's internal state, read through its MarshalBinary encoding
// ("sha\x03" ‖ H0…H7 big-endian ‖ block ‖ length).
func TestKnownAnswerSHA256(t *testing.T) {
	p := mustCompile(t, readBristolFile(t, "sha256.txt"))
	iv, _ := hex.DecodeString("6a09e667bb67ae853c6ef372a54ff53a510e527f9b05688c1f83d9ab5be0cd19")
	compress := func(block, state []byte) []byte {
		return bitsToBigEndian(garbleBits(t, p, append(bigEndianBits(block), bigEndianBits(state)...)))
	}
	for _, tc := range []struct{ msg, digest string }{
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	} {
		block := make([]byte, 64)
		copy(block, tc.msg)
		block[len(tc.msg)] = 0x80
		block[63] = byte(8 * len(tc.msg))
		want, _ := hex.DecodeString(tc.digest)
		if got := compress(block, iv); !bytes.Equal(got, want) {
			t.Errorf("SHA-256(%q) = %x, want %x", tc.msg, got, want)
		}
	}
	state := func(msg []byte) []byte {
		h := sha256.New()
		h.Write(msg)
		b, err := h.(interface{ MarshalBinary() ([]byte, error) }).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b[4:36]
	}
	msg := make([]byte, 128)
	for range 2 {
		rand.Read(msg)
		s1, s2 := state(msg[:64]), state(msg)
		if got := compress(msg[:64], iv); !bytes.Equal(got, s1) {
			t.Errorf("first block: %x, want %x", got, s1)
		}
		if got := compress(msg[64:], s1); !bytes.Equal(got, s2) {
			t.Errorf("second block: %x, want %x", got, s2)
		}
	}
}
