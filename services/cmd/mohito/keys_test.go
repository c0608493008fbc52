package main

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goldenDeployment = "../../pkg/mohito/roles/testdata/deployment.json"

func TestKeySourceExactlyOne(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "sk")
	k := make([]byte, 32)
	k[0] = 1
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(k)), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--deployment", goldenDeployment}
	// File source (hex accepted).
	cfg, err := parseRole("decrypt-worker", append(base, "--key-file", keyFile))
	if err != nil || cfg.(*DecryptWorkerConfig).Key.ring == nil {
		t.Fatalf("decrypt-worker with --key-file: %v", err)
	}
	// Both sources: a configuration error (exit 2).
	_, err = parseRole("shuffler", append(base, "--vendor", "0", "--key-file", keyFile,
		"--vault-addr", "http://127.0.0.1:1", "--vault-path", "acme/shuffler"))
	if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("both sources: %v, want a configuration error", err)
	}
	// Incomplete Vault settings are reported without contacting Vault.
	_, err = parseRole("coordinator", append(base, "--redis-addr", "127.0.0.1:1", "--vault-role", "r"))
	if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), "--vault-addr") {
		t.Fatalf("vault without address: %v", err)
	}
}
