package sddr

import (
	"crypto/ecdh"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"sync/atomic"
	"time"
)

// Conditions callers branch on or count.
var (
	ErrOwnBeacon          = errors.New("sddr: own beacon")
	ErrDuplicate          = errors.New("sddr: beacon (pk, count) already processed")
	ErrInquiryFull        = errors.New("sddr: more than 255 new peers in one inquiry")
	ErrUnknownEncounter   = errors.New("sddr: no such encounter")
	ErrUnconfirmed        = errors.New("sddr: encounter key not confirmed")
	ErrReflected          = errors.New("sddr: message carries our own role")
	ErrBadTag             = errors.New("sddr: tag does not verify")
	ErrEpochOver          = errors.New("sddr: encounter belongs to an ended epoch")
	ErrTooManyAdvertised  = errors.New("sddr: advertise set would exceed N = 256")
	ErrUnknownLink        = errors.New("sddr: no such link")
	ErrDuplicateLinkLabel = errors.New("sddr: link label already used")
	ErrNotStarted         = errors.New("sddr: no epoch started")
)

// Config holds a device's timing and randomness. Zero fields take the [REC] defaults.
type Config struct {
	Epoch time.Duration // nominal epoch length, 15 min
	// EpochJitter is a uniform extra length per epoch, 60 s by default (§7 item 10); a negative
	// value means none (every epoch lasts exactly Epoch).
	EpochJitter time.Duration
	Interval    time.Duration // discovery interval, 60 s
	// CountMax is the number of distinct beacons per epoch, ceil(Epoch/Interval) by default.
	CountMax int
	// KeepLastBeacon keeps serving the last beacon once CountMax is reached ([R]); by default
	// the epoch rotates early instead (§7 item 26).
	KeepLastBeacon bool
	Infrastructure bool
	// Rand is crypto/rand when nil. Tests inject a seeded stream for reproducible frames
	// (§7 item 17); production code must not.
	Rand io.Reader
}

