package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/client"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
	"github.com/obscura-iot/obscura/services/pkg/pda/roles"
)

func revealedMap(r contract.WindowResult) map[string]int {
	m := map[string]int{}
	for _, k := range r.Revealed {
		m[k.Key] = k.Count
	}
	return m
}

func wantRevealed(t *testing.T, got contract.WindowResult, want map[string]int) {
	t.Helper()
	g := revealedMap(got)
	if fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("revealed %v, want %v", g, want)
	}
}

// TestThresholdAndTranscripts covers T-FUN-1/2/5, T-MAL-7 and the transcript invariants
// T-PRIV-1/2/4/5/6/11/13 with canary keys, on real NATS accounts and real Redis servers.
func TestThresholdAndTranscripts(t *testing.T) {
	e := newEnv(t, envOpts{tau: 3})
	w := e.window()
	p := e.people
	// 10.0.0.1 by 3 participants, 10.0.0.2 by all 6, 10.0.0.3 by 2 (below τ).
	for i, who := range p {
		obs := []pda.Observation{ip(t, "10.0.0.2")}
		if i < 3 {
			obs = append(obs, ip(t, "10.0.0.1"))
		}
		if i < 2 {
			obs = append(obs, ip(t, "10.0.0.3"))
		}
		e.submit(who, obs...)
	}
	// Forced reveal by repetition: one participant submits 10.0.0.4 in three sessions,
	// another once: 2 distinct participants, below τ (T-MAL-7, T-FUN-5).
	for range 3 {
		e.submit(p[3], ip(t, "10.0.0.4"))
	}
	e.submit(p[4], ip(t, "10.0.0.4"))
	// Canaries: random opaque keys below τ.
	var canaries [][]byte
	var canaryKeys []pda.Key
	for i := range 4 {
		o, b := canary(t)
		canaries, canaryKeys = append(canaries, b), append(canaryKeys, o.Key)
		e.submit(p[i], o)
		e.submit(p[i+1], o)
	}
	res := e.sealAndWait(w)
	wantRevealed(t, res, map[string]int{"10.0.0.1": 3, "10.0.0.2": 6})

	// Transcript checks.
	suite, _ := e.job.Suite(w)
	g := suite.Group()
	enc := func(el pda.Element) []byte { b, _ := g.AppendElement(nil, el); return b }
	proxyView := append(e.proxyCap.blobs(), redisDump(t, e.proxyRedis.Client())...)
	var dbView [][]byte
	dbView = append(dbView, e.dbCap.blobs()...)
	for _, r := range e.shardRedis {
		dbView = append(dbView, redisDump(t, r.Client())...)
	}
	logs := e.logs.Bytes()
	for i, k := range canaryKeys {
		h2g := suite.HashKey(k)
		y := enc(g.NewElement().Mul(h2g, e.local.Proxy.Keys.OPRF))
		for _, needle := range [][]byte{canaries[i], []byte(hex.EncodeToString(canaries[i])), enc(h2g), y} {
			if containsAny(proxyView, needle) {
				t.Fatalf("proxy domain saw canary %d material %x (T-PRIV-1)", i, needle)
			}
			if strings.Contains(string(logs), string(needle)) {
				t.Fatalf("logs contain canary %d material (T-PRIV-11)", i)
			}
		}
		for _, needle := range [][]byte{canaries[i], []byte(hex.EncodeToString(canaries[i])), enc(h2g)} {
			if containsAny(dbView, needle) {
				t.Fatalf("DB domain saw canary %d plaintext or H2G (T-PRIV-2)", i)
			}
		}
	}
	// No participant identity, pseudonym or session id in the DB domain (T-PRIV-4).
	var sessions []string
	for _, b := range redisDump(t, e.proxyRedis.Client()) {
		if s, ok := strings.CutPrefix(string(b), "pda:sess:"); ok && len(s) == 32 {
			sessions = append(sessions, s)
		}
	}
	if len(sessions) == 0 {
		t.Fatal("no sessions in the proxy's replay cache")
	}
	for _, who := range p {
		for _, needle := range []string{who, e.local.Proxy.Pseudonym(who)} {
			if containsAny(dbView, []byte(needle)) {
				t.Fatalf("DB domain saw participant identity material %q (T-PRIV-4)", needle)
			}
		}
	}
	for _, sid := range sessions {
		raw, _ := hex.DecodeString(sid)
		if containsAny(dbView, []byte(sid)) || containsAny(dbView, raw) {
			t.Fatal("DB domain saw a session id (T-PRIV-4)")
		}
	}
	for _, m := range e.dbCap.snapshot() {
		if m.header.Get(contract.HdrPid) != "" {
			t.Fatalf("pid header crossed into the DB domain on %s", m.subject)
		}
	}
	// Re-randomisation and unlinkable reveal requests (T-PRIV-5, -6, -13): no element of
	// a participant submission reaches the DB; no element of a forwarded item, entry id,
	// tag or batch id reaches the oracle.
	var forwarded, requests, pool [][]byte
	var batchIDs []string
	size := suite.BlindedItemSize()
	for _, m := range e.dbCap.snapshot() {
		if strings.HasPrefix(m.subject, "pda.v1.ingest.") && m.header.Get(contract.HdrKind) == contract.KindChunk {
			batchIDs = append(batchIDs, m.header.Get(contract.HdrBatch))
			for i := 0; i+size <= len(m.data); i += size {
				forwarded = append(forwarded, m.data[i:i+size])
			}
		}
	}
	for _, m := range e.proxyCap.snapshot() {
		switch {
		case strings.HasPrefix(m.subject, "pda.v1.reveal.req."):
			// A pending request may be re-published (identical bytes) until answered.
			if !slices.ContainsFunc(requests, func(r []byte) bool { return string(r) == string(m.data) }) {
				requests = append(requests, m.data)
			}
		case strings.HasPrefix(m.subject, "pda.v1.pool."):
			pool = append(pool, m.data)
		}
	}
	if len(forwarded) == 0 || len(requests) != 2 {
		t.Fatalf("forwarded %d items, %d reveal requests; want > 0 and 2", len(forwarded), len(requests))
	}
	es := g.ElementSize()
	for _, it := range forwarded {
		id := sha256.Sum256(it)
		if containsAny(requests, id[:]) {
			t.Fatal("a reveal request carries an entry id (T-PRIV-13)")
		}
		for off := 12; off+es <= len(it); off += es {
			if containsAny(requests, it[off:off+es]) {
				t.Fatal("a reveal request carries a forwarded ciphertext component (T-PRIV-6)")
			}
		}
	}
	for _, b := range batchIDs {
		if containsAny(requests, []byte(b)) {
			t.Fatal("a reveal request carries a batch id")
		}
	}
	// The tags Z live in the shards' Redis as entry keys; none reaches the oracle.
	for _, r := range e.shardRedis {
		for _, b := range redisDump(t, r.Client()) {
			if len(b) == es && containsAny(requests, b) && !isRevealedY(requests, b) {
				t.Fatal("a reveal request carries a shard-side value other than Y")
			}
		}
	}
	if len(pool) == 0 {
		t.Fatal("no pool traffic captured")
	}
	if e.local.M == nil {
		t.Fatal("metrics missing")
	}
}

