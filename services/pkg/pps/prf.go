package pps

import (
	"golang.org/x/crypto/blake2b"
)

// Domain-separation labels of the PRF (spec §8.1, §8.9). A label names one use; two uses
// never share one.
const (
	labelSeed       = "pps/v1/seed"
	labelNext       = "pps/v1/next"
	labelPubRatchet = "pps/v1/pub-ratchet"
	labelH1Mask     = "pps/v1/h1-mask" // H1's input masks m (D21, hardened.go)
)

// PRF is keyed BLAKE2b-256 of label under key: libsodium crypto_generichash(out, 32, label,
// len(label), key, 32) (spec §8, D6). crypto_kdf is avoided on purpose: it needs BLAKE2b
// salt and personalisation, which x/crypto/blake2b does not offer.
func PRF(key *Seed, label string) Seed {
	h, err := blake2b.New256(key[:])
	if err != nil {
		panic("pps: blake2b with a 32-byte key: " + err.Error()) // unreachable
	}
	h.Write([]byte(label))
	var out Seed
	h.Sum(out[:0])
	return out
}