func (c Config) withDefaults() (Config, error) {
	if c.Epoch == 0 {
		c.Epoch = DefaultEpoch
	}
	if c.EpochJitter == 0 {
		c.EpochJitter = DefaultEpochJitter
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.EpochJitter < 0 {
		c.EpochJitter = 0
	}
	if c.Epoch < 0 || c.Interval <= 0 || c.Interval > c.Epoch {
		return c, fmt.Errorf("sddr config: need 0 < interval %v ≤ epoch %v", c.Interval, c.Epoch)
	}
	if c.CountMax == 0 {
		c.CountMax = int((c.Epoch + c.Interval - 1) / c.Interval)
	}
	if c.CountMax < 1 || c.CountMax > 255 {
		return c, fmt.Errorf("sddr config: count max %d outside 1..255", c.CountMax)
	}
	if c.Rand == nil {
		c.Rand = rand.Reader
	}
	return c, nil
}

// Advert is what the radio serves between discovery intervals: the address and the frame of
// one epoch, swapped as one value so no observer sees an address with another epoch's key
// (INV-8). Adverts are immutable once installed.
type Advert struct {
	Addr  Address
	Frame Frame
}

type epochState struct {
	id       uint64
	priv     *ecdh.PrivateKey
	pk       [PublicKeySize]byte
	addr     Address
	count    uint8
	end      time.Time
	as       []LinkValue // snapshot at epoch start (§3.12)
	beacon   Beacon
	started  bool
	rotation int
}

type listenEntry struct {
	label   string
	value   LinkValue
	serial  uint64
	removed bool
}

type matchState struct {
	e        *listenEntry
	hits     int
	verified bool
}

// peer is the receiver's state for one remote public key (§7 item 9): a new key is a new peer.
type peer struct {
	pk           [PublicKeySize]byte
	addr         Address
	first, last  time.Time
	processed    [4]uint64 // counts seen (Alg. 5 step 6)
	started      bool
	testedSerial uint64
	matching     []matchState
	rec          *record // encounter of the current local epoch
	anomalies    int
}

// record is one encounter: one (local epoch, remote pk) pair (§3.10).
type record struct {
	epochID   uint64
	keys      encounterKeys
	dhk       [32]byte // erased when the local epoch ends (§7 item 15)
	dhkLive   bool
	role      byte
	confirmed bool
	peer      *peer
}

// Device is one SDDR engine (Alg. 1–8). It is driven by explicit times so that a simulator's
// virtual clock and a real monotonic clock serve alike (§7 item 24). Only Advert may be called
// concurrently with the other methods.
type Device struct {
	cfg    Config
	advert atomic.Pointer[Advert]
	ep     epochState

	links     map[string]LinkValue
	advertise map[string]bool
	listen    []*listenEntry
	listenBy  map[string]*listenEntry
	serial    uint64
	removed   int

	peers    map[[PublicKeySize]byte]*peer
	byID     map[EncounterID]*record
	newPeers int
	recHits  int // beacons for Recognized at the current |LS|

	padBuf  [512]byte
	scratch []matchState // recognise's first-beacon survivors, reused
}

// New returns a device with no epoch; call StartEpoch before serving or scanning.
func New(cfg Config) (*Device, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Device{
		cfg: c, links: map[string]LinkValue{}, advertise: map[string]bool{},
		listenBy: map[string]*listenEntry{}, peers: map[[PublicKeySize]byte]*peer{},
		byID: map[EncounterID]*record{},
	}
	d.updateThreshold()
	return d, nil
}

// Advert returns the installed advert (nil before the first epoch). Safe for concurrent use:
// it is the controller-only path that answers inquiries while the CPU sleeps.
func (d *Device) Advert() *Advert { return d.advert.Load() }

// EpochEnd is when the current epoch is due to rotate.
func (d *Device) EpochEnd() time.Time { return d.ep.end }

// Rotations counts epoch starts, including forced ones.
func (d *Device) Rotations() int { return d.ep.rotation }

func (d *Device) random(b []byte) error {
	if _, err := io.ReadFull(d.cfg.Rand, b); err != nil {
		return fmt.Errorf("sddr randomness: %w", err)
	}
	return nil
}

// StartEpoch is Alg. 1: erase the old exponent and DH secrets, draw a fresh key, address and
// epoch id, reset the count, snapshot the advertise set and install the first beacon — key and
// address in one atomic store.
func (d *Device) StartEpoch(now time.Time) error {
	old := d.ep.id
	for _, r := range d.byID {
		if r.epochID == old && r.dhkLive {
			clear(r.dhk[:])
			r.dhkLive = false
		}
	}
	var seed [32]byte
	if err := d.random(seed[:]); err != nil {
		return err
	}
	priv, err := ecdh.X25519().NewPrivateKey(seed[:])
	clear(seed[:])
	if err != nil {
		return fmt.Errorf("new epoch key: %w", err)
	}
	var buf [6 + 8 + 8]byte
	if err := d.random(buf[:]); err != nil {
		return err
	}
	ep := epochState{priv: priv, started: true, rotation: d.ep.rotation + 1}
	copy(ep.pk[:], priv.PublicKey().Bytes())
	copy(ep.addr[:], buf[:6])
	ep.addr[0] &= 0x3F // BLE non-resolvable private address: top two bits 00
	ep.id = binary.LittleEndian.Uint64(buf[6:])
	jitter := time.Duration(0)
	if d.cfg.EpochJitter > 0 {
		jitter = time.Duration(binary.LittleEndian.Uint64(buf[14:]) % uint64(d.cfg.EpochJitter))
	}
	ep.end = now.Add(d.cfg.Epoch + jitter)
	for label := range d.advertise {
		ep.as = append(ep.as, d.links[label])
	}
	d.ep = ep
	return d.install()
}

// install is GenBeacon (Alg. 2) for the current (pk, count, AS snapshot) and the atomic swap.
func (d *Device) install() error {
	b := &d.ep.beacon
	b.PublicKey, b.Count = d.ep.pk, d.ep.count
	b.Flags = 0
	if d.cfg.Infrastructure {
		b.Flags = FlagInfrastructure
	}
	f := b.filter()
	f.Clear()
	salt := newH1Salt(&d.ep.pk, d.ep.count)
	for i := range d.ep.as {
		dg := salt.sum(&d.ep.as[i])
		f.Insert(&dg)
	}
	if _, err := f.Pad(len(d.ep.as), d.cfg.Rand, d.padBuf[:]); err != nil {
		return err
	}
	d.advert.Store(&Advert{Addr: d.ep.addr, Frame: b.Marshal()})
	return nil
}

// NextBeacon is Alg. 4 step 1, run at the start of each discovery interval: rotate if the
// epoch is over (or the count cap is reached, §7 item 26), otherwise install the beacon of
// count+1 under the same key and address. It also starts a new inquiry's peer budget and
// collects peers unseen for two epochs.
func (d *Device) NextBeacon(now time.Time) error {
	if !d.ep.started {
		return ErrNotStarted
	}
	d.newPeers = 0
	d.collect(now)
	switch {
	case !now.Before(d.ep.end):
		return d.StartEpoch(now)
	case int(d.ep.count)+1 >= d.cfg.CountMax:
		if d.cfg.KeepLastBeacon {
			return nil
		}
		return d.StartEpoch(now)
	}
	d.ep.count++
	return d.install()
}

// BeginInquiry resets the per-inquiry budget of new peers without changing the beacon.
func (d *Device) BeginInquiry() { d.newPeers = 0 }

func (d *Device) collect(now time.Time) {
	horizon := now.Add(-2 * d.cfg.Epoch)
	for pk, p := range d.peers {
		if p.last.Before(horizon) {
			delete(d.peers, pk)
		}
	}
	for id, r := range d.byID {
		if r.peer.last.Before(horizon) {
			clear(r.dhk[:])
			delete(d.byID, id)
		}
	}
}

// AddLink registers a link value under an opaque label (apps never handle the value again,
// INV-10) and sets its directions. Advertising takes effect at the next epoch.
func (d *Device) AddLink(label string, v LinkValue, dir Direction) error {
	if _, ok := d.links[label]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicateLinkLabel, label)
	}
	if _, err := ParseLinkValue(v[:]); err != nil {
		return err
	}
	if dir&Advertise != 0 && len(d.advertise) >= MaxAdvertised {
		return ErrTooManyAdvertised
	}
	d.links[label] = v
	return d.SetDirection(label, dir)
}

