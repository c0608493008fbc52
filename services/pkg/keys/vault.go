package keys

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	vault "github.com/hashicorp/vault/api"
	k8sauth "github.com/hashicorp/vault/api/auth/kubernetes"
)

// read logs in (Kubernetes auth with Role, else Token) and reads the field once.
func (v *Vault) read(ctx context.Context) ([]byte, error) {
	c := v.withDefaults()
	where := c.String()
	cfg := vault.DefaultConfig() // honours VAULT_CACERT, VAULT_CLIENT_CERT, … for TLS
	if cfg.Error != nil {
		return nil, fmt.Errorf("%s: client config: %w", where, cfg.Error)
	}
	cfg.Address = c.Addr
	cfg.Timeout = c.Timeout
	client, err := vault.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if c.Role != "" {
		client.ClearToken() // never fall back to an ambient VAULT_TOKEN
		jwt, err := os.ReadFile(c.JWTFile)
		if err != nil {
			return nil, fmt.Errorf("%s: service account token for kubernetes auth (--vault-jwt-file): %w", where, err)
		}
		tok := strings.TrimSpace(string(jwt))
		if tok == "" {
			return nil, fmt.Errorf("%s: service account token file %s is empty", where, c.JWTFile)
		}
		auth, err := k8sauth.NewKubernetesAuth(c.Role, k8sauth.WithMountPath(c.AuthPath), k8sauth.WithServiceAccountToken(tok))
		if err != nil {
			return nil, fmt.Errorf("%s: kubernetes auth: %w", where, err)
		}
		lctx, cancel := context.WithTimeout(ctx, c.Timeout)
		secret, err := auth.Login(lctx, client)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: kubernetes auth login (role %q, auth/%s): %w", where, c.Role, c.AuthPath, err)
		}
		if secret == nil || secret.Auth == nil || secret.Auth.ClientToken == "" {
			return nil, fmt.Errorf("%s: kubernetes auth login (role %q) returned no token", where, c.Role)
		}
		client.SetToken(secret.Auth.ClientToken)
		// The token is only needed for the one read below.
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Timeout)
			_ = client.Auth().Token().RevokeSelfWithContext(rctx, "")
			cancel()
		}()
	} else {
		client.SetToken(c.Token)
	}
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	secret, err := client.KVv2(c.Mount).Get(rctx, c.Path)
	if err != nil {
		if errors.Is(err, vault.ErrSecretNotFound) {
			return nil, fmt.Errorf("%s: secret not found", where)
		}
		return nil, fmt.Errorf("%s: read: %w", where, err)
	}
	raw, ok := secret.Data[c.Field]
	if !ok || raw == nil {
		return nil, fmt.Errorf("%s: the secret has no field %q", where, c.Field)
	}
	s, ok := raw.(string)
	if !ok {
		return nil, fmt.Errorf("%s: field %q is a %T, not a string", where, c.Field, raw)
	}
	return []byte(s), nil
}