// isRevealedY reports whether b is the Y field (offset 27) of some request.
func isRevealedY(reqs [][]byte, b []byte) bool {
	for _, r := range reqs {
		if len(r) >= 27+len(b) && string(r[27:27+len(b)]) == string(b) {
			return true
		}
	}
	return false
}

// TestMaliciousParticipants covers T-MAL-3/5/6/8/10, unknown identities and
// out-of-domain values.
func TestMaliciousParticipants(t *testing.T) {
	e := newEnv(t, envOpts{tau: 2, values: []uint16{1, 2, 3, 4}, quota: 6, people: 3, shards: []string{"a"}})
	w := e.window()
	p := e.people
	c := e.client(p[0])
	sid, suite, _, err := c.Session(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	part := pda.NewParticipant(suite, nil)
	good, err := part.Item(sid, 0, pda.Observation{Key: ip(t, "192.0.2.1").Key, Value: 3})
	if err != nil {
		t.Fatal(err)
	}
	badProof := slices.Clone(good)
	badProof[len(badProof)-1] ^= 1
	badProof[4+3] = 1 // index 1
	garbage := slices.Clone(good)
	for i := 8; i < 40; i++ {
		garbage[i] = 0xff
	}
	garbage[4+3] = 2
	rep, err := c.SendItems(e.ctx, sid, w, [][]byte{good, badProof, garbage}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Accepted != 1 || rep.Rejected[contract.ReasonBadProof] != 1 || rep.Rejected[contract.ReasonInvalid]+rep.Rejected[contract.ReasonMalformed] != 1 {
		t.Fatalf("good+bad proof+garbage: %+v", rep)
	}
	// Replay in the same session (REPLAY) and in another session (proof bound to the
	// session: BAD_PROOF), also by another participant.
	rep, _ = c.SendItems(e.ctx, sid, w, [][]byte{good}, nil)
	if rep.Rejected[contract.ReasonReplay] != 1 {
		t.Fatalf("same-session replay: %+v", rep)
	}
	for _, who := range []string{p[0], p[1]} {
		c2 := e.client(who)
		sid2, _, _, err := c2.Session(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		rep, _ = c2.SendItems(e.ctx, sid2, w, [][]byte{good}, nil)
		if rep.Rejected[contract.ReasonBadProof] != 1 {
			t.Fatalf("cross-session replay by %s: %+v", who, rep)
		}
	}
	// Another participant may not use p0's session id.
	if _, err := e.client(p[1]).SendItems(e.ctx, sid, w, [][]byte{good}, nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("foreign session: %v", err)
	}
	// Out-of-domain value with a forged proof: a participant that pretends D contains 9.
	pp := suite.Params()
	pp.Values = []uint16{1, 2, 3, 4, 9}
	forged, _ := pda.NewSuite(pp)
	sid3, _, _, _ := c.Session(e.ctx)
	bad9, err := pda.NewParticipant(forged, nil).Item(sid3, 0, pda.Observation{Key: ip(t, "192.0.2.9").Key, Value: 9})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad9) == suite.SubmissionSize() {
		t.Fatal("forged item unexpectedly has the deployment's size")
	}
	if _, err := c.SendItems(e.ctx, sid3, w, [][]byte{bad9}, nil); err == nil {
		t.Fatal("out-of-domain item accepted")
	}
	// Unknown certificate CN.
	if _, _, _, err := e.client("mallory").Session(e.ctx); err == nil {
		t.Fatal("unknown participant got a session")
	}
	// Quota: 6 per window; p0 has used 1.
	var obs []pda.Observation
	for i := range 8 {
		obs = append(obs, pda.Observation{Key: ip(t, fmt.Sprintf("198.51.100.%d", i)).Key, Value: 2})
	}
	rep, err = e.client(p[0]).Submit(e.ctx, obs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Accepted != 5 || rep.Rejected[contract.ReasonQuota] != 3 {
		t.Fatalf("quota: %+v", rep)
	}
	// Values: 192.0.2.1 with values 3 (p0) and 4 (p1) → revealed with both.
	rep, err = e.client(p[1]).Submit(e.ctx, []pda.Observation{{Key: ip(t, "192.0.2.1").Key, Value: 4}, {Key: ip(t, "198.51.100.0").Key, Value: 1}}, nil)
	if err != nil || rep.Accepted != 2 {
		t.Fatalf("p1: %+v %v", rep, err)
	}
	res := e.sealAndWait(w)
	wantRevealed(t, res, map[string]int{"192.0.2.1": 2, "198.51.100.0": 2})
	for _, k := range res.Revealed {
		if k.Key == "192.0.2.1" && fmt.Sprint(k.Values) != "[3 4]" {
			t.Fatalf("values %v", k.Values)
		}
	}
	// After the seal the window is closed (T-MAL-10).
	if _, err := e.client(p[2]).Submit(e.ctx, []pda.Observation{{Key: ip(t, "192.0.2.1").Key, Value: 1}}, nil); !errors.Is(err, client.ErrWindowClosed) {
		t.Fatalf("submit after seal: %v", err)
	}
}

// TestKillShardAndProxyMidWindow kills a shard and the proxy (ingress, mixer, oracle)
// mid-window: nothing acknowledged is lost and nothing is counted twice (T-DIST-1).
func TestKillShardAndProxyMidWindow(t *testing.T) {
	e := newEnv(t, envOpts{tau: 2, mode: pda.CountTuples, people: 4})
	w := e.window()
	p := e.people
	want := map[string]int{}
	round := func(tag int) {
		for i, who := range p {
			o := []pda.Observation{ip(t, fmt.Sprintf("10.1.%d.1", tag)), ip(t, fmt.Sprintf("10.2.%d.%d", tag, i))}
			e.submit(who, o...)
		}
		want[fmt.Sprintf("10.1.%d.1", tag)] = len(p)
	}
	round(0)
	if err := e.local.Stop("shard-a"); err != nil {
		t.Fatal(err)
	}
	round(1)
	e.stopProxy()
	_ = e.local.Stop("oracle")
	e.startProxy()
	e.local.StartOracle("oracle")
	round(2)
	// Seal while shard a is down; it catches up from its durable consumer when it returns.
	if err := e.mixer.Seal(e.ctx, w); err != nil {
		t.Fatal(err)
	}
	// Kill the proxy again after the seal, before the reveals (oracle down), and a
	// front-end restart for good measure.
	_ = e.local.Stop("oracle")
	_ = e.local.Stop("frontend")
	if err := e.local.StartFrontend(e.ctx, "frontend", roles.FrontendConfig{Workers: 1}); err != nil {
		t.Fatal(err)
	}
	e.startShard("a")
	e.local.StartOracle("oracle")
	res := e.waitResult(w)
	wantRevealed(t, res, want)
	// A second seal is a no-op.
	if err := e.mixer.Seal(e.ctx, w); err != nil {
		t.Fatal(err)
	}
}

// TestRingChangeMidWindow bumps the ring from 2 to 3 shards mid-window (T-DIST-3): the
// window is routed with the ring current at its seal, every submission is counted once,
// and the new shard owns part of the key space.
func TestRingChangeMidWindow(t *testing.T) {
	e := newEnv(t, envOpts{tau: 2, people: 3})
	w := e.window()
	p := e.people
	want := map[string]int{}
	var first, second []pda.Observation
	// 48 keys: each lands on the new shard with probability ≈ 1/3, so the chance that none
	// does is (2/3)^48 ≈ 4·10⁻⁹ (with 12 keys it was ≈ 1 %, and the test flaked).
	for i := range 48 {
		k := fmt.Sprintf("10.9.0.%d", i)
		want[k] = 2
		if i%2 == 0 {
			first = append(first, ip(t, k))
		} else {
			second = append(second, ip(t, k))
		}
	}
	e.submit(p[0], first...)
	e.submit(p[1], first...)
	e.setRing(2, []string{"a", "b", "c"})
	e.startShard("c")
	e.submit(p[0], second...)
	e.submit(p[2], second...)
	res := e.sealAndWait(w)
	wantRevealed(t, res, want)
	if res.RingVersion != 2 || len(res.Shards) != 3 {
		t.Fatalf("ring %d %v, want version 2 with 3 shards", res.RingVersion, res.Shards)
	}
	if n := e.shardRedis["c"].Client().Exists(e.ctx, roles.WindowKeyPrefix(w)+"applied").Val(); n != 1 {
		t.Fatal("shard c received nothing")
	}
	// The next ring change does not move the sealed window.
	e.setRing(3, []string{"a", "b"})
	dbw, err := e.local.DBJS.KeyValue(e.ctx, contract.DBWindowsBucket)
	if err != nil {
		t.Fatal(err)
	}
	r, err := roles.PinnedRing(e.ctx, dbw, nil, w)
	if err != nil || r.Version() != 2 {
		t.Fatalf("pinned ring %v %v", r, err)
	}
}

// TestShortWindowsSealThemselves runs a job with 2-second windows (the CRD accepts 1 s) on the
// proxy-domain streams the roles create for it: the pool keeps 2×window+grace, less than the
// other streams' 10-minute duplicate window, and the proxy domain must still come up. τ
// participants report a key in one window; the mixer closes and seals that window on its
// own once it has ended, and the key is revealed.
func TestShortWindowsSealThemselves(t *testing.T) {
	e := newEnv(t, envOpts{tau: 3, window: 2 * time.Second})
	const key = "10.7.0.1"
	var w uint64
	for attempt := 1; ; attempt++ {
		w = e.window()
		in := 0 // submissions that landed in w
		for _, who := range e.people[:3] {
			rep, err := e.client(who).Submit(e.ctx, []pda.Observation{ip(t, key)}, nil)
			if errors.Is(err, client.ErrWindowClosed) {
				break // the window ended mid-session; try the next one
			}
			if err != nil || rep.Accepted != 1 {
				t.Fatalf("submit as %s: %v (%+v)", who, err, rep)
			}
			if rep.Window != w {
				break
			}
			in++
		}
		if in == 3 {
			break
		}
		if attempt == 5 {
			t.Fatal("no 2-second window held three submissions in five attempts")
		}
	}
	wantRevealed(t, e.waitResult(w), map[string]int{key: 3})
}
