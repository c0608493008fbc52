package main

import (
	"context"
	"fmt"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/keys"
	pdaroles "github.com/obscura-iot/obscura/services/pkg/pda/roles"
)

// keyLoadTimeout bounds loading the key bundle at start (a Vault login and one read).
const keyLoadTimeout = time.Minute

// bindKeys binds --keys (env OBSCURA_KEYS, the bundle file) and the --vault-* flags (env
// OBSCURA_VAULT_*, as for the Mohito roles): the bundle comes from exactly one of them.
func bindKeys(f *envflag.Set, src *keys.Source, defaultFile, what string) {
	src.BindAs(f, "keys", defaultFile, what+", read once at start; or use --vault-* (the bundle is the Vault field's string)")
}

// loadBundle reads the bundle once; any failure is a configuration error (exit status 2).
// Messages name the source, never the content.
func loadBundle(src *keys.Source) ([]byte, error) {
	if err := src.Validate(); err != nil {
		return nil, configErr(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), keyLoadTimeout)
	defer cancel()
	b, err := src.LoadBytes(ctx)
	if err != nil {
		return nil, configErr(err)
	}
	return b, nil
}

// loadProxySecrets loads s, a_PRX, K_dedup and K_mix from the configured source.
func loadProxySecrets(src *keys.Source) (*pdaroles.ProxySecrets, error) {
	b, err := loadBundle(src)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	sec, _, err := pdaroles.ParseProxySecrets(b)
	if err != nil {
		return nil, configErr(fmt.Errorf("%s: %w", src, err))
	}
	return sec, nil
}

// loadDBSecrets loads a_DB from the configured source.
func loadDBSecrets(src *keys.Source) (*pdaroles.DBSecrets, error) {
	b, err := loadBundle(src)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	sec, _, err := pdaroles.ParseDBSecrets(b)
	if err != nil {
		return nil, configErr(fmt.Errorf("%s: %w", src, err))
	}
	return sec, nil
}