// SetDirection changes whether a link is advertised and listened for. Listening changes apply
// at once (§7 item 23); advertising ones at the next epoch (§3.12).
func (d *Device) SetDirection(label string, dir Direction) error {
	v, ok := d.links[label]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownLink, label)
	}
	if dir&Advertise != 0 {
		if !d.advertise[label] && len(d.advertise) >= MaxAdvertised {
			return ErrTooManyAdvertised
		}
		d.advertise[label] = true
	} else {
		delete(d.advertise, label)
	}
	e := d.listenBy[label]
	switch {
	case dir&Listen != 0 && e == nil:
		d.serial++
		e = &listenEntry{label: label, value: v, serial: d.serial}
		d.listen = append(d.listen, e)
		d.listenBy[label] = e
	case dir&Listen == 0 && e != nil:
		e.removed = true
		delete(d.listenBy, label)
		d.removed++
		if d.removed > len(d.listen)/2 {
			d.compact()
		}
	}
	d.updateThreshold()
	return nil
}

func (d *Device) compact() {
	kept := d.listen[:0]
	for _, e := range d.listen {
		if !e.removed {
			kept = append(kept, e)
		}
	}
	clear(d.listen[len(kept):])
	d.listen, d.removed = kept, 0
}

// Revoke stops advertising a link from the next epoch on (Alg. 8). Listening is unaffected and
// no other link changes: each friend has its own value, so nobody is re-keyed.
func (d *Device) Revoke(label string) error {
	if _, ok := d.links[label]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownLink, label)
	}
	delete(d.advertise, label)
	return nil
}

// RevokeNow revokes and rotates the epoch at once, so the revoked friend sees Alice leave
// rather than a match that stops within an epoch (silent revocation, §3.12).
func (d *Device) RevokeNow(label string, now time.Time) error {
	if err := d.Revoke(label); err != nil {
		return err
	}
	return d.StartEpoch(now)
}

func (d *Device) updateThreshold() {
	ls := len(d.listenBy)
	tau := 1e-3
	if ls > 0 {
		tau = math.Min(tau, 0.05/float64(ls))
	}
	p := BloomParams.FalsePositiveRate()
	d.recHits = int(math.Ceil(math.Log(tau) / math.Log(p)))
}

// RecognitionHits is the number of consecutive matching beacons after which a match is
// reported Recognized: the least n with P_fp^n ≤ min(1e-3, 0.05/|LS|) (§7 item 12).
func (d *Device) RecognitionHits() int { return d.recHits }

// Sighting is what one processed beacon tells the local apps: the encounter handle and the
// listen links (by label) that match the sender so far. It never carries L, dhk or link values.
type Sighting struct {
	ID           EncounterID
	NewPeer      bool // first beacon from this public key
	NewEncounter bool // keys derived now (new peer or new local epoch)
	AddrChanged  bool // the same key under another address: not an honest device (INV-8)
	Matches      []Match
}

// Match is one listen link that survived every beacon of the sender's epoch so far.
type Match struct {
	Label      string
	Hits       int
	Confidence float64 // 1 − P_fp^hits
	Recognized bool
	Verified   bool // proven with a Verify message (Alg. 7)
}

