package pda

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
)

// CountMode selects what f counts (spec U9).
type CountMode uint8

const (
	// CountDistinctParticipants counts distinct dedup tags Z = Y^{t_j} among consistent
	// entries (§3.9.6): one participant contributes at most 1 per key and window. Default.
	CountDistinctParticipants CountMode = 1
	// CountTuples counts every accepted submission, as the paper's functionality does;
	// entries are still idempotent under redelivery through the DB-side entry id.
	CountTuples CountMode = 2
)

const (
	// ChunkSize is the number of key bytes embedded into one group element (§3.9.3).
	ChunkSize = 30
	// MaxChunks bounds n_chunks (8 covers keys up to 238 bytes, the spec's general case).
	MaxChunks = 16
	// MaxValues bounds |D| (spec §5: an explicit list of at most 16 values).
	MaxValues = 16
	// MaxDeploymentIDLen keeps the hash-to-group DST under RFC 9380's 255-byte limit.
	MaxDeploymentIDLen = 64
	// SessionIDSize is the length of the proxy-issued session id bound into every proof.
	SessionIDSize = 16
	// RequestIDSize is the length of a reveal request id (fresh random bytes, U20).
	RequestIDSize = 16

	paramsMagic   = "PDAP"
	formatVersion = 1
	// submissionVersion is the Submission format: 2 carries proofs in commitment form
	// (R, z) for batch verification; version 1 (challenge form (e, z)) is rejected.
	submissionVersion = 2
)

// SessionID is the id the proxy hands a participant at the start of a session; proofs are
// bound to it so that copied items fail elsewhere (T-MAL-6).
type SessionID [SessionIDSize]byte

// PublicParams is the per-window public document both operators sign (spec §3.9.1, U15).
// It fixes everything an item's format and proofs depend on.
type PublicParams struct {
	Group        GroupID
	DeploymentID string
	Window       uint64
	Threshold    uint32    // τ: reveal rows with at least τ counted entries
	CountMode    CountMode // CountDistinctParticipants or CountTuples
	Chunks       uint8     // n_chunks of E_PRX(k); 1 suffices for IP addresses
	Values       []uint16  // D, strictly increasing; empty means count-only (v ≡ 1, no C_V)
	DBKey        []byte    // encoded h_DB
	ProxyKey     []byte    // encoded h_PRX
}

// MarshalBinary encodes the parameters (the bytes that are signed and hashed into proofs).
func (pp *PublicParams) MarshalBinary() ([]byte, error) {
	if err := pp.checkShape(); err != nil {
		return nil, err
	}
	b := []byte(paramsMagic)
	b = append(b, formatVersion, byte(pp.Group), byte(pp.CountMode), pp.Chunks)
	b = binary.BigEndian.AppendUint64(b, pp.Window)
	b = binary.BigEndian.AppendUint32(b, pp.Threshold)
	b = append(b, byte(len(pp.DeploymentID)))
	b = append(b, pp.DeploymentID...)
	b = append(b, byte(len(pp.Values)))
	for _, v := range pp.Values {
		b = binary.BigEndian.AppendUint16(b, v)
	}
	b = append(b, pp.DBKey...)
	return append(b, pp.ProxyKey...), nil
}

// UnmarshalBinary decodes and validates parameters, including the two public keys.
func (pp *PublicParams) UnmarshalBinary(b []byte) error {
	r := reader{b: b}
	magic := r.next(len(paramsMagic))
	hdr := r.next(4)
	win := r.next(8)
	thr := r.next(4)
	dlen := r.next(1)
	if r.err || string(magic) != paramsMagic || hdr[0] != formatVersion {
		return fmt.Errorf("%w: params header", ErrMalformed)
	}
	dep := r.next(int(dlen[0]))
	nv := r.next(1)
	if r.err {
		return fmt.Errorf("%w: params truncated", ErrMalformed)
	}
	vals := r.next(2 * int(nv[0]))
	g, err := NewGroup(GroupID(hdr[1]))
	if err != nil || r.err {
		return fmt.Errorf("%w: params group or values", ErrMalformed)
	}
	hdb := r.next(g.ElementSize())
	hprx := r.next(g.ElementSize())
	if r.err || !r.done() {
		return fmt.Errorf("%w: params length", ErrMalformed)
	}
	out := PublicParams{
		Group: g.ID(), DeploymentID: string(dep), Window: binary.BigEndian.Uint64(win),
		Threshold: binary.BigEndian.Uint32(thr), CountMode: CountMode(hdr[2]), Chunks: hdr[3],
		DBKey: bytes.Clone(hdb), ProxyKey: bytes.Clone(hprx),
	}
	for i := range int(nv[0]) {
		out.Values = append(out.Values, binary.BigEndian.Uint16(vals[2*i:]))
	}
	if _, err := NewSuite(out); err != nil {
		return err
	}
	*pp = out
	return nil
}

func (pp *PublicParams) checkShape() error {
	g, err := NewGroup(pp.Group)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidParams, err)
	}
	switch {
	case len(pp.DeploymentID) == 0 || len(pp.DeploymentID) > MaxDeploymentIDLen:
		return fmt.Errorf("%w: deployment id length %d", ErrInvalidParams, len(pp.DeploymentID))
	case pp.Threshold == 0:
		return fmt.Errorf("%w: threshold must be ≥ 1", ErrInvalidParams)
	case pp.CountMode != CountDistinctParticipants && pp.CountMode != CountTuples:
		return fmt.Errorf("%w: count mode %d", ErrInvalidParams, pp.CountMode)
	case pp.Chunks == 0 || pp.Chunks > MaxChunks:
		return fmt.Errorf("%w: chunks %d", ErrInvalidParams, pp.Chunks)
	case len(pp.Values) > MaxValues:
		return fmt.Errorf("%w: %d values", ErrInvalidParams, len(pp.Values))
	case len(pp.DBKey) != g.ElementSize() || len(pp.ProxyKey) != g.ElementSize():
		return fmt.Errorf("%w: public key length", ErrInvalidParams)
	}
	for _, c := range []byte(pp.DeploymentID) {
		if c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: deployment id must be printable ASCII", ErrInvalidParams)
		}
	}
	for i := 1; i < len(pp.Values); i++ {
		if pp.Values[i] <= pp.Values[i-1] {
			return fmt.Errorf("%w: values must be strictly increasing", ErrInvalidParams)
		}
	}
	return nil
}

