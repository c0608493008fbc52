package roles

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/pda"
)

// TestParseSecretsRoundTrip: a bundle parsed from bytes (as read from Vault) or loaded from a
// file re-encodes to the same document, and a malformed bundle is refused without being quoted.
func TestParseSecretsRoundTrip(t *testing.T) {
	for _, id := range []pda.GroupID{pda.Ristretto255, pda.P256} {
		g, err := pda.NewGroup(id)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := GenerateProxySecrets(g)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := MarshalProxySecrets(g, ps)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := GenerateDBSecrets(g)
		if err != nil {
			t.Fatal(err)
		}
		db, err := MarshalDBSecrets(g, ds)
		if err != nil {
			t.Fatal(err)
		}
		p2, g2, err := ParseProxySecrets(bytes.Clone(pb))
		if err != nil || g2.ID() != id {
			t.Fatalf("%v: ParseProxySecrets: %v", id, err)
		}
		if again, _ := MarshalProxySecrets(g2, p2); !bytes.Equal(again, pb) {
			t.Fatalf("%v: proxy bundle does not round-trip", id)
		}
		d2, g3, err := ParseDBSecrets(bytes.Clone(db))
		if err != nil || g3.ID() != id {
			t.Fatalf("%v: ParseDBSecrets: %v", id, err)
		}
		if again, _ := MarshalDBSecrets(g3, d2); !bytes.Equal(again, db) {
			t.Fatalf("%v: DB bundle does not round-trip", id)
		}
		path := filepath.Join(t.TempDir(), "proxy.json")
		if err := os.WriteFile(path, pb, 0o600); err != nil {
			t.Fatal(err)
		}
		if p3, _, err := LoadProxySecrets(path); err != nil || p3.Mix != ps.Mix {
			t.Fatalf("%v: LoadProxySecrets: %v", id, err)
		}
	}
	for name, b := range map[string][]byte{
		"not json":        []byte("canary-secret-material"),
		"proxy as DB":     []byte(`{"group":1,"db_sk":"zz-canary"}`),
		"truncated mix":   []byte(`{"group":1,"oprf_s":"00","prx_sk":"00","dedup_key":"00","mix_key":"0a"}`),
		"unknown group":   []byte(`{"group":99,"db_sk":"00"}`),
		"empty":           nil,
		"canary in value": []byte(`{"group":1,"oprf_s":"canary","prx_sk":"","dedup_key":"","mix_key":""}`),
	} {
		_, _, perr := ParseProxySecrets(b)
		_, _, derr := ParseDBSecrets(b)
		if perr == nil && name != "proxy as DB" {
			t.Errorf("%s: ParseProxySecrets accepted it", name)
		}
		if derr == nil && name != "truncated mix" && name != "canary in value" {
			t.Errorf("%s: ParseDBSecrets accepted it", name)
		}
		for _, err := range []error{perr, derr} {
			if err != nil && strings.Contains(err.Error(), "canary") {
				t.Errorf("%s: error quotes the bundle: %v", name, err)
			}
		}
	}
}
