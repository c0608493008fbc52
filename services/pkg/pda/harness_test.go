package pda

import (
	crand "crypto/rand"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
)

// detRand is a deterministic reader for tests and known-answer vectors.
func detRand(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return rand.NewChaCha8(s)
}

// capture records every byte each trust domain sees, for the transcript tests.
type capture struct {
	proxy [][]byte // participant→proxy submissions, proxy→DB items as produced, reveal requests received, responses sent
	db    [][]byte // proxy→DB items as received, entries, reveal requests sent, responses received
}

type deployment struct {
	t      testing.TB
	suite  *Suite
	keys   *ProxyKeys
	dbKey  *PrivateKey
	proxy  *Proxy
	oracle *Oracle
	db     *DB
	table  *Table
	rnd    *rand.ChaCha8
	pool   [][]byte
	cap    capture
	nSess  int
}

type deployOpts struct {
	group  GroupID
	mode   CountMode
	tau    uint32
	values []uint16
	chunks uint8
	window uint64
	seed   uint64
	circl  bool // ristretto255 on the circl backend instead of edwards25519 (r255_test.go)
}

func newDeployment(t testing.TB, o deployOpts) *deployment {
	t.Helper()
	if o.group == 0 {
		o.group = Ristretto255
	}
	if o.mode == 0 {
		o.mode = CountDistinctParticipants
	}
	if o.tau == 0 {
		o.tau = 3
	}
	if o.chunks == 0 {
		o.chunks = 1
	}
	if o.window == 0 {
		o.window = 42
	}
	if o.circl {
		useCirclRistretto(t)
	}
	rnd := detRand(o.seed + 1)
	g, err := NewGroup(o.group)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := GenerateProxyKeys(g, rnd)
	if err != nil {
		t.Fatal(err)
	}
	dbKey, err := GenerateKey(g, rnd)
	if err != nil {
		t.Fatal(err)
	}
	suite, err := NewSuite(PublicParams{
		Group: o.group, DeploymentID: "test-deployment", Window: o.window, Threshold: o.tau,
		CountMode: o.mode, Chunks: o.chunks, Values: o.values,
		DBKey: dbKey.PublicKey(), ProxyKey: keys.Oracle.PublicKey(),
	})
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := NewProxy(suite, keys, rnd)
	if err != nil {
		t.Fatal(err)
	}
	db, err := NewDB(suite, dbKey)
	if err != nil {
		t.Fatal(err)
	}
	return &deployment{t: t, suite: suite, keys: keys, dbKey: dbKey, proxy: proxy, oracle: proxy.Oracle(),
		db: db, table: NewTable(suite, rnd), rnd: rnd}
}

func (d *deployment) newSession(participant string) (*Session, SessionID) {
	var id SessionID
	d.rnd.Read(id[:])
	d.nSess++
	return d.proxy.OpenSession([]byte(participant), id), id
}

// submit runs one participant session end to end up to the proxy's pool and returns the
// rejections.
func (d *deployment) submit(participant string, obs []Observation) []Rejection {
	d.t.Helper()
	sess, id := d.newSession(participant)
	items := make([][]byte, 0, len(obs))
	for i, o := range obs { // no local dedup: tests exercise duplicates on purpose
		b, err := NewParticipant(d.suite, d.rnd).Item(id, uint32(i), o)
		if err != nil {
			d.t.Fatalf("participant %s item %d: %v", participant, i, err)
		}
		items = append(items, b)
	}
	return d.ingest(sess, items)
}

func (d *deployment) ingest(sess *Session, items [][]byte) []Rejection {
	d.cap.proxy = append(d.cap.proxy, items...)
	out, rej := d.proxy.Ingest(sess, items)
	d.cap.proxy = append(d.cap.proxy, out...)
	d.pool = append(d.pool, out...)
	return rej
}

// flush shuffles the pool into the DB: front-end open, shard insert.
func (d *deployment) flush() {
	d.t.Helper()
	if err := Shuffle(d.pool, d.rnd); err != nil {
		d.t.Fatal(err)
	}
	for _, raw := range d.pool {
		d.cap.db = append(d.cap.db, raw)
		e, err := d.db.Open(raw, 1)
		if err != nil {
			d.t.Fatalf("db open: %v", err)
		}
		enc, err := d.suite.MarshalEntry(e)
		if err != nil {
			d.t.Fatal(err)
		}
		d.cap.db = append(d.cap.db, enc)
		e2, err := d.suite.ParseEntry(enc)
		if err != nil {
			d.t.Fatalf("entry round trip: %v", err)
		}
		if _, err := d.table.Insert(e2); err != nil {
			d.t.Fatal(err)
		}
	}
	d.pool = nil
}

// reveal runs one evaluation pass: requests, oracle, responses.
func (d *deployment) reveal() []Revealed {
	d.t.Helper()
	reqs, err := d.table.RevealRequests()
	if err != nil {
		d.t.Fatal(err)
	}
	var out []Revealed
	for _, q := range reqs {
		d.cap.db = append(d.cap.db, q)
		d.cap.proxy = append(d.cap.proxy, q)
		resp, _, err := d.oracle.Answer(q)
		if err != nil {
			d.t.Fatalf("oracle: %v", err)
		}
		d.cap.proxy = append(d.cap.proxy, resp)
		d.cap.db = append(d.cap.db, resp)
		r, err := d.table.ApplyRevealResponse(resp)
		if err != nil {
			d.t.Fatal(err)
		}
		if r != nil {
			out = append(out, *r)
		}
	}
	return out
}

func ipKey(t testing.TB, s string) Key {
	t.Helper()
	k, err := ParseIPKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func opaqueKey(t testing.TB, b []byte) Key {
	t.Helper()
	k, err := OpaqueKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func resultMap(rs []Revealed) map[string]Revealed {
	m := make(map[string]Revealed, len(rs))
	for _, r := range rs {
		m[string(r.Key.Canonical())] = r
	}
	return m
}

func pname(i int) string { return fmt.Sprintf("participant-%03d", i) }

func cryptoRand() io.Reader { return crand.Reader }
