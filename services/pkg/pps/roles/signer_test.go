package roles

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// TestGarblerSignerFileKey: `pps keys garbler` writes a key file that LoadFileSigner reads back
// to the same identity, refuses to overwrite it, and signs pure Ed25519.
func TestGarblerSignerFileKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "garbler.key")
	pub, err := GenerateIdentityFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v", fi.Mode())
	}
	if _, err := GenerateIdentityFile(path); err == nil {
		t.Fatal("an existing key file was overwritten")
	}
	s, err := LoadFileSigner(path)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Public().Equal(pub) {
		t.Fatal("the loaded identity is not the generated one")
	}
	sig, _ := s.Sign(context.Background(), []byte("m"))
	if !ed25519.Verify(pub, []byte("m"), sig) {
		t.Fatal("signature does not verify")
	}
}

// TestGarblerSignerVaultTransit against a real Vault: the identity's public key is read from
// transit/keys, signatures from transit/sign verify under it with crypto/ed25519, a key of
// another type is refused, and a garbler signing through Vault (and sealing through Vault)
// answers a publisher's hello with an ack that verifies under the pinned key.
func TestGarblerSignerVaultTransit(t *testing.T) {
	ctx := context.Background()
	_, root, cfg := gtVault(t)
	tr, err := NewVaultTransit(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewVaultSigner(ctx, tr, "pps-garbler-id")
	if err != nil {
		t.Fatal(err)
	}
	sec, err := root.Logical().Read("transit/keys/pps-garbler-id")
	if err != nil {
		t.Fatal(err)
	}
	pk, _ := base64.StdEncoding.DecodeString(sec.Data["keys"].(map[string]any)["1"].(map[string]any)["public_key"].(string))
	if !s.Public().Equal(ed25519.PublicKey(pk)) {
		t.Fatal("public key differs from Vault's")
	}
	sig, err := s.Sign(ctx, []byte("transcript"))
	if err != nil {
		t.Fatal(err)
	}
	if !ed25519.Verify(pk, []byte("transcript"), sig) {
		t.Fatal("Vault's signature does not verify with crypto/ed25519")
	}
	if _, err := NewVaultSigner(ctx, tr, "pps-garbler-seal"); err == nil {
		t.Fatal("an aes256 key accepted as the identity")
	}

	sealer, err := NewVaultSealer(ctx, tr, "pps-garbler-seal", VaultSealerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := newGarblerEnv(t)
	e.stop()
	e.sealer, e.signer = sealer, s
	e.start(t)
	p := e.setupPublisher(t, "0123456789abcdef0123456789abcdef") // validates the ack under s.Public()
	raw, err := e.redis.Client().Get(ctx, pubKey(p.dev.id)).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if r, err := parseSealed(raw); err != nil || r.scheme != schemeVault {
		t.Fatalf("publisher record not sealed by Vault Transit: %v", err)
	}
	// A subscriber of an unregistered function still gets a refusal, not a Vault error.
	d := gtNewDevice(t)
	_, _, msg := d.hello(t, contract.TypeSub, "0123456789abcdef0123456789abcdef", nil)
	if _, err := e.client.Setup(ctx, &ppsv1.SetupRequest{Message: msg}); err == nil {
		t.Fatal("sub of an unregistered function accepted")
	}
}