// OnBeacon is Recognize with per-epoch state (Alg. 5). The first beacon of a public key is
// tested against every listen id; later beacons of the same key only against the survivors,
// so the matching set shrinks to the true intersection (§3.5). Errors are reasons to drop.
func (d *Device) OnBeacon(frame []byte, addr Address, now time.Time) (Sighting, error) {
	var s Sighting
	if !d.ep.started {
		return s, ErrNotStarted
	}
	b, err := ParseBeacon(frame)
	if err != nil {
		return s, err
	}
	return d.onBeacon(&b, addr, now)
}

func (d *Device) onBeacon(b *Beacon, addr Address, now time.Time) (Sighting, error) {
	var s Sighting
	if b.PublicKey == d.ep.pk {
		return s, ErrOwnBeacon
	}
	p := d.peers[b.PublicKey]
	if p == nil {
		if d.newPeers >= MaxNewPerInquiry {
			return s, ErrInquiryFull
		}
		d.newPeers++
		p = &peer{pk: b.PublicKey, addr: addr, first: now}
		d.peers[b.PublicKey] = p
		s.NewPeer = true
	}
	if p.addr != addr {
		p.anomalies++
		s.AddrChanged = true
	}
	p.last = now
	if p.rec == nil || p.rec.epochID != d.ep.id {
		dhk, err := d.ep.priv.ECDH(mustPublic(&b.PublicKey))
		if err != nil {
			return s, fmt.Errorf("%w: %v", ErrPublicKey, err)
		}
		r := &record{epochID: d.ep.id, peer: p, dhkLive: true}
		copy(r.dhk[:], dhk)
		clear(dhk)
		r.keys = deriveKeys(&d.ep.pk, &p.pk, r.dhk[:])
		if string(d.ep.pk[:]) > string(p.pk[:]) {
			r.role = 1
		}
		p.rec = r
		d.byID[r.keys.id] = r
		s.NewEncounter = true
	}
	s.ID = p.rec.keys.id
	word, bit := b.Count>>6, uint64(1)<<(b.Count&63)
	if p.processed[word]&bit != 0 {
		return s, ErrDuplicate
	}
	p.processed[word] |= bit

	d.recognise(p, b)
	s.Matches = d.matches(p)
	return s, nil
}

// recognise is Alg. 5 step 7, the Bloom part of Recognize: the part the paper compares with
// PSI (Fig. 2). On the sender's first beacon every listen id is tested; on later ones only
// the survivors (and ids added since), so the matching set shrinks to the intersection.
// One H1 (two SHA-256 blocks) and one filter probe per id tested; no allocation beyond the
// matching set's growth.
func (d *Device) recognise(p *peer, b *Beacon) {
	f := b.filter()
	salt := newH1Salt(&p.pk, b.Count)
	if !p.started {
		// ≈ |LS|·P_fp survivors: collected in the device's scratch slice, then copied once at
		// their exact size (one allocation per new peer, whatever |LS|).
		found := d.scratch[:0]
		for _, e := range d.listen {
			if e.removed {
				continue
			}
			if dg := salt.sum(&e.value); f.Has(&dg) {
				found = append(found, matchState{e: e, hits: 1})
			}
		}
		if len(found) > 0 {
			p.matching = append(p.matching, found...)
		}
		clear(found)
		d.scratch = found[:0]
		p.started = true
	} else {
		kept := p.matching[:0]
		for _, m := range p.matching {
			if m.e.removed {
				continue
			}
			if dg := salt.sum(&m.e.value); f.Has(&dg) {
				m.hits++
				kept = append(kept, m)
			}
		}
		p.matching = kept
		// Listen ids added since this peer's first beacon start from this one (§7 item 23).
		if p.testedSerial != d.serial {
			from := sort.Search(len(d.listen), func(i int) bool { return d.listen[i].serial > p.testedSerial })
			for _, e := range d.listen[from:] {
				if e.removed {
					continue
				}
				if dg := salt.sum(&e.value); f.Has(&dg) {
					p.matching = append(p.matching, matchState{e: e, hits: 1})
				}
			}
		}
	}
	p.testedSerial = d.serial
}

func mustPublic(pk *[PublicKeySize]byte) *ecdh.PublicKey {
	// ParseBeacon validated the key; X25519 accepts any 32 bytes.
	k, _ := ecdh.X25519().NewPublicKey(pk[:])
	return k
}

func (d *Device) matches(p *peer) []Match {
	if len(p.matching) == 0 {
		return nil
	}
	pfp := BloomParams.FalsePositiveRate()
	out := make([]Match, 0, len(p.matching))
	for _, m := range p.matching {
		out = append(out, Match{
			Label: m.e.label, Hits: m.hits, Confidence: 1 - math.Pow(pfp, float64(m.hits)),
			Recognized: m.hits >= d.recHits, Verified: m.verified,
		})
	}
	return out
}

