package roles

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/obscura-iot/obscura/services/pkg/keys"
	"github.com/obscura-iot/obscura/services/pkg/lois"
)

// SeedWrapper wraps a session's seed before it is stored and unwraps it when the registrar
// restarts (spec §10: seeds never go to disk in plaintext). The wrapped form is bound to the
// session: a wrapped seed moved to another session's record does not unwrap.
type SeedWrapper interface {
	Wrap(ctx context.Context, session string, seed *[lois.SeedSize]byte) (string, error)
	Unwrap(ctx context.Context, session, wrapped string) ([lois.SeedSize]byte, error)
}

// TransitConfig is how the registrar reaches Vault's Transit engine (keys.TransitConfig: Kubernetes
// auth with Role, else the token in TokenFile — never a token from a flag or a variable) and the
// Transit key its seeds are wrapped under.
type TransitConfig struct {
	keys.TransitConfig
	Key string
}

// Validate checks the settings without any I/O.
func (c TransitConfig) Validate() error {
	var errs []error
	if err := c.TransitConfig.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Key == "" || strings.ContainsAny(c.Key, "/ ") {
		errs = append(errs, fmt.Errorf("--vault-transit-key %q: want a Transit key name", c.Key))
	}
	return errors.Join(errs...)
}

// TransitSeeds wraps seeds with Vault Transit (transit/encrypt/<key>, transit/decrypt/<key>).
// The plaintext Vault sees is session‖seed, so a ciphertext unwraps only for its session.
// One Transit call per HELLO and one per session when the registrar restarts: Vault is never
// on the packet path nor on an epoch grant's (the registrar keeps unwrapped seeds in memory).
type TransitSeeds struct {
	*keys.Transit
	key string
}

// NewTransitSeeds logs in to Vault and checks that the key exists.
func NewTransitSeeds(ctx context.Context, cfg TransitConfig) (*TransitSeeds, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tr, err := keys.NewTransit(ctx, cfg.TransitConfig)
	if err != nil {
		return nil, err
	}
	t := &TransitSeeds{Transit: tr, key: cfg.Key}
	if _, err := t.Read(ctx, "keys/"+cfg.Key); err != nil {
		return nil, fmt.Errorf("transit key: %w", err)
	}
	return t, nil
}

// Wrap implements SeedWrapper.
func (t *TransitSeeds) Wrap(ctx context.Context, session string, seed *[lois.SeedSize]byte) (string, error) {
	pt := append([]byte(session), seed[:]...)
	b64 := base64.StdEncoding.EncodeToString(pt)
	clear(pt)
	s, err := t.Write(ctx, "encrypt/"+t.key, map[string]any{"plaintext": b64})
	if err != nil {
		return "", fmt.Errorf("wrap seed: %w", err)
	}
	ct, _ := s.Data["ciphertext"].(string)
	if !strings.HasPrefix(ct, "vault:v") {
		return "", fmt.Errorf("%s: wrap seed: no Transit ciphertext in the answer", t.Transit)
	}
	return ct, nil
}

// Unwrap implements SeedWrapper.
func (t *TransitSeeds) Unwrap(ctx context.Context, session, wrapped string) ([lois.SeedSize]byte, error) {
	var seed [lois.SeedSize]byte
	if !strings.HasPrefix(wrapped, "vault:v") {
		return seed, errors.New("lois registrar: a stored seed is not a Transit ciphertext")
	}
	s, err := t.Write(ctx, "decrypt/"+t.key, map[string]any{"ciphertext": wrapped})
	if err != nil {
		return seed, fmt.Errorf("unwrap seed: %w", err)
	}
	b64, _ := s.Data["plaintext"].(string)
	pt, err := base64.StdEncoding.DecodeString(b64)
	defer clear(pt)
	if err != nil || len(pt) != len(session)+lois.SeedSize || string(pt[:len(session)]) != session {
		return seed, errors.New("lois registrar: a wrapped seed does not belong to its session")
	}
	copy(seed[:], pt[len(session):])
	return seed, nil
}
