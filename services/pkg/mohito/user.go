package mohito

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// DeviceCredentials is what a user holds for one of its devices: the vendor
// index and the keys derived from the device secret.
type DeviceCredentials struct {
	Vendor uint32
	Keys   DeviceKeys
}

// PendingCommand is the user's state for one issued command, kept until the
// response arrives (M11).
type PendingCommand struct {
	T      uint64
	Z      EphemeralID
	ID     [16]byte
	aeKey  [KeySize]byte
	params Params
}

// SubmissionSize is |M1| = header ‖ ⟨⟨m⟩_I, x₂, a₂, c₂, k_V*^resp⟩_V* ‖ seed(x₁).
func (p Params) SubmissionSize() int { return headerSize + p.OuterSize() + SeedSize }

// outerInfo binds the outer layer to the round and its shuffler, so a
// submission replayed into another round fails at V* (spec §9.3 #18).
func outerInfo(t uint64, shuffler uint32) []byte {
	b := make([]byte, 0, len(infoOuter)+12)
	b = append(b, infoOuter...)
	b = binary.BigEndian.AppendUint64(b, t)
	return binary.BigEndian.AppendUint32(b, shuffler)
}

// IssueCommand is U.IssueCommand (spec §3.6 C1, §7): it derives z for slot j,
// encrypts the padded command to the device, wraps m = (z, v, ⟨cmd⟩_D,
// k_I^resp) to the integrator and (⟨m⟩_I, x₂, a₂, c₂, k_V*^resp) to the
// shuffler, and returns the fixed-size M1 with the x₁ seed appended.
func IssueCommand(ri *RoundInfo, dev *DeviceCredentials, j uint32, payload []byte, now time.Time, rand io.Reader) ([]byte, *PendingCommand, error) {
	id, err := NewCommandID(rand)
	if err != nil {
		return nil, nil, err
	}
	return IssueCommandID(ri, dev, j, id, payload, now, rand)
}

// NewCommandID draws a fresh command id.
func NewCommandID(rand io.Reader) ([16]byte, error) {
	var id [16]byte
	if _, err := io.ReadFull(rand, id[:]); err != nil {
		return id, fmt.Errorf("sample command id: %w", err)
	}
	return id, nil
}

// IssueCommandID is IssueCommand for a command with a given id and issue
// time. A user retrying a command in a later round (its round was closed or
// aborted, or its response did not open) re-issues it with the same id, issue time and payload: every
// layer, z and the response keys are fresh, and a device that already
// executed it answers with its earlier response rather than executing it
// again (Device). The device accepts it only while issued is within its
// replay window.
func IssueCommandID(ri *RoundInfo, dev *DeviceCredentials, j uint32, id [16]byte, payload []byte, issued time.Time, rand io.Reader) ([]byte, *PendingCommand, error) {
	p := ri.Params
	if j < 1 || int(j) > p.Q {
		return nil, nil, fmt.Errorf("%w: slot %d not in [1, %d]", ErrParams, j, p.Q)
	}
	if int(dev.Vendor) >= p.Vendors {
		return nil, nil, fmt.Errorf("%w: vendor %d", ErrParams, dev.Vendor)
	}
	cmd := Command{ID: id, Timestamp: issued, Payload: payload}
	if err := readAll(rand, cmd.IntegratorRespKey[:], cmd.ShufflerRespKey[:]); err != nil {
		return nil, nil, fmt.Errorf("sample command keys: %w", err)
	}
	return issueCommand(ri, dev, j, &cmd, SplitOneHot, rand)
}

// issueCommand wraps a fully specified command with a given share splitter
// (tests use it to model replaying clients and malformed shares).
func issueCommand(ri *RoundInfo, dev *DeviceCredentials, j uint32, cmd *Command, split func(v, vendors int, rand io.Reader) (ShareSeed, Share, error), rand io.Reader) ([]byte, *PendingCommand, error) {
	p := ri.Params
	z := DeriveEphemeralID(&dev.Keys.PRF, j, ri.T)
	pt, err := cmd.marshal(p.CommandSize)
	if err != nil {
		return nil, nil, err
	}
	devCT, err := sealDevice(&dev.Keys.AE, aadCommand, &z, pt, rand)
	if err != nil {
		return nil, nil, err
	}
	inner, err := sealInner(ri.IntegratorKey, p, &z, dev.Vendor, devCT, &cmd.IntegratorRespKey)
	if err != nil {
		return nil, nil, err
	}
	seed, share2, err := split(int(dev.Vendor), p.Vendors, rand)
	if err != nil {
		return nil, nil, err
	}
	m1, err := wrapSubmission(ri, inner, seed, &share2, &cmd.ShufflerRespKey)
	if err != nil {
		return nil, nil, err
	}
	return m1, &PendingCommand{T: ri.T, Z: z, ID: cmd.ID, aeKey: dev.Keys.AE, params: p}, nil
}

