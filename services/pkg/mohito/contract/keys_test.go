package contract_test

import (
	"crypto/rand"
	mrand "math/rand/v2"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// TestPrivateKeySizesAreTheParsers: for each suite, the services' parser accepts every private
// key of the contract's size (random ones, and the extremes) and refuses other sizes — so the
// operator, which checks key Secrets by that size without linking the protocol core, accepts
// exactly the keys the roles load.
func TestPrivateKeySizesAreTheParsers(t *testing.T) {
	for _, c := range []struct {
		name  string
		suite mohito.Suite
	}{{contract.SuiteX25519, mohito.SuiteX25519}, {contract.SuiteMLKEM768X25519, mohito.SuiteMLKEM768X25519}} {
		size, ok := contract.PrivateKeySize(c.name)
		if !ok {
			t.Fatalf("%s: no key size", c.name)
		}
		keys := [][]byte{make([]byte, size), bytesOf(size, 0xff)}
		for range 200 {
			k := make([]byte, size)
			_, _ = rand.Read(k)
			keys = append(keys, k)
		}
		for _, k := range keys {
			if _, err := mohito.ParsePrivateKey(c.suite, k); err != nil {
				t.Fatalf("%s: a %d-byte key %x refused: %v", c.name, size, k, err)
			}
		}
		for _, n := range []int{0, size - 1, size + 1, 2 * size, 64 + mrand.IntN(64)} {
			if n == size {
				continue
			}
			if _, err := mohito.ParsePrivateKey(c.suite, make([]byte, n)); err == nil {
				t.Errorf("%s: a %d-byte key accepted", c.name, n)
			}
		}
	}
	if n, ok := contract.PrivateKeySize(""); !ok || n != 32 {
		t.Errorf("default suite: %d, %v", n, ok)
	}
	if _, ok := contract.PrivateKeySize("P-256"); ok {
		t.Error("an unknown suite has a key size")
	}
}

func bytesOf(n int, b byte) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}