// Suite is a validated PublicParams with everything the stage functions precompute: the
// decoded public keys and the product key h_DB·h_PRX, the DSTs, the digest that binds
// proofs to these parameters, and the table g^v → v for v ∈ D. It is immutable and safe for
// concurrent use.
type Suite struct {
	params  PublicParams
	g       *Group
	hDB     *base
	hPRX    *base
	hProd   *base // h_DB·h_PRX, the key of the double ciphertext C_K (§3.1)
	dstH2G  []byte
	digest  [32]byte
	valueG  []Element         // v·G for v in D, in D's order
	valueOf map[string]uint16 // encoding of v·G (or "" for the identity) → v
}

var (
	dstHashToScalar = []byte("PDA-V1-HashToScalar")
	labelProof      = []byte("PDA-V2-POK")
	labelDedup      = []byte("PDA-V1-Dedup")
)

// NewSuite validates pp and precomputes the suite.
func NewSuite(pp PublicParams) (*Suite, error) {
	if err := pp.checkShape(); err != nil {
		return nil, err
	}
	g, _ := NewGroup(pp.Group)
	hDB, err := g.DecodeElement(pp.DBKey)
	if err != nil {
		return nil, fmt.Errorf("%w: DB key: %v", ErrInvalidParams, err)
	}
	hPRX, err := g.DecodeElement(pp.ProxyKey)
	if err != nil {
		return nil, fmt.Errorf("%w: proxy key: %v", ErrInvalidParams, err)
	}
	prod := g.add(hDB, hPRX)
	if prod.IsIdentity() {
		// h_PRX = h_DB^{-1} would make the double ciphertext a plaintext.
		return nil, fmt.Errorf("%w: product key is the identity", ErrInvalidParams)
	}
	pp.Values = slices.Clone(pp.Values)
	pp.DBKey, pp.ProxyKey = bytes.Clone(pp.DBKey), bytes.Clone(pp.ProxyKey)
	enc, err := pp.MarshalBinary()
	if err != nil {
		return nil, err
	}
	s := &Suite{
		params: pp, g: g,
		hDB: newBase(g, hDB), hPRX: newBase(g, hPRX), hProd: newBase(g, prod),
		dstH2G:  []byte("PDA-V1-" + pp.DeploymentID + "-HashToGroup-" + g.name),
		digest:  sha256.Sum256(enc),
		valueOf: make(map[string]uint16, len(pp.Values)),
	}
	for _, v := range pp.Values {
		e := g.mulGen(g.NewScalar().SetUint64(uint64(v)))
		s.valueG = append(s.valueG, e)
		s.valueOf[string(g.encodeElement(e))] = v
	}
	return s, nil
}

// Params returns a copy of the suite's parameters.
func (s *Suite) Params() PublicParams {
	pp := s.params
	pp.Values = slices.Clone(pp.Values)
	pp.DBKey, pp.ProxyKey = bytes.Clone(pp.DBKey), bytes.Clone(pp.ProxyKey)
	return pp
}

// Group returns the suite's group.
func (s *Suite) Group() *Group { return s.g }

// HasValues reports whether items carry C_V (D non-empty).
func (s *Suite) HasValues() bool { return len(s.params.Values) > 0 }

// hasTag reports whether the proxy attaches dedup tags C_T.
func (s *Suite) hasTag() bool { return s.params.CountMode == CountDistinctParticipants }

// hashMessage is I2OSP(window_id, 8) || canon(k), the hash-to-group input (§3.9.1).
func (s *Suite) hashMessage(k Key) []byte {
	b := make([]byte, 8, 8+canonHeaderSize+len(k.b))
	binary.BigEndian.PutUint64(b, s.params.Window)
	return k.appendCanonical(b)
}

// HashKey returns P = H2G(window || canon(k)) with the deployment's DST. It is exported for
// tests and the oracle's consistency check; it is the unkeyed hash, never sent anywhere.
func (s *Suite) HashKey(k Key) Element {
	return s.g.HashToElement(s.hashMessage(k), s.dstH2G)
}

// payloadSize is the padded E_PRX payload: n_chunks × ChunkSize bytes.
func (s *Suite) payloadSize() int { return int(s.params.Chunks) * ChunkSize }

// MaxCanonicalKeySize is the longest canon(k) the deployment can carry in E_PRX (U7).
func (s *Suite) MaxCanonicalKeySize() int { return s.payloadSize() - 2 }

// reader is a bounds-checked cursor over network bytes: any short read sets err and
// returns a zero-length slice, so decoders check once at the end and never panic.
type reader struct {
	b   []byte
	err bool
}

func (r *reader) next(n int) []byte {
	if r.err || n < 0 || n > len(r.b) {
		r.err = true
		if n >= 0 && n <= 64 { // small fixed fields stay indexable; callers check err before use
			return make([]byte, n)
		}
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) done() bool { return !r.err && len(r.b) == 0 }
