package pda

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"strings"
)

// DB is the DB front-end stage (spec §3.9.2 DB side, A8): it opens BlindedItems with
// a_DB. It is stateless apart from the key.
type DB struct {
	suite *Suite
	key   *PrivateKey
}

// NewDB checks that key matches the suite's h_DB.
func NewDB(s *Suite, key *PrivateKey) (*DB, error) {
	if key == nil || string(key.pub) != string(s.params.DBKey) {
		return nil, fmt.Errorf("%w: DB key does not match h_DB", ErrInvalidParams)
	}
	return &DB{suite: s, key: key}, nil
}

// Open decrypts one BlindedItem into an Entry: Y = Dec(C_Y'), E_PRX(k) = StripLayer(C_K'),
// v = lookup(Dec(C_V')), Z = Dec(C_T), entry_id = SHA-256(item bytes). The entry id is
// deterministic, so a redelivered item maps to the same entry, and it never leaves the DB.
func (d *DB) Open(raw []byte, ringVersion uint64) (*Entry, error) {
	s, g := d.suite, d.suite.g
	it, err := s.ParseBlindedItem(raw)
	if err != nil {
		return nil, err
	}
	if it.Window != s.params.Window {
		return nil, fmt.Errorf("%w: item for window %d", ErrWindowMismatch, it.Window)
	}
	e := &Entry{Window: it.Window, RingVersion: ringVersion, ID: sha256.Sum256(raw), Value: 1}
	if e.Y = g.encodeElement(d.key.decrypt(it.CY)); e.Y == nil {
		return nil, fmt.Errorf("%w: blinded key is the identity", ErrInvalidElement)
	}
	e.Inner = make([]Ciphertext, len(it.CK))
	for i, c := range it.CK {
		e.Inner[i] = d.key.stripLayer(c)
	}
	if it.CV != nil {
		gv := d.key.decrypt(*it.CV)
		var k string
		if !gv.IsIdentity() {
			k = string(g.encodeElement(gv))
		}
		v, ok := s.valueOf[k]
		if !ok {
			return nil, ErrValueNotInDomain
		}
		e.Value = v
	}
	if it.CT != nil {
		if e.Z = g.encodeElement(d.key.decrypt(*it.CT)); e.Z == nil {
			return nil, fmt.Errorf("%w: dedup tag is the identity", ErrInvalidElement)
		}
	}
	return e, nil
}

// KeyPosition is pos(Y) = uint64(SHA-256("PDA-key" || enc(Y))[0:8]) (spec §4.3), the
// point on the consistent-hash ring that decides which shard owns Y's row.
func KeyPosition(y []byte) uint64 {
	h := sha256.New()
	h.Write([]byte("PDA-key"))
	h.Write(y)
	var sum [32]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0])[:8])
}

// RowState is a row's reveal state (A9).
type RowState uint8

const (
	RowOpen     RowState = iota // below τ, or never requested
	RowPending                  // a reveal request is outstanding
	RowRevealed                 // the oracle returned the key and f held after pruning
	RowRejected                 // no consistent key, or f failed after pruning
)

// Revealed is a published row: the key and the values of its consistent entries
// (release variant V2: (k, T[k])). Count is the number of counted entries: distinct
// participants or tuples, per the suite's CountMode.
type Revealed struct {
	Key    Key
	Count  int
	Values []uint16 // sorted; all 1 in count-only deployments
}

// Table is one DB shard's per-window table (A9): rows keyed by the blinded key Y, entries
// per row keyed by the dedup tag Z (distinct participants) or the entry id (tuples),
// first write wins, so redelivery and resubmission are idempotent. f is "count ≥ τ".
// Entries keep their value index-aligned with their own E_PRX(k) so inconsistent ones
// can be pruned with their values (spec §3.3 step 5).
type Table struct {
	suite   *Suite
	rand    io.Reader
	rows    map[string]*row
	pending map[[RequestIDSize]byte]*pendingReveal
}

type row struct {
	y        []byte
	entries  map[string]*rowEntry
	state    RowState
	dirty    bool // entries arrived since the last reveal request
	revealed *Revealed
}

type rowEntry struct {
	value uint16
	inner []Ciphertext
}

type pendingReveal struct {
	row  *row
	keys []string // request position → entry key, kept only inside the shard
}

// NewTable returns an empty table. rand (crypto/rand when nil) drives the reveal
// requests' re-randomisation, order and ids.
func NewTable(s *Suite, r io.Reader) *Table {
	if r == nil {
		r = rand.Reader
	}
	return &Table{suite: s, rand: r, rows: make(map[string]*row), pending: make(map[[RequestIDSize]byte]*pendingReveal)}
}