// EncounterInfo is the local view of one encounter, for authorised local clients.
type EncounterInfo struct {
	ID        EncounterID
	Key       [KeySize]byte // sk = H2(L): AEAD key for the rendezvous, never sent anywhere
	Confirmed bool
	Current   bool // belongs to the current local epoch
	First     time.Time
	Last      time.Time
}

// Encounter returns one encounter's key and state.
func (d *Device) Encounter(id EncounterID) (EncounterInfo, error) {
	r := d.byID[id]
	if r == nil {
		return EncounterInfo{}, ErrUnknownEncounter
	}
	return EncounterInfo{
		ID: id, Key: r.keys.sk, Confirmed: r.confirmed, Current: r.epochID == d.ep.id,
		First: r.peer.first, Last: r.peer.last,
	}, nil
}

// ConfirmMessage returns the key-confirmation message for an encounter (§3.9).
func (d *Device) ConfirmMessage(id EncounterID) (Confirm, error) {
	r := d.byID[id]
	if r == nil {
		return Confirm{}, ErrUnknownEncounter
	}
	return Confirm{ID: id, Role: r.role, Tag: confirmTag(&r.keys.sk, r.role)}, nil
}

// OnConfirm checks a peer's Confirm. ErrUnknownEncounter is the epoch-boundary case: the peer
// derived its key with another of our epoch keys (or we with another of its), and both
// retry with a record from a later discovery (§3.3).
func (d *Device) OnConfirm(msg []byte) (EncounterID, error) {
	c, err := ParseConfirm(msg)
	if err != nil {
		return EncounterID{}, err
	}
	r := d.byID[c.ID]
	if r == nil {
		return c.ID, ErrUnknownEncounter
	}
	if c.Role == r.role {
		return c.ID, ErrReflected
	}
	want := confirmTag(&r.keys.sk, 1-r.role)
	if subtle.ConstantTimeCompare(want[:], c.Tag[:]) != 1 {
		return c.ID, ErrBadTag
	}
	r.confirmed = true
	return c.ID, nil
}

// SAS is the 6-digit short authentication string of an encounter, compared out of band before
// linking (§3.7, §7 item 22).
func (d *Device) SAS(id EncounterID) (string, error) {
	r := d.byID[id]
	if r == nil {
		return "", ErrUnknownEncounter
	}
	return sas(&r.keys.link), nil
}

// LinkEncounter turns a confirmed encounter's L into a link value under label (Alg. 6). An
// unconfirmed key may not be shared, so it is refused.
func (d *Device) LinkEncounter(id EncounterID, label string, dir Direction) error {
	r := d.byID[id]
	if r == nil {
		return ErrUnknownEncounter
	}
	if !r.confirmed {
		return ErrUnconfirmed
	}
	return d.AddLink(label, LinkValue(r.keys.link), dir)
}

// Prove builds the Verify message of Alg. 7 for one link in the current epoch's encounter.
func (d *Device) Prove(id EncounterID, label string) (Verify, error) {
	r := d.byID[id]
	if r == nil {
		return Verify{}, ErrUnknownEncounter
	}
	if !r.dhkLive {
		return Verify{}, ErrEpochOver
	}
	v, ok := d.links[label]
	if !ok {
		return Verify{}, fmt.Errorf("%w: %q", ErrUnknownLink, label)
	}
	msg := Verify{ID: id}
	if err := d.random(msg.Nonce[:]); err != nil {
		return Verify{}, err
	}
	msg.Tag = verifyTag(&v, &msg.Nonce, r.dhk[:], &d.ep.pk, &r.peer.pk)
	return msg, nil
}

// OnVerify checks a Verify against the candidate matches of the sender and returns the label
// it proves; a Bloom false positive never verifies.
func (d *Device) OnVerify(msg []byte) (string, error) {
	v, err := ParseVerify(msg)
	if err != nil {
		return "", err
	}
	r := d.byID[v.ID]
	if r == nil {
		return "", ErrUnknownEncounter
	}
	if !r.dhkLive {
		return "", ErrEpochOver
	}
	p := r.peer
	for i := range p.matching {
		m := &p.matching[i]
		want := verifyTag(&m.e.value, &v.Nonce, r.dhk[:], &p.pk, &d.ep.pk)
		if subtle.ConstantTimeCompare(want[:], v.Tag[:]) == 1 {
			m.verified = true
			return m.e.label, nil
		}
	}
	return "", ErrBadTag
}
