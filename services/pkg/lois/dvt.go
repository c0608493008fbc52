package lois

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
)

// DVTConfig configures a dynamic PK Vacuum table.
type DVTConfig struct {
	// TableCapacity is the number of entries one linked table is sized for (reference sizing,
	// target load 0.96).
	TableCapacity int
	// Fingerprint16 stores only the 16-bit fingerprint (paper mode): 20 bytes per slot, but a
	// negative lookup falsely matches with probability ≈ 8·α·s/2¹⁶. The default stores the
	// whole id (28 bytes per slot) so lookups are exact (D-7).
	Fingerprint16 bool
	// CountOnly is the paper's consumption rule: a hit is counted, not deleted, and a table
	// is unlinked when all its entries were used. The default deletes on use (D-18), which
	// rejects duplicates and replays.
	CountOnly bool
	// Dedup keeps the DVF of keystream fingerprints aligned with the tables, for the
	// registrar's InsertChecked (§3.4). Replicas do not need it.
	Dedup bool
	// Key is the SipHash key of the id hash (D-8). Zero means a fresh random key. In 16-bit
	// mode every holder of one session's entries must share Key and TableCapacity with the
	// registrar: only then do the registrar's dedup verdicts (no two live entries with one
	// bucket pair and fingerprint) carry over and make positive lookups exact.
	Key [16]byte
	// Grace is how long after the newest expiry of a table its entries stay (D-17).
	Grace int64
}

// Loc names a slot for Consume.
type Loc struct {
	table *table
	slot  int32
}

// DVT is the dynamic partial-key Vacuum table (spec §3.6.2, §7.2): a list of homogeneous
// PK Vacuum tables (same m, alternate ranges and hash key), oldest first. Only the tail takes
// new entries; a victim that finds no place is carried into a newly linked tail by its
// fingerprint and bucket alone. Lookups probe the tables newest first. Not safe for
// concurrent use: a role gives each worker its own partition or guards it.
type DVT struct {
	cfg     DVTConfig
	g       geometry
	key     sipKey
	fkey    sipKey
	fg      geometry
	tables  []*table
	filters []*table // DVF, aligned with tables (Dedup only)
	r       rng
	sink    uint16 // keeps the early value-line load of lookupHashed from being optimised away
}

// NewDVT returns an empty DVT with one table.
func NewDVT(cfg DVTConfig) (*DVT, error) {
	if cfg.TableCapacity < 1 || cfg.TableCapacity > 1<<30 {
		return nil, fmt.Errorf("lois dvt: table capacity %d out of range", cfg.TableCapacity)
	}
	if cfg.Key == ([16]byte{}) {
		crand.Read(cfg.Key[:])
	}
	d := &DVT{cfg: cfg, g: sizeGeometry(cfg.TableCapacity)}
	d.key = sipKey{binary.LittleEndian.Uint64(cfg.Key[:8]), binary.LittleEndian.Uint64(cfg.Key[8:])}
	// The filter key is derived, and the filters get twice the slots: they sit in slow memory
	// (§3.4) and must not be the reason an insert fails.
	d.fkey = sipKey{d.key.sum64(1), d.key.sum64(2)}
	d.fg = sizeGeometry(2 * cfg.TableCapacity)
	// The eviction coin needs no secrecy beyond the key's; deriving it keeps a table with a
	// given key reproducible.
	d.r.s = d.key.sum64(3) | 1
	d.link()
	return d, nil
}

func (d *DVT) link() {
	d.tables = append(d.tables, newTable(&d.g, &d.key, !d.cfg.Fingerprint16, true))
	if d.cfg.Dedup {
		d.filters = append(d.filters, newTable(&d.fg, &d.fkey, false, false))
	}
}

func (d *DVT) tail() int { return len(d.tables) - 1 }

// Rotate links a fresh tail when the current one holds entries, so that each epoch window
// fills its own tables and expiry frees whole tables (spec §3.12).
func (d *DVT) Rotate() {
	if d.tables[d.tail()].count > 0 {
		d.link()
	}
}

func (d *DVT) hash(id uint64) (uint32, uint32, uint16) {
	b1, f := d.g.bucketFP(d.key.sum64(id))
	return b1, d.g.alt(b1, f), f
}

func (d *DVT) ksHash(ks *[16]byte) (uint32, uint32, uint16) {
	b1, f := d.fg.bucketFP(d.fkey.sum128(binary.LittleEndian.Uint64(ks[:8]), binary.LittleEndian.Uint64(ks[8:])))
	return b1, d.fg.alt(b1, f), f
}