// Insert adds an entry; it reports whether the entry was new.
func (t *Table) Insert(e *Entry) (bool, error) {
	s := t.suite
	if e.Window != s.params.Window {
		return false, fmt.Errorf("%w: entry for window %d", ErrWindowMismatch, e.Window)
	}
	if len(e.Inner) != int(s.params.Chunks) || len(e.Y) != s.g.elementSize {
		return false, fmt.Errorf("%w: entry shape", ErrMalformed)
	}
	key := string(e.ID[:])
	if s.hasTag() {
		if len(e.Z) != s.g.elementSize {
			return false, fmt.Errorf("%w: entry without dedup tag", ErrMalformed)
		}
		key = string(e.Z)
	}
	r := t.rows[string(e.Y)]
	if r == nil {
		r = &row{y: slices.Clone(e.Y), entries: make(map[string]*rowEntry)}
		t.rows[string(e.Y)] = r
	}
	if _, dup := r.entries[key]; dup {
		return false, nil
	}
	r.entries[key] = &rowEntry{value: e.Value, inner: slices.Clone(e.Inner)}
	r.dirty = true
	return true, nil
}

func (t *Table) qualifies(r *row) bool {
	return uint64(len(r.entries)) >= uint64(t.suite.params.Threshold)
}

// RevealRequests builds a request for every row that satisfies f and has entries the
// oracle has not checked (U14), and marks those rows pending. Rows below τ never produce
// a request, so the oracle never sees them (T-FUN-2).
func (t *Table) RevealRequests() ([][]byte, error) {
	ys := make([]string, 0)
	for y, r := range t.rows {
		if r.dirty && r.state != RowPending && t.qualifies(r) {
			ys = append(ys, y)
		}
	}
	slices.Sort(ys) // deterministic under a deterministic rand
	out := make([][]byte, 0, len(ys))
	for _, y := range ys {
		b, err := t.request(t.rows[y])
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func (t *Table) request(r *row) ([]byte, error) {
	s := t.suite
	keys := make([]string, 0, len(r.entries))
	for k := range r.entries {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// A fresh uniform order per request: positions say nothing about arrival or about the
	// previous request for the same row (T-PRIV-13).
	if err := permute(keys, t.rand); err != nil {
		return nil, err
	}
	q := &RevealRequest{Window: s.params.Window, Y: r.y, Entries: make([][]Ciphertext, len(keys))}
	if _, err := io.ReadFull(t.rand, q.RequestID[:]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRandomness, err)
	}
	for i, k := range keys {
		inner := t.rows[string(r.y)].entries[k].inner
		q.Entries[i] = make([]Ciphertext, len(inner))
		for j, c := range inner {
			// DB-side re-randomisation (§3.3): without it the proxy would recognise the A
			// component it forwarded and link the revealed key to a participant.
			rc, err := s.g.rerandomize(s.hPRX, c, t.rand)
			if err != nil {
				return nil, err
			}
			q.Entries[i][j] = rc
		}
	}
	b, err := s.MarshalRevealRequest(q)
	if err != nil {
		return nil, err
	}
	t.pending[q.RequestID] = &pendingReveal{row: r, keys: keys}
	r.state, r.dirty = RowPending, false
	return b, nil
}

// ApplyRevealResponse prunes the entries the oracle found inconsistent, evaluates f again
// and, if the row still qualifies and a key came back, publishes it (returned). A row that
// fails becomes RowRejected and is requested again only if new entries arrive.
func (t *Table) ApplyRevealResponse(b []byte) (*Revealed, error) {
	resp, err := ParseRevealResponse(b)
	if err != nil {
		return nil, err
	}
	p := t.pending[resp.RequestID]
	if p == nil || resp.Window != t.suite.params.Window {
		return nil, ErrUnknownRequest
	}
	if len(resp.Consistent) != len(p.keys) {
		return nil, fmt.Errorf("%w: bitmap of %d entries for %d", ErrMalformed, len(resp.Consistent), len(p.keys))
	}
	delete(t.pending, resp.RequestID)
	r := p.row
	for i, ok := range resp.Consistent {
		if !ok {
			delete(r.entries, p.keys[i])
		}
	}
	if resp.Key.IsZero() || !t.qualifies(r) {
		r.state, r.revealed = RowRejected, nil
		return nil, nil
	}
	rev := &Revealed{Key: resp.Key, Count: len(r.entries)}
	for _, e := range r.entries {
		rev.Values = append(rev.Values, e.value)
	}
	slices.Sort(rev.Values)
	r.state, r.revealed = RowRevealed, rev
	return rev, nil
}

// Results returns the currently revealed rows, ordered by key text.
func (t *Table) Results() []Revealed {
	var out []Revealed
	for _, r := range t.rows {
		if r.state == RowRevealed || (r.state == RowPending && r.revealed != nil) {
			out = append(out, *r.revealed)
		}
	}
	slices.SortFunc(out, func(a, b Revealed) int { return strings.Compare(a.Key.Text(), b.Key.Text()) })
	return out
}

// Rows returns the number of rows (distinct blinded keys) in the table.
func (t *Table) Rows() int { return len(t.rows) }

// Histogram returns the keyless count column (the DB's private output Ĥ, release variant
// V3 when published): for each row count c, how many rows have it.
func (t *Table) Histogram() map[int]int {
	h := make(map[int]int)
	for _, r := range t.rows {
		h[len(r.entries)]++
	}
	return h
}
