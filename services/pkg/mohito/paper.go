package mohito

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/obscura-iot/obscura/services/pkg/okvs"
)

// The paper-literal response path (ResponsePaperLiteral), kept for
// benchmarks only. It LEAKS the real per-vendor counts to the integrator
// (spec §8.1 G1); see ResponsePaperLiteral. Nothing here is used by the
// hardened default.

const (
	infoPaperRespI = "mohito/v1/paper-literal/resp-I"
	infoPaperRespV = "mohito/v1/paper-literal/resp-V"
)

func paperInfo(label string, t uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(label), t)
}

// sealPaperLayers is the paper's Enc_pkI(Enc_pkV*(⟨r⟩_D)) for round t.
func sealPaperLayers(ri *RoundInfo, devCT []byte) ([]byte, error) {
	mid, err := ri.ShufflerKey.seal(paperInfo(infoPaperRespV, ri.T), nil, devCT)
	if err != nil {
		return nil, fmt.Errorf("seal paper-literal V* layer: %w", err)
	}
	out, err := ri.IntegratorKey.seal(paperInfo(infoPaperRespI, ri.T), nil, mid)
	if err != nil {
		return nil, fmt.Errorf("seal paper-literal I layer: %w", err)
	}
	return out, nil
}

// RespondPaperLiteral is D.IssueResponse exactly as in the paper's Fig. 3,
// for benchmarks only (ResponsePaperLiteral: it leaks real counts to the
// integrator, never use it in production). Every slot gets
// Enc_pkI(Enc_pkV*(AE_kD(r))) with authenticated HPKE layers; r is the
// response for a slot with a command and a random string otherwise. It
// returns M7.
func (d *Device) RespondPaperLiteral(ri *RoundInfo, slots []DeviceSlot, payloads [][]byte, rnd io.Reader) ([]byte, error) {
	p := d.params
	if p.ResponseMode != ResponsePaperLiteral || ri.Params != p {
		return nil, fmt.Errorf("%w: not a paper-literal round", ErrParams)
	}
	if len(slots) != p.Q {
		return nil, fmt.Errorf("%w: %d slots", ErrParams, len(slots))
	}
	rs := EphemeralIDSize + p.ResponseTableValueSize()
	m := make([]byte, p.DeviceResponseSize())
	putHeader(m, KindDeviceResponse, ri.T)
	for j := range slots {
		s := &slots[j]
		rec := m[headerSize+j*rs : headerSize+(j+1)*rs]
		copy(rec, s.Z[:])
		var pt []byte
		var err error
		if s.Command == nil {
			pt = make([]byte, p.ResponseSize)
			_, err = io.ReadFull(rnd, pt)
		} else {
			pt, err = d.response(s, payloadAt(payloads, j))
		}
		if err != nil {
			return nil, err
		}
		ct, err := sealDevice(&d.keys.AE, aadResponse, &s.Z, pt, rnd)
		if err != nil {
			return nil, err
		}
		layered, err := sealPaperLayers(ri, ct)
		if err != nil {
			return nil, err
		}
		copy(rec[EphemeralIDSize:], layered)
	}
	return m, nil
}

// DecodeResponseLayerPaperLiteral is I.DecodeResponses exactly as in the
// paper (Fig. 3), for benchmarks only: it decodes the vendor's response table
// at each slot and opens the authenticated pk_I layer. The returned opened[i]
// is the G1 LEAK: it is false exactly at fake positions (and at commands
// whose device did not answer), so the integrator learns the real count A_v.
// A position that fails gets random bytes in out, as the paper's integrator
// has nothing else to forward. Never use it in production.
func (in *Integrator) DecodeResponseLayerPaperLiteral(t uint64, table *okvs.Table, slots []ResponseSlot, out [][]byte, rnd io.Reader) (opened []bool, err error) {
	p := in.params
	if p.ResponseMode != ResponsePaperLiteral {
		return nil, fmt.Errorf("%w: not a paper-literal round", ErrParams)
	}
	vs := p.ResponseTableValueSize()
	if table.ValueSize() != vs {
		return nil, fmt.Errorf("%w: value size %d, want %d", ErrTableShape, table.ValueSize(), vs)
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	keys := make([][]byte, len(slots))
	for i := range slots {
		keys[i] = slots[i].Key[:]
	}
	buf := table.DecodeBatch(make([]byte, 0, len(slots)*vs), keys)
	info := paperInfo(infoPaperRespI, t)
	opened = make([]bool, len(slots))
	for i := range slots {
		v, err := in.key.open(info, nil, buf[i*vs:(i+1)*vs])
		if err == nil && len(v) == p.ResponseLayerSize() {
			out[i], opened[i] = v, true
			continue
		}
		out[i] = make([]byte, p.ResponseLayerSize())
		if _, err := io.ReadFull(rnd, out[i]); err != nil {
			return nil, err
		}
	}
	return opened, nil
}

// openPaperLayer is the shuffler's Dec_skV* of the paper-literal path.
func (s *Shuffler) openPaperLayer(t uint64, v []byte) ([]byte, error) {
	pt, err := s.key.open(paperInfo(infoPaperRespV, t), nil, v)
	if err != nil || len(pt) != s.params.ResponseValueSize() {
		return nil, ErrDecrypt
	}
	return pt, nil
}
