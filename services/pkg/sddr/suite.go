package sddr

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// Domain tags of the independent random oracles (§7 item 2). Every input has a fixed length,
// so plain concatenation is unambiguous.
const (
	tagH0      = "SDDR-v1/H0"
	tagH1      = "SDDR-v1/H1"
	tagH2      = "SDDR-v1/H2"
	tagH3      = "SDDR-v1/H3"
	tagEID     = "SDDR-v1/EID"
	tagSAS     = "SDDR-v1/SAS"
	tagConfirm = "SDDR-v1/CONFIRM"
)

// EncounterID is H_eid(L)[:16], the only per-encounter value that may leave the device (a
// mailbox handle, §3.10). L itself is never published: it is also the candidate link value.
type EncounterID [EncounterIDSize]byte

// encounterKeys is what both sides of one (pk_a, pk_b) pair derive (Alg. 5 step 5).
type encounterKeys struct {
	link [32]byte      // L = H0(pk_lo ‖ pk_hi ‖ dhk)
	sk   [KeySize]byte // H2(L)
	id   EncounterID   // H_eid(L)[:16]
}

// deriveKeys orders the two public keys lexicographically (§7 item 7) so that L_ab = L_ba
// (INV-1), then separates L, sk and the id by domain (INV-2).
func deriveKeys(own, peer *[PublicKeySize]byte, dhk []byte) encounterKeys {
	lo, hi := own, peer
	if bytes.Compare(own[:], peer[:]) > 0 {
		lo, hi = peer, own
	}
	h := sha256.New()
	h.Write([]byte(tagH0))
	h.Write(lo[:])
	h.Write(hi[:])
	h.Write(dhk)
	var k encounterKeys
	h.Sum(k.link[:0])
	k.sk = sha256.Sum256(append([]byte(tagH2), k.link[:]...))
	eid := sha256.Sum256(append([]byte(tagEID), k.link[:]...))
	copy(k.id[:], eid[:EncounterIDSize])
	return k
}

// h1 is the salted Bloom hash H1(tag ‖ pk ‖ count ‖ x) (§7 item 4); fixed-size input, no
// allocation.
func h1(pk *[PublicKeySize]byte, count uint8, x *LinkValue) [32]byte {
	s := newH1Salt(pk, count)
	return s.sum(x)
}

// h1Salt is H1's 75-byte input for one beacon, tag ‖ pk ‖ count written once and the listen
// id's slot refilled per call: the receiver's loop over its listen ids copies 32 bytes and
// hashes two SHA-256 blocks per id, nothing else. (The salt is the sender's key and counter,
// known only when its beacon arrives: there is nothing to precompute per epoch, and the
// 43-byte prefix does not fill a block, so no hash state can be shared across ids.)
type h1Salt [len(tagH1) + PublicKeySize + 1 + LinkValueSize]byte

func newH1Salt(pk *[PublicKeySize]byte, count uint8) (s h1Salt) {
	n := copy(s[:], tagH1)
	n += copy(s[n:], pk[:])
	s[n] = count
	return s
}

func (s *h1Salt) sum(x *LinkValue) [32]byte {
	copy(s[len(s)-LinkValueSize:], x[:])
	return sha256.Sum256(s[:])
}

// sas renders H_sas(L) as 6 decimal digits (§7 item 22) for out-of-band comparison.
func sas(link *[32]byte) string {
	d := sha256.Sum256(append([]byte(tagSAS), link[:]...))
	return fmt.Sprintf("%06d", binary.BigEndian.Uint64(d[:8])%1_000_000)
}

// confirmTag is HMAC-SHA256(sk, "SDDR-v1/CONFIRM" ‖ role) (§3.9 [REC]); the role byte
// (0 = holder of the smaller public key) stops a tag from being reflected to its sender.
func confirmTag(sk *[KeySize]byte, role byte) [32]byte {
	m := hmac.New(sha256.New, sk[:])
	m.Write([]byte(tagConfirm))
	m.Write([]byte{role})
	var t [32]byte
	m.Sum(t[:0])
	return t
}

// verifyTag is H3(L_link ‖ n ‖ dhk ‖ pk_sender ‖ pk_receiver), the §3.8 hardened verification
// message: bound to this encounter's DH secret and to the direction.
func verifyTag(link *LinkValue, nonce *[NonceSize]byte, dhk []byte, sender, receiver *[PublicKeySize]byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(tagH3))
	h.Write(link[:])
	h.Write(nonce[:])
	h.Write(dhk)
	h.Write(sender[:])
	h.Write(receiver[:])
	var t [32]byte
	h.Sum(t[:0])
	return t
}
