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
	client, done, err := c.login(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return c.get(ctx, client, c.Path)
}

// readRing logs in once, lists the folder Path (which ends in '/') and reads
// the field of every epoch-<n> secret in it.
func (v *Vault) readRing(ctx context.Context) ([]Epoch, error) {
	c := v.withDefaults()
	client, done, err := c.login(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	lctx, cancel := context.WithTimeout(ctx, c.Timeout)
	list, err := client.Logical().ListWithContext(lctx, c.Mount+"/metadata/"+c.Path)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%s: list: %w", c, err)
	}
	var names []string
	if list != nil {
		if ks, ok := list.Data["keys"].([]any); ok {
			for _, k := range ks {
				if n, ok := k.(string); ok {
					names = append(names, n)
				}
			}
		}
	}
	var out []Epoch
	for _, n := range names {
		e, ok := parseEpochName(n)
		if !ok {
			continue
		}
		b, err := c.get(ctx, client, c.Path+n)
		if err != nil {
			clearEpochs(out)
			return nil, err
		}
		k, err := Decode(b)
		clear(b)
		if err != nil {
			clearEpochs(out)
			return nil, fmt.Errorf("%s epoch %d: %w", c, e, err)
		}
		out = append(out, Epoch{N: e, Key: k})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no epoch-<n> secret in the folder", c)
	}
	return sortEpochs(out), nil
}

// login returns a client with a token: Kubernetes auth with Role (the
// token is revoked by done), else Token.
func (c Vault) login(ctx context.Context) (*vault.Client, func(), error) {
	where := c.String()
	cfg := vault.DefaultConfig() // honours VAULT_CACERT, VAULT_CLIENT_CERT, … for TLS
	if cfg.Error != nil {
		return nil, nil, fmt.Errorf("%s: client config: %w", where, cfg.Error)
	}
	cfg.Address = c.Addr
	cfg.Timeout = c.Timeout
	client, err := vault.NewClient(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	if c.Role == "" {
		token := c.Token
		if token == "" {
			b, err := os.ReadFile(c.TokenFile)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: Vault token (--vault-token-file): %w", where, err)
			}
			if token = strings.TrimSpace(string(b)); token == "" {
				return nil, nil, fmt.Errorf("%s: Vault token file %s is empty", where, c.TokenFile)
			}
		}
		client.SetToken(token)
		return client, func() {}, nil
	}
	client.ClearToken() // never fall back to an ambient VAULT_TOKEN
	jwt, err := os.ReadFile(c.JWTFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: service account token for kubernetes auth (--vault-jwt-file): %w", where, err)
	}
	tok := strings.TrimSpace(string(jwt))
	if tok == "" {
		return nil, nil, fmt.Errorf("%s: service account token file %s is empty", where, c.JWTFile)
	}
	auth, err := k8sauth.NewKubernetesAuth(c.Role, k8sauth.WithMountPath(c.AuthPath), k8sauth.WithServiceAccountToken(tok))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: kubernetes auth: %w", where, err)
	}
	lctx, cancel := context.WithTimeout(ctx, c.Timeout)
	secret, err := auth.Login(lctx, client)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: kubernetes auth login (role %q, auth/%s): %w", where, c.Role, c.AuthPath, err)
	}
	if secret == nil || secret.Auth == nil || secret.Auth.ClientToken == "" {
		return nil, nil, fmt.Errorf("%s: kubernetes auth login (role %q) returned no token", where, c.Role)
	}
	client.SetToken(secret.Auth.ClientToken)
	// The token is only needed for the reads that follow.
	return client, func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Timeout)
		_ = client.Auth().Token().RevokeSelfWithContext(rctx, "")
		cancel()
	}, nil
}

// get reads the field of the secret at path.
func (c Vault) get(ctx context.Context, client *vault.Client, path string) ([]byte, error) {
	at := c
	at.Path = path
	where := at.String()
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	secret, err := client.KVv2(c.Mount).Get(rctx, path)
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
	str, ok := raw.(string)
	if !ok {
		return nil, fmt.Errorf("%s: field %q is a %T, not a string", where, c.Field, raw)
	}
	return []byte(str), nil
}
