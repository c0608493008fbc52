package keys

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	vault "github.com/hashicorp/vault/api"
	k8sauth "github.com/hashicorp/vault/api/auth/kubernetes"
)

// TransitConfig is how a service reaches Vault's Transit engine (the PPS garbler's sealing and
// signing, the LOIS registrar's seed wrapping). It logs in as Vault does for key rings:
// Kubernetes auth with Role (the pod's service account token from JWTFile), else the token in
// TokenFile — never a token from a flag or a variable.
type TransitConfig struct {
	Addr      string
	TokenFile string
	Role      string
	AuthPath  string // Kubernetes auth mount (default "kubernetes")
	JWTFile   string // service account token (default DefaultJWTFile)
	// TransitMount is the Transit engine's mount (default "transit").
	TransitMount string
	Timeout      time.Duration // per call (default 30 s)
}

// DefaultTransitMount is where the Transit engine is mounted unless configured.
const DefaultTransitMount = "transit"

func (c TransitConfig) withDefaults() TransitConfig {
	if c.AuthPath == "" {
		c.AuthPath = DefaultAuthPath
	}
	if c.JWTFile == "" {
		c.JWTFile = DefaultJWTFile
	}
	if c.TransitMount == "" {
		c.TransitMount = DefaultTransitMount
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	c.TransitMount = strings.Trim(c.TransitMount, "/")
	c.AuthPath = strings.Trim(c.AuthPath, "/")
	return c
}

// Validate checks the settings without any I/O.
func (c TransitConfig) Validate() error {
	var errs []error
	if !strings.HasPrefix(c.Addr, "http://") && !strings.HasPrefix(c.Addr, "https://") {
		errs = append(errs, errors.New("--vault-addr must be an http:// or https:// URL"))
	}
	if (c.Role == "") == (c.TokenFile == "") {
		errs = append(errs, errors.New("exactly one of --vault-role (Kubernetes auth) and --vault-token-file (token auth) is needed for Vault"))
	}
	return errors.Join(errs...)
}

// Transit is a logged-in client of the Transit engine. A call refused with 403 (the token
// expired or was rotated) logs in again once.
type Transit struct {
	cfg    TransitConfig
	mu     sync.Mutex
	client *vault.Client
}

// NewTransit logs in to Vault.
func NewTransit(ctx context.Context, cfg TransitConfig) (*Transit, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &Transit{cfg: cfg}
	if err := v.login(ctx); err != nil {
		return nil, err
	}
	return v, nil
}

func (v *Transit) String() string {
	return fmt.Sprintf("vault %s %s/", v.cfg.Addr, v.cfg.TransitMount)
}

func (v *Transit) login(ctx context.Context) error {
	cfg := vault.DefaultConfig() // honours VAULT_CACERT and friends for TLS
	if cfg.Error != nil {
		return fmt.Errorf("%s: client config: %w", v, cfg.Error)
	}
	cfg.Address = v.cfg.Addr
	cfg.Timeout = v.cfg.Timeout
	client, err := vault.NewClient(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", v, err)
	}
	client.ClearToken() // never an ambient VAULT_TOKEN
	if v.cfg.Role == "" {
		b, err := os.ReadFile(v.cfg.TokenFile)
		if err != nil {
			return fmt.Errorf("%s: --vault-token-file: %w", v, err)
		}
		tok := strings.TrimSpace(string(b))
		clear(b)
		if tok == "" {
			return fmt.Errorf("%s: token file %s is empty", v, v.cfg.TokenFile)
		}
		client.SetToken(tok)
	} else {
		jwt, err := os.ReadFile(v.cfg.JWTFile)
		if err != nil {
			return fmt.Errorf("%s: service account token for kubernetes auth: %w", v, err)
		}
		auth, err := k8sauth.NewKubernetesAuth(v.cfg.Role, k8sauth.WithMountPath(v.cfg.AuthPath),
			k8sauth.WithServiceAccountToken(strings.TrimSpace(string(jwt))))
		if err != nil {
			return fmt.Errorf("%s: kubernetes auth: %w", v, err)
		}
		lctx, cancel := context.WithTimeout(ctx, v.cfg.Timeout)
		secret, err := auth.Login(lctx, client)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: kubernetes auth login (role %q, auth/%s): %w", v, v.cfg.Role, v.cfg.AuthPath, err)
		}
		if secret == nil || secret.Auth == nil || secret.Auth.ClientToken == "" {
			return fmt.Errorf("%s: kubernetes auth login (role %q) returned no token", v, v.cfg.Role)
		}
		client.SetToken(secret.Auth.ClientToken)
	}
	v.mu.Lock()
	v.client = client
	v.mu.Unlock()
	return nil
}

// call runs f with the client, logging in again once if Vault answers 403.
func (v *Transit) call(ctx context.Context, f func(ctx context.Context, c *vault.Client) (*vault.Secret, error)) (*vault.Secret, error) {
	for attempt := 0; ; attempt++ {
		v.mu.Lock()
		c := v.client
		v.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, v.cfg.Timeout)
		s, err := f(cctx, c)
		cancel()
		var re *vault.ResponseError
		if err != nil && attempt == 0 && errors.As(err, &re) && re.StatusCode == http.StatusForbidden {
			if lerr := v.login(ctx); lerr != nil {
				return nil, errors.Join(err, lerr)
			}
			continue
		}
		return s, err
	}
}

// Write writes path under the Transit mount (encrypt/<key>, datakey/…, sign/<key>); an answer
// without data is an error.
func (v *Transit) Write(ctx context.Context, path string, data map[string]any) (*vault.Secret, error) {
	full := v.cfg.TransitMount + "/" + path
	s, err := v.call(ctx, func(ctx context.Context, c *vault.Client) (*vault.Secret, error) {
		return c.Logical().WriteWithContext(ctx, full, data)
	})
	if err != nil {
		return nil, fmt.Errorf("vault %s %s: %w", v.cfg.Addr, full, err)
	}
	if s == nil || s.Data == nil {
		return nil, fmt.Errorf("vault %s %s: empty answer", v.cfg.Addr, full)
	}
	return s, nil
}

// Read reads path under the Transit mount (keys/<key>); no data is "not found".
func (v *Transit) Read(ctx context.Context, path string) (*vault.Secret, error) {
	full := v.cfg.TransitMount + "/" + path
	s, err := v.call(ctx, func(ctx context.Context, c *vault.Client) (*vault.Secret, error) {
		return c.Logical().ReadWithContext(ctx, full)
	})
	if err != nil {
		return nil, fmt.Errorf("vault %s %s: %w", v.cfg.Addr, full, err)
	}
	if s == nil || s.Data == nil {
		return nil, fmt.Errorf("vault %s %s: not found", v.cfg.Addr, full)
	}
	return s, nil
}

// Ping is a readiness check: Vault answers, is initialised and unsealed.
func (v *Transit) Ping(ctx context.Context) error {
	v.mu.Lock()
	c := v.client
	v.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, v.cfg.Timeout)
	defer cancel()
	h, err := c.Sys().HealthWithContext(cctx)
	if err != nil {
		return fmt.Errorf("vault %s: %w", v.cfg.Addr, err)
	}
	if !h.Initialized || h.Sealed {
		return fmt.Errorf("vault %s: initialized=%v sealed=%v", v.cfg.Addr, h.Initialized, h.Sealed)
	}
	return nil
}
