package roles

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	vault "github.com/hashicorp/vault/api"

	"github.com/obscura-iot/obscura/services/pkg/keys"
)

// VaultConfig, VaultTransit and NewVaultTransit are package keys' Transit client: the
// garbler's sealer and signer share one login.
type (
	VaultConfig  = keys.TransitConfig
	VaultTransit = keys.Transit
)

// NewVaultTransit logs in to Vault (keys.NewTransit).
func NewVaultTransit(ctx context.Context, cfg VaultConfig) (*VaultTransit, error) {
	return keys.NewTransit(ctx, cfg)
}

// DefaultTransitMount is where the Transit engine is mounted unless configured.
const DefaultTransitMount = keys.DefaultTransitMount

func stringField(s *vault.Secret, name string) (string, error) {
	raw, ok := s.Data[name].(string)
	if !ok || raw == "" {
		return "", fmt.Errorf("vault answer has no %q", name)
	}
	return raw, nil
}

// VaultSealer is the production Sealer: envelope encryption with Vault Transit. A data key
// comes from transit/datakey/plaintext/<key> (Vault returns it in plaintext and wrapped
// under the Transit key); records are sealed locally with XChaCha20-Poly1305 under it and
// carry the wrapped form, which Vault alone can unwrap (transit/decrypt/<key>).
//
// The choice: one data key seals up to DataKeyUses records or for DataKeyAge, then a fresh
// one is drawn, and unwrapped data keys are cached (CacheSize). A data key per record would
// put two Vault calls (datakey on write, decrypt on read) on every ratchet step of every
// execution; DESIGN.md rules out a Vault call per message. DataKeyUses = 1 gives a data key
// per record for deployments that want it. Forward secrecy does not rest on the data key:
// it rests on the sealed K and seeds being overwritten or deleted in Redis (spec D8), and a
// copy of an old record (an RDB or AOF file) stays as sensitive as the Transit key itself.
type VaultSealer struct {
	transit *VaultTransit
	key     string
	opt     VaultSealerOptions

	mu      sync.Mutex
	current *dataKey
	uses    int
	cache   map[string]*list.Element // wrapped → element of lru holding *dataKey
	lru     *list.List
}

// VaultSealerOptions tune data key rotation and caching; zero values take the defaults.
type VaultSealerOptions struct {
	DataKeyUses int           // records sealed per data key (default 4096)
	DataKeyAge  time.Duration // longest use of a data key (default 1 h)
	CacheSize   int           // unwrapped data keys kept (default 256)
	Rand        io.Reader     // nonces; nil means crypto/rand
}

type dataKey struct {
	plain   [32]byte
	wrapped string
	born    time.Time
}

// NewVaultSealer seals with Transit key name (type aes256-gcm96 or chacha20-poly1305). It
// checks that the key exists.
func NewVaultSealer(ctx context.Context, t *VaultTransit, name string, opt VaultSealerOptions) (*VaultSealer, error) {
	if name == "" || strings.ContainsAny(name, "/ ") {
		return nil, fmt.Errorf("transit seal key %q: want a key name", name)
	}
	if opt.DataKeyUses <= 0 {
		opt.DataKeyUses = 4096
	}
	if opt.DataKeyAge <= 0 {
		opt.DataKeyAge = time.Hour
	}
	if opt.CacheSize <= 0 {
		opt.CacheSize = 256
	}
	if opt.Rand == nil {
		opt.Rand = rand.Reader
	}
	if _, err := t.Read(ctx, "keys/"+name); err != nil {
		return nil, fmt.Errorf("transit seal key: %w", err)
	}
	return &VaultSealer{transit: t, key: name, opt: opt, cache: map[string]*list.Element{}, lru: list.New()}, nil
}

// Seal implements Sealer.
func (s *VaultSealer) Seal(ctx context.Context, plaintext, ad []byte) ([]byte, error) {
	key, wrapped, err := s.sealingKey(ctx)
	if err != nil {
		return nil, err
	}
	defer clear(key[:])
	return sealWith(key[:], schemeVault, []byte(wrapped), plaintext, ad, s.opt.Rand)
}

