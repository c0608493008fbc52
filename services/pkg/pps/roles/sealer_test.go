package roles

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	vault "github.com/hashicorp/vault/api"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/testenv"
)

func gtFileSealer(t testing.TB) *FileSealer {
	t.Helper()
	var k [32]byte
	rand.Read(k[:])
	s, err := NewFileSealer(k[:], nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestGarblerSealerFileRoundTripAndBinding: a record opens only under its own key (the AD), with
// the same local key, and not after any byte of it changed.
func TestGarblerSealerFileRoundTripAndBinding(t *testing.T) {
	ctx := context.Background()
	s := gtFileSealer(t)
	pt := []byte("K_i and a round")
	rec, err := s.Seal(ctx, pt, []byte(pubKey("x")))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(rec, pt) {
		t.Fatal("the plaintext is in the record")
	}
	got, err := s.Open(ctx, rec, []byte(pubKey("x")))
	if err != nil || !bytes.Equal(got, pt) {
		t.Fatalf("open: %q %v", got, err)
	}
	if _, err := s.Open(ctx, rec, []byte(pubKey("y"))); !errors.Is(err, ErrSealed) {
		t.Fatalf("opened under another key: %v", err)
	}
	if _, err := gtFileSealer(t).Open(ctx, rec, []byte(pubKey("x"))); !errors.Is(err, ErrSealed) {
		t.Fatalf("opened with another local key: %v", err)
	}
	for i := range rec {
		bad := bytes.Clone(rec)
		bad[i] ^= 1
		if _, err := s.Open(ctx, bad, []byte(pubKey("x"))); !errors.Is(err, ErrSealed) {
			t.Fatalf("opened with byte %d flipped: %v", i, err)
		}
	}
	// The key file forms package keys reads.
	path := filepath.Join(t.TempDir(), "seal.key")
	if err := os.WriteFile(path, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFileSealer(path); err == nil {
		t.Fatal("a malformed key file loaded")
	}
}

// FuzzGarblerSealedRecord: the sealed-record decoder and Open never panic on any bytes, and
// whatever opens was sealed under that AD.
func FuzzGarblerSealedRecord(f *testing.F) {
	s := gtFileSealer(f)
	ctx := context.Background()
	ad := []byte(seedKey("p", 7))
	rec, _ := s.Seal(ctx, []byte("seed"), ad)
	f.Add(rec)
	f.Add([]byte("PG\x01\x02\x05\x00vault"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseSealed(b)
		if err == nil && (r.scheme != schemeLocal && r.scheme != schemeVault) {
			t.Fatalf("parsed scheme %d", r.scheme)
		}
		if pt, err := s.Open(ctx, b, ad); err == nil && !bytes.Equal(pt, []byte("seed")) {
			t.Fatalf("forged record opened: %q", pt)
		}
	})
}

// FuzzGarblerRecords: the decoders of the records' plaintexts never panic, and what
// decodes re-encodes to the same bytes (one encoding per record).
func FuzzGarblerRecords(f *testing.F) {
	pr := pubRecord{Round: 9}
	pr.Policy.Fns = []string{"0123456789abcdef0123456789abcdef"}
	f.Add(pr.marshal())
	sr := seedRecord{Round: 3}
	f.Add(sr.marshal())
	fr := fnRecord{Mode: 1, Epoch: 2, Round: 5, Source: "(sum (list (val \"a\")))"}
	f.Add(fr.marshal())
	var sub subRecord
	f.Add(sub.marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := decodePubRecord(b); err == nil && !bytes.Equal(r.marshal(), b) {
			t.Fatalf("publisher record does not re-encode: %x", b)
		}
		if r, err := decodeSeedRecord(b); err == nil && !bytes.Equal(r.marshal(), b) {
			t.Fatalf("seed record does not re-encode: %x", b)
		}
		if r, err := decodeFnRecord(b); err == nil && !bytes.Equal(r.marshal(), b) {
			t.Fatalf("function record does not re-encode: %x", b)
		}
		if r, err := decodeSubRecord(b); err == nil && !bytes.Equal(r.marshal(), b) {
			t.Fatalf("subscriber record does not re-encode: %x", b)
		}
	})
}

// gtVault starts a Vault dev server with the Transit engine, a sealing key and an ed25519
// identity key, and writes to a file a token whose policy allows only what the garbler
// uses (data keys, decrypt, sign, reading the keys).
func gtVault(t *testing.T) (*testenv.Vault, *vault.Client, VaultConfig) {
	t.Helper()
	v := testenv.StartVault(t)
	c := v.Client(t)
	if err := c.Sys().Mount("transit", &vault.MountInput{Type: "transit"}); err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]string{"pps-garbler-seal": "aes256-gcm96", "pps-garbler-id": "ed25519"} {
		if _, err := c.Logical().Write("transit/keys/"+name, map[string]any{"type": typ}); err != nil {
			t.Fatal(err)
		}
	}
	policy := `
path "transit/datakey/plaintext/pps-garbler-seal" { capabilities = ["update"] }
path "transit/decrypt/pps-garbler-seal" { capabilities = ["update"] }
path "transit/keys/pps-garbler-seal" { capabilities = ["read"] }
path "transit/sign/pps-garbler-id" { capabilities = ["update"] }
path "transit/keys/pps-garbler-id" { capabilities = ["read"] }
`
	if err := c.Sys().PutPolicy("pps-garbler", policy); err != nil {
		t.Fatal(err)
	}
	cfg := VaultConfig{Addr: v.Addr(), TokenFile: filepath.Join(t.TempDir(), "token")}
	gtVaultToken(t, c, cfg.TokenFile)
	return v, c, cfg
}

// gtVaultToken writes a new token of the garbler's policy to file and returns it.
func gtVaultToken(t *testing.T, c *vault.Client, file string) string {
	t.Helper()
	tok, err := c.Auth().Token().Create(&vault.TokenCreateRequest{Policies: []string{"pps-garbler"}, NoParent: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(tok.Auth.ClientToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tok.Auth.ClientToken
}

// TestGarblerSealerVaultTransitEnvelope against a real Vault: records seal under data keys from
// transit/datakey and open on another sealer instance (a restarted garbler: the wrapped key
// is unwrapped by transit/decrypt); the data key rotates after DataKeyUses records; the AD
// binds; and a revoked token is replaced by logging in again from the token file.
func TestGarblerSealerVaultTransitEnvelope(t *testing.T) {
	ctx := context.Background()
	_, root, cfg := gtVault(t)
	tr, err := NewVaultTransit(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewVaultSealer(ctx, tr, "pps-garbler-seal", VaultSealerOptions{DataKeyUses: 2})
	if err != nil {
		t.Fatal(err)
	}
	var recs [][]byte
	for i := range 3 {
		r, err := s.Seal(ctx, []byte{byte(i), 'k'}, []byte(fnKey("f")))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	w := func(r []byte) string { p, _ := parseSealed(r); return string(p.wrapped) }
	if w(recs[0]) != w(recs[1]) || w(recs[1]) == w(recs[2]) {
		t.Fatal("the data key did not rotate after DataKeyUses records")
	}
	if _, err := NewVaultSealer(ctx, tr, "no-such-key", VaultSealerOptions{}); err == nil {
		t.Fatal("a sealer on a missing Transit key")
	}
	tr2, err := NewVaultTransit(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewVaultSealer(ctx, tr2, "pps-garbler-seal", VaultSealerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The token s2 logged in with is revoked and a new one written to the file: the next
	// Vault call is refused (403) once, then succeeds after logging in again.
	old, _ := os.ReadFile(cfg.TokenFile)
	if err := root.Auth().Token().RevokeTree(string(bytes.TrimSpace(old))); err != nil {
		t.Fatal(err)
	}
	gtVaultToken(t, root, cfg.TokenFile)
	for i, r := range recs {
		pt, err := s2.Open(ctx, r, []byte(fnKey("f")))
		if err != nil || !bytes.Equal(pt, []byte{byte(i), 'k'}) {
			t.Fatalf("record %d on another sealer: %q %v", i, pt, err)
		}
	}
	if _, err := s2.Open(ctx, recs[0], []byte(fnKey("g"))); !errors.Is(err, ErrSealed) {
		t.Fatalf("opened under another key: %v", err)
	}
	if _, err := gtFileSealer(t).Open(ctx, recs[0], []byte(fnKey("f"))); !errors.Is(err, ErrSealed) {
		t.Fatalf("a local sealer opened a Vault record: %v", err)
	}
	if err := tr2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	// Concurrent seals and opens while data keys rotate and the cache evicts (run with -race).
	busy, err := NewVaultSealer(ctx, tr2, "pps-garbler-seal", VaultSealerOptions{DataKeyUses: 3, CacheSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := range 10 {
				pt := []byte{byte(w), byte(i)}
				r, err := busy.Seal(ctx, pt, []byte("k"))
				if err == nil {
					var got []byte
					if got, err = busy.Open(ctx, r, []byte("k")); err == nil && !bytes.Equal(got, pt) {
						err = errors.New("opened to other bytes")
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var seed pps.Seed
	rand.Read(seed[:])
	rec, err := s2.Seal(ctx, seed[:], []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(rec, seed[:]) {
		t.Fatal("the plaintext is in the record")
	}
}