// Lookup returns the keystream and service of id without consuming it.
func (d *DVT) Lookup(id uint64) (ks [16]byte, sid uint16, loc Loc, ok bool) {
	if id == 0 { // never issued; in exact mode 0 marks an empty slot
		return ks, 0, Loc{}, false
	}
	b1, b2, f := d.hash(id)
	return d.lookupHashed(id, b1, b2, f)
}

func (d *DVT) lookupHashed(id uint64, b1, b2 uint32, f uint16) (ks [16]byte, sid uint16, loc Loc, ok bool) {
	for t := len(d.tables) - 1; t >= 0; t-- {
		tb := d.tables[t]
		// Start the value line of B₁ loading while the key lines are scanned: most entries sit
		// in B₁, and the two cache misses then overlap instead of queueing.
		// B₂'s key line and the value lines of both buckets are started too: an entry sits
		// in B₂ about half the time, and its loads would otherwise wait for B₁'s scan.
		d.sink += tb.val[b1*slotsPerBucket].sid + tb.val[b2*slotsPerBucket].sid
		if tb.id != nil {
			d.sink += uint16(tb.id[b2*slotsPerBucket])
		}
		if s := tb.find(b1, b2, f, id); s >= 0 {
			return tb.val[s].ks, tb.val[s].sid, Loc{tb, int32(s)}, true
		}
	}
	return ks, 0, Loc{}, false
}

// Take looks id up and consumes it (delete on use, or count in CountOnly mode): the fast path
// of every receiving role.
func (d *DVT) Take(id uint64) (ks [16]byte, sid uint16, ok bool) {
	ks, sid, loc, ok := d.Lookup(id)
	if ok {
		d.Consume(loc)
	}
	return ks, sid, ok
}

// Consume marks the entry at loc used.
func (d *DVT) Consume(loc Loc) {
	t := loc.table
	if t == nil {
		return
	}
	t.consumed++
	if d.cfg.CountOnly {
		if t.consumed >= t.inserted {
			d.unlink(t)
		}
		return
	}
	if d.cfg.Dedup {
		d.filterDelete(d.indexOf(t), &t.val[loc.slot].ks)
	}
	t.clearSlot(uint32(loc.slot))
	t.count--
	if t.count == 0 && t != d.tables[d.tail()] {
		d.unlink(t)
	}
}

func (d *DVT) indexOf(t *table) int {
	for i, x := range d.tables {
		if x == t {
			return i
		}
	}
	return -1
}

func (d *DVT) unlink(t *table) {
	i := d.indexOf(t)
	if i < 0 {
		return
	}
	d.tables = append(d.tables[:i], d.tables[i+1:]...)
	if d.cfg.Dedup {
		d.filters = append(d.filters[:i], d.filters[i+1:]...)
	}
	if len(d.tables) == 0 {
		d.link()
	}
}

// GC unlinks every table whose newest entry expired more than Grace ago (spec §3.12, D-17):
// without it, entries of lost packets would keep tables alive for ever. It returns the number
// of entries dropped unconsumed.
func (d *DVT) GC(now int64) int {
	dropped := 0
	for i := 0; i < len(d.tables); {
		t := d.tables[i]
		if t.inserted > 0 && t.maxExpiry+d.cfg.Grace < now {
			dropped += t.count
			d.unlink(t)
			continue
		}
		i++
	}
	return dropped
}

// Insert adds id → (ks, sid), expiring at expiry. It refuses an id already present (in 16-bit
// mode: a live entry with the same bucket pair and fingerprint), which keeps positive lookups
// exact.
func (d *DVT) Insert(id uint64, ks *[16]byte, sid uint16, expiry int64) error {
	if id == 0 {
		return ErrDuplicateID // reserved (§3.3)
	}
	b1, b2, f := d.hash(id)
	for _, t := range d.tables {
		if t.find(b1, b2, f, id) >= 0 {
			return ErrDuplicateID
		}
	}
	return d.insert(item{f: f, sid: sid, id: id, ks: *ks}, b1, expiry, false, 0, 0)
}

// InsertChecked is the registrar's dedup insert (spec §3.4, §7.2): the id must miss the DVT
// and the keystream must miss the DVF.
func (d *DVT) InsertChecked(id uint64, ks *[16]byte, sid uint16, expiry int64) error {
	if !d.cfg.Dedup {
		return fmt.Errorf("lois dvt: InsertChecked needs Dedup")
	}
	if id == 0 {
		return ErrDuplicateID // reserved (§3.3)
	}
	b1, b2, f := d.hash(id)
	for _, t := range d.tables {
		if t.find(b1, b2, f, id) >= 0 {
			return ErrDuplicateID
		}
	}
	k1, k2, kf := d.ksHash(ks)
	for _, t := range d.filters {
		if t.find(k1, k2, kf, 0) >= 0 {
			return ErrDuplicateKS
		}
	}
	return d.insert(item{f: f, sid: sid, id: id, ks: *ks}, b1, expiry, true, k1, kf)
}

