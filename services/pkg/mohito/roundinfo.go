package mohito

import (
	"encoding/binary"
	"fmt"
)

// RoundInfo is M0: what users, vendors and (through the vendor, spec O10)
// devices need to take part in round T. Signing it against the key directory
// (spec §3.2) is the services' job; this package fixes its layout.
type RoundInfo struct {
	T             uint64     // round id, strictly increasing and never reused (spec O2)
	Shuffler      uint32     // index of V* in the vendor registry
	Params        Params     // public sizes; fixes every envelope size of the round
	IntegratorKey *PublicKey // pk_I
	ShufflerKey   *PublicKey // pk_V*

	// Key ids in force for the round (spec O16): the epoch of pk_I and of
	// every vendor's pk_V, by vendor index (nil: every vendor at epoch 0).
	// pk_V* is the key of epoch VendorEpochs[Shuffler]. Every role that opens
	// a layer of this round picks its private key by these ids.
	IntegratorEpoch uint32
	VendorEpochs    []uint32
}

const roundInfoFixed = headerSize + 4 + 4 + 1 + 2 + 2 + 1

// RoundInfoSize is the M0 size for a suite and a vendor count: the fixed
// fields, pk_I and pk_V*, then the integrator's and every vendor's key epoch.
func RoundInfoSize(s Suite, vendors int) int {
	return roundInfoFixed + 2*s.PublicKeySize() + 4 + 4*vendors
}

// VendorEpoch returns the key epoch of vendor v in force for the round.
func (ri *RoundInfo) VendorEpoch(v uint32) uint32 {
	if int(v) < len(ri.VendorEpochs) {
		return ri.VendorEpochs[v]
	}
	return 0
}

// ShufflerEpoch returns the epoch of pk_V*.
func (ri *RoundInfo) ShufflerEpoch() uint32 { return ri.VendorEpoch(ri.Shuffler) }

// Validate checks internal consistency.
func (ri *RoundInfo) Validate() error {
	if err := ri.Params.Validate(); err != nil {
		return err
	}
	if ri.IntegratorKey == nil || ri.ShufflerKey == nil {
		return fmt.Errorf("%w: missing key", ErrParams)
	}
	if ri.IntegratorKey.suite != ri.Params.Suite || ri.ShufflerKey.suite != ri.Params.Suite {
		return fmt.Errorf("%w: key suite does not match round suite", ErrParams)
	}
	if int(ri.Shuffler) >= ri.Params.Vendors {
		return fmt.Errorf("%w: shuffler index %d", ErrParams, ri.Shuffler)
	}
	if ri.VendorEpochs != nil && len(ri.VendorEpochs) != ri.Params.Vendors {
		return fmt.Errorf("%w: %d vendor key epochs for %d vendors", ErrParams, len(ri.VendorEpochs), ri.Params.Vendors)
	}
	return nil
}

// MarshalBinary encodes M0.
func (ri *RoundInfo) MarshalBinary() ([]byte, error) {
	if err := ri.Validate(); err != nil {
		return nil, err
	}
	if ri.Params.ResponseMode != ResponseHardened {
		// Benchmark-only mode (G1 leak): it has no wire form, so no
		// deployment can announce a round that uses it.
		return nil, fmt.Errorf("%w: response mode %d has no wire form", ErrParams, ri.Params.ResponseMode)
	}
	p := ri.Params
	b := make([]byte, RoundInfoSize(p.Suite, p.Vendors))
	putHeader(b, KindRoundInfo, ri.T)
	o := headerSize
	binary.BigEndian.PutUint32(b[o:], ri.Shuffler)
	binary.BigEndian.PutUint32(b[o+4:], uint32(p.Vendors))
	b[o+8] = byte(p.Q)
	binary.BigEndian.PutUint16(b[o+9:], uint16(p.CommandSize))
	binary.BigEndian.PutUint16(b[o+11:], uint16(p.ResponseSize))
	b[o+13] = byte(p.Suite)
	o = roundInfoFixed
	o += copy(b[o:], ri.IntegratorKey.Bytes())
	o += copy(b[o:], ri.ShufflerKey.Bytes())
	binary.BigEndian.PutUint32(b[o:], ri.IntegratorEpoch)
	for v := range p.Vendors {
		binary.BigEndian.PutUint32(b[o+4+4*v:], ri.VendorEpoch(uint32(v)))
	}
	return b, nil
}

// ParseRoundInfo decodes M0 from the network.
func ParseRoundInfo(b []byte) (*RoundInfo, error) {
	if len(b) < roundInfoFixed {
		return nil, fmt.Errorf("%w: round info of %d bytes", ErrSize, len(b))
	}
	s := Suite(b[roundInfoFixed-1])
	if !s.Valid() {
		return nil, fmt.Errorf("%w: suite %d", ErrNonCanonical, s)
	}
	if len(b) < headerSize+8 {
		return nil, fmt.Errorf("%w: round info of %d bytes", ErrSize, len(b))
	}
	vendors := int(binary.BigEndian.Uint32(b[headerSize+4:]) & 0x7fffffff)
	if vendors < 1 || vendors > MaxVendors {
		return nil, fmt.Errorf("%w: %d vendors", ErrNonCanonical, vendors)
	}
	t, err := parseHeader(b, KindRoundInfo, RoundInfoSize(s, vendors))
	if err != nil {
		return nil, err
	}
	o := headerSize
	ri := &RoundInfo{T: t, Shuffler: binary.BigEndian.Uint32(b[o:])}
	ri.Params = Params{
		Vendors:      int(binary.BigEndian.Uint32(b[o+4:]) & 0x7fffffff),
		Q:            int(b[o+8]),
		CommandSize:  int(binary.BigEndian.Uint16(b[o+9:])),
		ResponseSize: int(binary.BigEndian.Uint16(b[o+11:])),
		Suite:        s,
	}
	o = roundInfoFixed
	if ri.IntegratorKey, err = ParsePublicKey(s, b[o:o+s.PublicKeySize()]); err != nil {
		return nil, err
	}
	o += s.PublicKeySize()
	if ri.ShufflerKey, err = ParsePublicKey(s, b[o:o+s.PublicKeySize()]); err != nil {
		return nil, err
	}
	o += s.PublicKeySize()
	ri.IntegratorEpoch = binary.BigEndian.Uint32(b[o:])
	ri.VendorEpochs = make([]uint32, vendors)
	for v := range ri.VendorEpochs {
		ri.VendorEpochs[v] = binary.BigEndian.Uint32(b[o+4+4*v:])
	}
	if err := ri.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNonCanonical, err)
	}
	return ri, nil
}
