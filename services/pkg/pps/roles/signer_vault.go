package roles

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// VaultSigner is the garbler's identity in Vault Transit (spec §5.3): an ed25519 key that
// never leaves Vault; each signature is one call to transit/sign/<key>. The key version is
// pinned at start (the public key devices pin, D20): after a rotation in Vault the garbler
// keeps signing with the pinned version until it restarts and announces the new key.
type VaultSigner struct {
	transit *VaultTransit
	key     string
	version int
	pub     ed25519.PublicKey
}

// NewVaultSigner reads the public key of Transit key name (its latest version) from
// transit/keys/<name> and checks that the key type is ed25519.
func NewVaultSigner(ctx context.Context, t *VaultTransit, name string) (*VaultSigner, error) {
	if name == "" || strings.ContainsAny(name, "/ ") {
		return nil, fmt.Errorf("transit identity key %q: want a key name", name)
	}
	sec, err := t.Read(ctx, "keys/"+name)
	if err != nil {
		return nil, fmt.Errorf("transit identity key: %w", err)
	}
	if typ, _ := sec.Data["type"].(string); typ != "ed25519" {
		return nil, fmt.Errorf("transit identity key %s is of type %q, want ed25519", name, typ)
	}
	latest, err := jsonInt(sec.Data["latest_version"])
	if err != nil {
		return nil, fmt.Errorf("transit identity key %s: latest_version: %w", name, err)
	}
	versions, _ := sec.Data["keys"].(map[string]any)
	v, _ := versions[strconv.Itoa(latest)].(map[string]any)
	pkB64, _ := v["public_key"].(string)
	pk, err := base64.StdEncoding.DecodeString(pkB64)
	if err != nil || len(pk) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("transit identity key %s version %d: no Ed25519 public key", name, latest)
	}
	return &VaultSigner{transit: t, key: name, version: latest, pub: pk}, nil
}

func jsonInt(v any) (int, error) {
	switch n := v.(type) {
	case json.Number:
		i, err := n.Int64()
		return int(i), err
	case float64:
		return int(n), nil
	case int:
		return n, nil
	}
	return 0, fmt.Errorf("%T is not a number", v)
}

// Public implements Signer.
func (s *VaultSigner) Public() ed25519.PublicKey { return s.pub }

// Sign implements Signer. The signature is checked against the pinned public key before it
// is returned, so a misconfigured Vault never makes the garbler send an ack devices refuse.
func (s *VaultSigner) Sign(ctx context.Context, msg []byte) ([]byte, error) {
	sec, err := s.transit.Write(ctx, "sign/"+s.key, map[string]any{
		"input":       base64.StdEncoding.EncodeToString(msg),
		"key_version": s.version,
	})
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	raw, err := stringField(sec, "signature")
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	want := "vault:v" + strconv.Itoa(s.version) + ":"
	if !strings.HasPrefix(raw, want) {
		return nil, fmt.Errorf("sign: signature is not of key version %d", s.version)
	}
	sig, err := base64.StdEncoding.DecodeString(raw[len(want):])
	if err != nil || len(sig) != ed25519.SignatureSize || !ed25519.Verify(s.pub, msg, sig) {
		return nil, fmt.Errorf("sign: Vault's signature does not verify under the pinned key")
	}
	return sig, nil
}