// insert places it; hashed says k1, kf already hold the keystream's filter hash.
func (d *DVT) insert(it item, b1 uint32, expiry int64, hashed bool, k1 uint32, kf uint16) error {
	ti := d.tail()
	t := d.tables[ti]
	ok, victim, vb := t.insert(&d.g, &d.r, it, b1)
	t.inserted++
	t.maxExpiry = max(t.maxExpiry, expiry)
	if d.cfg.Dedup {
		if !hashed {
			k1, _, kf = d.ksHash(&it.ks)
		}
		if ok, _, _ := d.filters[ti].insert(&d.fg, &d.r, item{f: kf}, k1); !ok {
			return fmt.Errorf("lois dvf: %w", ErrTableFull)
		}
	}
	for !ok {
		// The victim leaves table ti (its keystream fingerprint with it) and goes to a new
		// tail, placed by its fingerprint and current bucket alone (homogeneity).
		t.inserted--
		if d.cfg.Dedup {
			d.filterDelete(ti, &victim.ks)
		}
		d.link()
		ti = d.tail()
		t = d.tables[ti]
		moved := victim
		ok, victim, vb = t.insert(&d.g, &d.r, moved, vb)
		t.inserted++
		t.maxExpiry = max(t.maxExpiry, expiry)
		if d.cfg.Dedup {
			if err := d.filterInsert(ti, &moved.ks); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *DVT) filterInsert(ti int, ks *[16]byte) error {
	b1, _, f := d.ksHash(ks)
	if ok, _, _ := d.filters[ti].insert(&d.fg, &d.r, item{f: f}, b1); !ok {
		return fmt.Errorf("lois dvf: %w", ErrTableFull)
	}
	return nil
}

func (d *DVT) filterDelete(ti int, ks *[16]byte) {
	if ti < 0 {
		return
	}
	b1, b2, f := d.ksHash(ks)
	if s := d.filters[ti].find(b1, b2, f, 0); s >= 0 {
		d.filters[ti].clearSlot(uint32(s))
		d.filters[ti].count--
	}
}

// ContainsKeystream reports whether the DVF holds ks's fingerprint (Dedup only).
func (d *DVT) ContainsKeystream(ks *[16]byte) bool {
	b1, b2, f := d.ksHash(ks)
	for _, t := range d.filters {
		if t.find(b1, b2, f, 0) >= 0 {
			return true
		}
	}
	return false
}

// DVTStats is what the lois_dvt_* metrics report.
type DVTStats struct {
	Tables  int
	Entries int
	Slots   int
	Bytes   int // the fast-path tables only (DVF excluded, it lives in slow memory per §3.4)
}

// Stats reports the table count, live entries and memory.
func (d *DVT) Stats() DVTStats {
	st := DVTStats{Tables: len(d.tables)}
	per := 2 + 2 + 16 // f, SID, ks
	if !d.cfg.Fingerprint16 {
		per = 8 + 2 + 16 // id, SID, ks
	}
	for _, t := range d.tables {
		st.Entries += t.count
		st.Slots += t.slots()
	}
	st.Bytes = st.Slots * per
	return st
}

// Register is the registrar's generation step for one stream (spec §3.4, §7.3): every pair is
// dedup-inserted, and the indices refused (duplicate id or keystream, or id 0) are recorded in
// s.Dup, to be skipped identically by DI, CI replicas and SIs. It returns how many were refused.
func (d *DVT) Register(s *Stream) (int, error) {
	s.Dup = s.Dup[:0]
	var err error
	generate(&s.Key, s.N, IDSize, func(i uint32, id uint64, ks []byte) bool {
		if id == 0 {
			s.Dup = append(s.Dup, i)
			return true
		}
		switch e := d.InsertChecked(id, (*[16]byte)(ks), s.SID, s.Expiry); e {
		case nil:
		case ErrDuplicateID, ErrDuplicateKS:
			s.Dup = append(s.Dup, i)
		default:
			err = e
			return false
		}
		return true
	})
	return len(s.Dup), err
}

// Install inserts the stream's usable pairs (skipping s.Dup) into a receiver's table. Upload
// entries go to every replica; replicas/replica only restrict what a sender holds.
func (d *DVT) Install(s *Stream) error {
	var err error
	s.Each(1, 0, func(i uint32, p Pair) bool {
		if e := d.Insert(p.ID, &p.KS, s.SID, s.Expiry); e != nil {
			err = fmt.Errorf("install %v stream sid %d epoch %d index %d: %w", s.Dir, s.SID, s.Epoch, i, e)
			return false
		}
		return true
	})
	return err
}
