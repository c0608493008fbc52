package roles

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	vault "github.com/hashicorp/vault/api"
	k8sauth "github.com/hashicorp/vault/api/auth/kubernetes"

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

// TransitConfig is how the registrar reaches Vault's Transit engine: Kubernetes auth with
// Role (the pod's service account token from JWTFile), else the token in TokenFile — never a
// token from a flag or a variable (the way package keys and the PPS garbler log in).
type TransitConfig struct {
	Addr      string
	TokenFile string
	Role      string
	AuthPath  string // Kubernetes auth mount (default "kubernetes")
	JWTFile   string // default keys.DefaultJWTFile
	Mount     string // Transit mount (default "transit")
	Key       string // the Transit key seeds are wrapped under
	Timeout   time.Duration
}

// Validate checks the settings without any I/O.
func (c TransitConfig) Validate() error {
	var errs []error
	if !strings.HasPrefix(c.Addr, "http://") && !strings.HasPrefix(c.Addr, "https://") {
		errs = append(errs, errors.New("--vault-addr must be an http:// or https:// URL"))
	}
	if (c.Role == "") == (c.TokenFile == "") {
		errs = append(errs, errors.New("exactly one of --vault-role (Kubernetes auth) and --vault-token-file (token auth) is needed"))
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
	cfg    TransitConfig
	mu     sync.Mutex
	client *vault.Client
}

// NewTransitSeeds logs in to Vault and checks that the key exists.
func NewTransitSeeds(ctx context.Context, cfg TransitConfig) (*TransitSeeds, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.AuthPath == "" {
		cfg.AuthPath = keys.DefaultAuthPath
	}
	if cfg.JWTFile == "" {
		cfg.JWTFile = keys.DefaultJWTFile
	}
	if cfg.Mount == "" {
		cfg.Mount = "transit"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = keys.DefaultTimeout
	}
	cfg.Mount, cfg.AuthPath = strings.Trim(cfg.Mount, "/"), strings.Trim(cfg.AuthPath, "/")
	t := &TransitSeeds{cfg: cfg}
	if err := t.login(ctx); err != nil {
		return nil, err
	}
	if _, err := t.call(ctx, func(ctx context.Context, c *vault.Client) (*vault.Secret, error) {
		return c.Logical().ReadWithContext(ctx, cfg.Mount+"/keys/"+cfg.Key)
	}); err != nil {
		return nil, fmt.Errorf("%s: transit key: %w", t, err)
	}
	return t, nil
}

func (t *TransitSeeds) String() string {
	return fmt.Sprintf("vault %s %s/keys/%s", t.cfg.Addr, t.cfg.Mount, t.cfg.Key)
}

func (t *TransitSeeds) login(ctx context.Context) error {
	cfg := vault.DefaultConfig()
	if cfg.Error != nil {
		return fmt.Errorf("%s: client config: %w", t, cfg.Error)
	}
	cfg.Address, cfg.Timeout = t.cfg.Addr, t.cfg.Timeout
	client, err := vault.NewClient(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", t, err)
	}
	client.ClearToken() // never an ambient VAULT_TOKEN
	if t.cfg.Role == "" {
		b, err := os.ReadFile(t.cfg.TokenFile)
		if err != nil {
			return fmt.Errorf("%s: --vault-token-file: %w", t, err)
		}
		tok := strings.TrimSpace(string(b))
		clear(b)
		if tok == "" {
			return fmt.Errorf("%s: token file %s is empty", t, t.cfg.TokenFile)
		}
		client.SetToken(tok)
	} else {
		jwt, err := os.ReadFile(t.cfg.JWTFile)
		if err != nil {
			return fmt.Errorf("%s: service account token: %w", t, err)
		}
		auth, err := k8sauth.NewKubernetesAuth(t.cfg.Role, k8sauth.WithMountPath(t.cfg.AuthPath),
			k8sauth.WithServiceAccountToken(strings.TrimSpace(string(jwt))))
		if err != nil {
			return fmt.Errorf("%s: kubernetes auth: %w", t, err)
		}
		lctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
		s, err := auth.Login(lctx, client)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: kubernetes auth login (role %q): %w", t, t.cfg.Role, err)
		}
		if s == nil || s.Auth == nil || s.Auth.ClientToken == "" {
			return fmt.Errorf("%s: kubernetes auth login (role %q) returned no token", t, t.cfg.Role)
		}
		client.SetToken(s.Auth.ClientToken)
	}
	t.mu.Lock()
	t.client = client
	t.mu.Unlock()
	return nil
}

// call runs f, logging in again once if Vault answers 403 (an expired or rotated token).
func (t *TransitSeeds) call(ctx context.Context, f func(context.Context, *vault.Client) (*vault.Secret, error)) (*vault.Secret, error) {
	for attempt := 0; ; attempt++ {
		t.mu.Lock()
		c := t.client
		t.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
		s, err := f(cctx, c)
		cancel()
		var re *vault.ResponseError
		if err != nil && attempt == 0 && errors.As(err, &re) && re.StatusCode == http.StatusForbidden {
			if lerr := t.login(ctx); lerr != nil {
				return nil, errors.Join(err, lerr)
			}
			continue
		}
		if err == nil && (s == nil || s.Data == nil) {
			err = errors.New("empty answer")
		}
		return s, err
	}
}

// Wrap implements SeedWrapper.
func (t *TransitSeeds) Wrap(ctx context.Context, session string, seed *[lois.SeedSize]byte) (string, error) {
	pt := append([]byte(session), seed[:]...)
	b64 := base64.StdEncoding.EncodeToString(pt)
	clear(pt)
	s, err := t.call(ctx, func(ctx context.Context, c *vault.Client) (*vault.Secret, error) {
		return c.Logical().WriteWithContext(ctx, t.cfg.Mount+"/encrypt/"+t.cfg.Key, map[string]any{"plaintext": b64})
	})
	if err != nil {
		return "", fmt.Errorf("%s: wrap seed: %w", t, err)
	}
	ct, _ := s.Data["ciphertext"].(string)
	if !strings.HasPrefix(ct, "vault:v") {
		return "", fmt.Errorf("%s: wrap seed: no Transit ciphertext in the answer", t)
	}
	return ct, nil
}

// Unwrap implements SeedWrapper.
func (t *TransitSeeds) Unwrap(ctx context.Context, session, wrapped string) ([lois.SeedSize]byte, error) {
	var seed [lois.SeedSize]byte
	if !strings.HasPrefix(wrapped, "vault:v") {
		return seed, errors.New("lois registrar: a stored seed is not a Transit ciphertext")
	}
	s, err := t.call(ctx, func(ctx context.Context, c *vault.Client) (*vault.Secret, error) {
		return c.Logical().WriteWithContext(ctx, t.cfg.Mount+"/decrypt/"+t.cfg.Key, map[string]any{"ciphertext": wrapped})
	})
	if err != nil {
		return seed, fmt.Errorf("%s: unwrap seed: %w", t, err)
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

// Ping is a readiness check: Vault answers, is initialised and unsealed.
func (t *TransitSeeds) Ping(ctx context.Context) error {
	t.mu.Lock()
	c := t.client
	t.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	h, err := c.Sys().HealthWithContext(cctx)
	if err != nil {
		return fmt.Errorf("%s: %w", t, err)
	}
	if !h.Initialized || h.Sealed {
		return fmt.Errorf("%s: initialized=%v sealed=%v", t, h.Initialized, h.Sealed)
	}
	return nil
}
