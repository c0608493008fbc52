package sim

import (
	crand "crypto/rand"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
	"github.com/obscura-iot/obscura/services/pkg/pda/roles"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestSealAccounting is T-DIST-5: the DB evaluates f for a window only when the items it
// ingested equal Seal.total. On real NATS accounts and Redis servers, with the mixer
// stopped so the proxy domain's messages are published by hand in an adversarial order:
//   - window w: the Seal (total 4, chunks c1 and c2) arrives first, then c1. Once the
//     front-end has routed c1 and re-examined the Seal after it (the KV revision of
//     "<w>.seal" passes that of "<w>.batch.c1" twice), no shard has an Eval, no reveal
//     request exists and there is no result. After c2: the result, with the key counted
//     by its 3 participants, and the Evals' entries add up to the Seal's 4.
//   - window w+1: both chunks (4 items) with a Seal claiming 5. The front-end re-examines
//     it again and again (logging the mismatch) and never sends an Eval: no result.
func TestSealAccounting(t *testing.T) {
	e := newEnv(t, envOpts{tau: 3})
	e.stopProxy() // no mixer: chunks and seals are published below
	ctx := e.ctx
	dbw, err := e.local.DBJS.KeyValue(ctx, contract.DBWindowsBucket)
	if err != nil {
		t.Fatal(err)
	}
	results, err := e.local.DBJS.KeyValue(ctx, contract.ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	// items returns the BlindedItems of three participants reporting 10.9.9.9 and one of
	// them also 10.9.9.8, for window w, as the proxy would forward them.
	items := func(w uint64) [][]byte {
		suite, err := e.job.Suite(w)
		if err != nil {
			t.Fatal(err)
		}
		proxy, err := pda.NewProxy(suite, e.local.Proxy.Keys, crand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		for i, who := range []string{"p0", "p1", "p2"} {
			obs := []pda.Observation{ip(t, "10.9.9.9")}
			if i == 0 {
				obs = append(obs, ip(t, "10.9.9.8"))
			}
			var id pda.SessionID
			crand.Read(id[:])
			sess := proxy.OpenSession([]byte(who), id)
			var sub [][]byte
			for j, o := range obs {
				b, err := pda.NewParticipant(suite, crand.Reader).Item(id, uint32(j), o)
				if err != nil {
					t.Fatal(err)
				}
				sub = append(sub, b)
			}
			fwd, rej := proxy.Ingest(sess, sub)
			if len(rej) != 0 {
				t.Fatalf("rejected: %v", rej[0].Err)
			}
			out = append(out, fwd...)
		}
		return out
	}
	publish := func(w uint64, kind, id string, data []byte) {
		t.Helper()
		hdr := nats.Header{}
		hdr.Set(contract.HdrKind, kind)
		if kind == contract.KindChunk {
			hdr.Set(contract.HdrBatch, id)
		}
		if err := natsx.Publish(ctx, e.local.ProxyJS, contract.IngestSubject(w), id, data, hdr); err != nil {
			t.Fatal(err)
		}
	}
	seal := func(w uint64, total int, batches ...string) {
		b, _ := json.Marshal(roles.Seal{Window: w, Total: total, Batches: batches})
		publish(w, contract.KindSeal, "seal-"+strconv.FormatUint(w, 10)+"-"+strconv.Itoa(total), b)
	}
	rev := func(w uint64, k string) uint64 {
		en, err := dbw.Get(ctx, strconv.FormatUint(w, 10)+"."+k)
		if err != nil {
			return 0
		}
		return en.Revision()
	}
	// reexamined waits until the front-end has put the window's Seal twice after the
	// batch records of the given chunks.
	reexamined := func(w uint64, chunks ...string) {
		t.Helper()
		var after uint64
		testenv.Eventually(t, 30*time.Second, "chunks routed", func() error {
			after = 0
			for _, c := range chunks {
				r := rev(w, "batch."+c)
				if r == 0 {
					return jetstream.ErrKeyNotFound
				}
				after = max(after, r)
			}
			return nil
		})
		for range 2 {
			testenv.Eventually(t, 30*time.Second, "seal re-examined", func() error {
				if r := rev(w, "seal"); r <= after {
					return jetstream.ErrKeyNotFound
				}
				return nil
			})
			after = rev(w, "seal")
		}
	}
	// evals returns the Eval per shard of window w (a re-examined Seal may publish an Eval
	// again; JetStream de-duplicates it by message id, the capture sees both).
	evals := func(w uint64) (n, entries int) {
		per := map[string]int{}
		for _, m := range e.dbCap.snapshot() {
			if m.header.Get(contract.HdrKind) == contract.KindEval && strings.HasSuffix(m.subject, "."+strconv.FormatUint(w, 10)) {
				var ev roles.Eval
				if err := json.Unmarshal(m.data, &ev); err != nil {
					t.Fatal(err)
				}
				if c, ok := per[m.subject]; ok && c != ev.Entries {
					t.Fatalf("%s: two Evals with %d and %d entries", m.subject, c, ev.Entries)
				}
				per[m.subject] = ev.Entries
			}
		}
		for _, c := range per {
			entries += c
		}
		return len(per), entries
	}
	nothingEvaluated := func(w uint64) {
		t.Helper()
		if n, _ := evals(w); n != 0 {
			t.Fatalf("window %d: %d Evals before the ingested items matched the Seal", w, n)
		}
		req := contract.RevealReqSubject(w)
		if slices.ContainsFunc(e.proxyCap.snapshot(), func(m captured) bool { return m.subject == req }) {
			t.Fatalf("window %d: reveal request before the Seal's items were all ingested", w)
		}
		if _, err := results.Get(ctx, strconv.FormatUint(w, 10)); err == nil {
			t.Fatalf("window %d: a result before the Seal's items were all ingested", w)
		}
	}

	w := e.window()
	it := items(w)
	seal(w, len(it), "c1", "c2")
	publish(w, contract.KindChunk, "c1", slices.Concat(it[:2]...))
	reexamined(w, "c1")
	nothingEvaluated(w)
	publish(w, contract.KindChunk, "c2", slices.Concat(it[2:]...))
	wantRevealed(t, e.waitResult(w), map[string]int{"10.9.9.9": 3})
	if n, entries := evals(w); n != 2 || entries != len(it) {
		t.Fatalf("window %d: %d Evals over %d entries, want one per shard (2) over %d", w, n, entries, len(it))
	}

	w2 := w + 1
	it2 := items(w2)
	publish(w2, contract.KindChunk, "d1", slices.Concat(it2[:2]...))
	publish(w2, contract.KindChunk, "d2", slices.Concat(it2[2:]...))
	seal(w2, len(it2)+1, "d1", "d2")
	reexamined(w2, "d1", "d2")
	nothingEvaluated(w2)
	if !strings.Contains(string(e.logs.Bytes()), "seal accounting mismatch") {
		t.Fatal("the mismatch is not logged")
	}
}