// wrapSubmission seals (⟨m⟩_I, x₂, a₂, c₂, k_V*^resp) to the shuffler and
// frames M1 = header ‖ outer ‖ seed.
func wrapSubmission(ri *RoundInfo, inner []byte, seed ShareSeed, share2 *Share, kV *[KeySize]byte) ([]byte, error) {
	p := ri.Params
	if len(inner) != p.InnerSize() || len(share2.X) != p.Vendors {
		return nil, fmt.Errorf("%w: inner layer or share", ErrSize)
	}
	outerPT := make([]byte, p.outerPlainSize())
	o := copy(outerPT, inner)
	putShare(outerPT[o:], share2)
	o += p.ShufflerShareSize()
	copy(outerPT[o:], kV[:])
	outer, err := ri.ShufflerKey.seal(outerInfo(ri.T, ri.Shuffler), nil, outerPT)
	if err != nil {
		return nil, fmt.Errorf("seal outer layer: %w", err)
	}
	m1 := make([]byte, p.SubmissionSize())
	putHeader(m1, KindSubmission, ri.T)
	copy(m1[headerSize:], outer)
	copy(m1[headerSize+len(outer):], seed[:])
	return m1, nil
}

// sealInner builds ⟨m⟩_I for m = z ‖ v ‖ ⟨cmd⟩_D ‖ k_I^resp. The shuffler uses
// the same function for fakes, so fakes and real entries are the same bytes
// distribution by construction.
func sealInner(pkI *PublicKey, p Params, z *EphemeralID, v uint32, devCT []byte, kI *[KeySize]byte) ([]byte, error) {
	m := make([]byte, p.innerPlainSize())
	o := copy(m, z[:])
	binary.BigEndian.PutUint32(m[o:], v)
	o += 4
	o += copy(m[o:], devCT)
	copy(m[o:], kI[:])
	inner, err := pkI.seal([]byte(infoInner), nil, m)
	if err != nil {
		return nil, fmt.Errorf("seal inner layer: %w", err)
	}
	return inner, nil
}

func readAll(rand io.Reader, bufs ...[]byte) error {
	for _, b := range bufs {
		if _, err := io.ReadFull(rand, b); err != nil {
			return err
		}
	}
	return nil
}

// UserResponseSize is |M11| = header ‖ index(4) ‖ ⟨r⟩_D.
func (p Params) UserResponseSize() int { return headerSize + 4 + p.ResponseValueSize() }

// MarshalUserResponse builds M11 for the user who sent message index i.
func MarshalUserResponse(p Params, t uint64, index uint32, value []byte) ([]byte, error) {
	if len(value) != p.ResponseValueSize() {
		return nil, fmt.Errorf("%w: response value of %d bytes", ErrSize, len(value))
	}
	b := make([]byte, p.UserResponseSize())
	putHeader(b, KindUserResponse, t)
	binary.BigEndian.PutUint32(b[headerSize:], index)
	copy(b[headerSize+4:], value)
	return b, nil
}

// OpenResponse decrypts M11. ErrDecrypt means the command was lost (inactive
// device, dropped as malformed, or a device fault) and the user should retry
// (spec O11).
func (pc *PendingCommand) OpenResponse(m11 []byte) ([]byte, error) {
	t, err := parseHeader(m11, KindUserResponse, pc.params.UserResponseSize())
	if err != nil {
		return nil, err
	}
	if err := expectRound(t, pc.T); err != nil {
		return nil, err
	}
	pt, err := openDevice(&pc.aeKey, aadResponse, &pc.Z, m11[headerSize+4:])
	if err != nil {
		return nil, err
	}
	id, payload, err := parseResponse(pt)
	if err != nil {
		return nil, err
	}
	if id != pc.ID {
		return nil, fmt.Errorf("%w: response names another command", ErrDecrypt)
	}
	return payload, nil
}