// Open implements Sealer.
func (s *VaultSealer) Open(ctx context.Context, sealed, ad []byte) ([]byte, error) {
	r, err := parseSealed(sealed)
	if err != nil {
		return nil, err
	}
	if r.scheme != schemeVault {
		return nil, fmt.Errorf("%w: sealed with a local key, this garbler seals with Vault Transit", ErrSealed)
	}
	key, err := s.unwrap(ctx, string(r.wrapped))
	if err != nil {
		return nil, err
	}
	defer clear(key[:])
	return openWith(key[:], r, ad)
}

// sealingKey returns a copy of the current data key (the caller erases it) and its wrapped
// form, drawing a new one when the current one is used up. Keys are handed out as copies so
// an eviction can erase the cached one while a call is still using it.
func (s *VaultSealer) sealingKey(ctx context.Context) ([32]byte, string, error) {
	s.mu.Lock()
	if s.current != nil && s.uses < s.opt.DataKeyUses && time.Since(s.current.born) < s.opt.DataKeyAge {
		s.uses++
		key, wrapped := s.current.plain, s.current.wrapped
		s.mu.Unlock()
		return key, wrapped, nil
	}
	s.mu.Unlock()
	var none [32]byte
	sec, err := s.transit.Write(ctx, "datakey/plaintext/"+s.key, map[string]any{"bits": 256})
	if err != nil {
		return none, "", fmt.Errorf("new data key: %w", err)
	}
	wrapped, err := stringField(sec, "ciphertext")
	if err != nil {
		return none, "", fmt.Errorf("new data key: %w", err)
	}
	plainB64, err := stringField(sec, "plaintext")
	if err != nil {
		return none, "", fmt.Errorf("new data key: %w", err)
	}
	dk, err := newDataKey(plainB64, wrapped)
	if err != nil {
		return none, "", fmt.Errorf("new data key: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current, s.uses = dk, 1
	s.remember(dk)
	return dk.plain, dk.wrapped, nil
}

// unwrap returns a copy of the data key whose Transit ciphertext is wrapped.
func (s *VaultSealer) unwrap(ctx context.Context, wrapped string) ([32]byte, error) {
	var none [32]byte
	s.mu.Lock()
	if e, ok := s.cache[wrapped]; ok {
		s.lru.MoveToFront(e)
		key := e.Value.(*dataKey).plain
		s.mu.Unlock()
		return key, nil
	}
	s.mu.Unlock()
	if !strings.HasPrefix(wrapped, "vault:v") {
		return none, fmt.Errorf("%w: wrapped data key is not a Transit ciphertext", ErrSealed)
	}
	sec, err := s.transit.Write(ctx, "decrypt/"+s.key, map[string]any{"ciphertext": wrapped})
	if err != nil {
		return none, fmt.Errorf("unwrap data key: %w", err)
	}
	plainB64, err := stringField(sec, "plaintext")
	if err != nil {
		return none, fmt.Errorf("unwrap data key: %w", err)
	}
	dk, err := newDataKey(plainB64, wrapped)
	if err != nil {
		return none, fmt.Errorf("unwrap data key: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remember(dk)
	return dk.plain, nil
}

// remember caches dk, evicting (and erasing) the least recently used key. The current
// sealing key is never evicted while in use: it is re-inserted on every rotation.
func (s *VaultSealer) remember(dk *dataKey) {
	if e, ok := s.cache[dk.wrapped]; ok {
		s.lru.MoveToFront(e)
		return
	}
	s.cache[dk.wrapped] = s.lru.PushFront(dk)
	for s.lru.Len() > s.opt.CacheSize {
		e := s.lru.Back()
		old := e.Value.(*dataKey)
		if old == s.current {
			s.lru.MoveToFront(e)
			continue
		}
		s.lru.Remove(e)
		delete(s.cache, old.wrapped)
		clear(old.plain[:])
	}
}

func newDataKey(plainB64, wrapped string) (*dataKey, error) {
	if len(wrapped) > maxWrapped {
		return nil, fmt.Errorf("wrapped data key of %d bytes", len(wrapped))
	}
	b, err := base64.StdEncoding.DecodeString(plainB64)
	if err != nil || len(b) != 32 {
		clear(b)
		return nil, fmt.Errorf("data key is not 32 bytes of base64")
	}
	dk := &dataKey{wrapped: wrapped, born: time.Now()}
	copy(dk.plain[:], b)
	clear(b)
	return dk, nil
}
