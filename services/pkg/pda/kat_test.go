package pda

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"testing"
)

var updateKAT = flag.Bool("update-kat", false, "rewrite testdata/kat.json")

// TestKnownAnswers pins our formats: with deterministic randomness, the SHA-256 of every
// message of one aggregation (params, submission, blinded item, entry, reveal request and
// response) and the full first submission must not change. A change here is a wire-format
// change and needs a format version bump. Regenerate with -update-kat.
func TestKnownAnswers(t *testing.T) {
	got := map[string]map[string]string{}
	for _, tc := range []struct {
		name string
		o    deployOpts
	}{
		{"ristretto255-distinct-count", deployOpts{group: Ristretto255, tau: 2, seed: 50}},
		{"ristretto255-tuples-values", deployOpts{group: Ristretto255, mode: CountTuples, tau: 2, values: []uint16{1, 5}, seed: 51}},
		{"p256-distinct-count", deployOpts{group: P256, tau: 2, seed: 52}},
	} {
		d := newDeployment(t, tc.o)
		m := map[string]string{}
		h := func(name string, b []byte) { s := sha256.Sum256(b); m[name] = hex.EncodeToString(s[:]) }
		pp := d.suite.Params()
		ppb, _ := pp.MarshalBinary()
		h("params", ppb)
		k := ipKey(t, "192.0.2.10")
		var id SessionID
		id[0] = 7
		sub, err := NewParticipant(d.suite, d.rnd).Item(id, 0, Observation{k, 5})
		if err != nil && tc.o.values == nil {
			sub, err = NewParticipant(d.suite, d.rnd).Item(id, 0, Observation{k, 1})
		}
		if err != nil {
			t.Fatal(err)
		}
		m["submission"] = hex.EncodeToString(sub)
		sess := d.proxy.OpenSession([]byte("alice"), id)
		d.ingest(sess, [][]byte{sub})
		d.submit("bob", []Observation{{k, 5}})
		h("blinded_item", d.pool[0])
		e, err := d.db.Open(d.pool[0], 9)
		if err != nil {
			t.Fatal(err)
		}
		enc, _ := d.suite.MarshalEntry(e)
		h("entry", enc)
		d.flush()
		reqs, _ := d.table.RevealRequests()
		if len(reqs) != 1 {
			t.Fatalf("%s: %d requests", tc.name, len(reqs))
		}
		h("reveal_request", reqs[0])
		resp, _, _ := d.oracle.Answer(reqs[0])
		h("reveal_response", resp)
		got[tc.name] = m
	}
	if *updateKAT {
		b, _ := json.MarshalIndent(got, "", " ")
		if err := os.WriteFile("testdata/kat.json", append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	var want map[string]map[string]string
	readJSON(t, "kat.json", &want)
	for name, m := range want {
		for field, v := range m {
			if got[name][field] != v {
				t.Errorf("%s/%s changed:\n got %s\nwant %s", name, field, got[name][field], v)
			}
		}
	}
	if len(want) != len(got) {
		t.Errorf("kat.json has %d cases, want %d", len(want), len(got))
	}
}
