package mohito

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/obscura-iot/obscura/services/pkg/okvs"
)

// Vendor is a vendor back-end in its ordinary (non-shuffler) role: it knows
// the PRF key of each of its devices, decodes its command OKVS at the q
// ephemeral ids of every active device, and encodes every active device's q
// responses into a response OKVS padded to a public coarse capacity (G6).
type Vendor struct {
	Index   uint32
	params  Params
	devices []*IDDeriver
}

// NewVendor returns vendor index with the PRF keys of its devices; device d is
// prfKeys[d].
func NewVendor(index uint32, p Params, prfKeys [][KeySize]byte) (*Vendor, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if int(index) >= p.Vendors {
		return nil, fmt.Errorf("%w: vendor index %d", ErrParams, index)
	}
	v := &Vendor{Index: index, params: p, devices: make([]*IDDeriver, len(prfKeys))}
	for i := range prfKeys {
		v.devices[i] = NewIDDeriver(&prfKeys[i])
	}
	return v, nil
}

// Devices is the number of registered devices.
func (v *Vendor) Devices() int { return len(v.devices) }

// DeliverySize is |M6| = header ‖ shuffler(4) ‖ q × ⟨cmd⟩-sized slot.
func (p Params) DeliverySize() int { return headerSize + 4 + p.Q*p.DeviceCiphertextSize() }

// DeviceResponseSize is |M7| = header ‖ q × (z ‖ response value).
func (p Params) DeviceResponseSize() int {
	return headerSize + p.Q*(EphemeralIDSize+p.ResponseTableValueSize())
}

// VendorRound is a vendor's state for one round: the snapshot of active
// devices 𝒟_a taken when decoding starts (spec O11) and their ids.
type VendorRound struct {
	v      *Vendor
	info   *RoundInfo
	active []int
	ids    []EphemeralID // active[i]'s slot j at i·q + j − 1
	resp   [][]byte
	late   *vendorLate // asynchronous responses (App. A); nil unless used
}

// NewRound snapshots the active set and derives q ids per active device.
func (v *Vendor) NewRound(ri *RoundInfo, active []int) (*VendorRound, error) {
	if ri.Params != v.params {
		return nil, fmt.Errorf("%w: round parameters", ErrParams)
	}
	q := v.params.Q
	vr := &VendorRound{v: v, info: ri, active: append([]int(nil), active...), ids: make([]EphemeralID, len(active)*q)}
	for i, d := range active {
		if d < 0 || d >= len(v.devices) {
			return nil, fmt.Errorf("%w: device %d", ErrParams, d)
		}
		for j := 1; j <= q; j++ {
			vr.ids[i*q+j-1] = v.devices[d].Derive(uint32(j), ri.T)
		}
	}
	vr.resp = make([][]byte, len(vr.ids))
	return vr, nil
}

// Active returns the snapshot of active devices, in delivery order.
func (vr *VendorRound) Active() []int { return vr.active }

// DecodePattern returns the OKVS keys the vendor decodes, in order: q per
// active device, whatever the traffic (spec §4.3). Exposed for transcript
// tests.
func (vr *VendorRound) DecodePattern() []EphemeralID { return vr.ids }

// DecodeCommands is V.DecodeCommands (spec §3.6 C6): it decodes the command
// table at every id and returns one M6 per active device, in the order of
// Active — every device gets q slots whether or not it has a command.
func (vr *VendorRound) DecodeCommands(table *okvs.Table) ([][]byte, error) {
	p := vr.v.params
	vs := p.DeviceCiphertextSize()
	if table.ValueSize() != vs {
		return nil, fmt.Errorf("%w: value size %d, want %d", ErrTableShape, table.ValueSize(), vs)
	}
	keys := make([][]byte, len(vr.ids))
	for i := range vr.ids {
		keys[i] = vr.ids[i][:]
	}
	vals := table.DecodeBatch(make([]byte, 0, len(keys)*vs), keys)
	q := p.Q
	out := make([][]byte, len(vr.active))
	for i := range vr.active {
		m := make([]byte, p.DeliverySize())
		putHeader(m, KindDelivery, vr.info.T)
		binary.BigEndian.PutUint32(m[headerSize:], vr.info.Shuffler)
		copy(m[headerSize+4:], vals[i*q*vs:(i+1)*q*vs])
		out[i] = m
	}
	return out, nil
}

// AcceptResponse records M7 from the device at position i of Active. The
// ids must be the ones the vendor derived for that device and round.
func (vr *VendorRound) AcceptResponse(i int, m7 []byte) error {
	p := vr.v.params
	if i < 0 || i >= len(vr.active) {
		return fmt.Errorf("%w: active position %d", ErrIndex, i)
	}
	t, err := parseHeader(m7, KindDeviceResponse, p.DeviceResponseSize())
	if err != nil {
		return err
	}
	if err := expectRound(t, vr.info.T); err != nil {
		return err
	}
	q, rs := p.Q, EphemeralIDSize+p.ResponseTableValueSize()
	for j := range q {
		rec := m7[headerSize+j*rs:]
		if EphemeralID(rec[:EphemeralIDSize]) != vr.ids[i*q+j] {
			return fmt.Errorf("%w: response slot %d has a foreign id", ErrNonCanonical, j+1)
		}
	}
	for j := range q {
		rec := m7[headerSize+j*rs+EphemeralIDSize : headerSize+(j+1)*rs]
		vr.resp[i*q+j] = append([]byte(nil), rec...)
	}
	return nil
}

// EncodeResponses is V.EncodeResponses (spec §3.7 R2 with G6 and O11): it
// encodes the q responses of every active device (random values for devices
// that did not answer) plus random pairs up to ResponseCapacity(q·|𝒟_a|,
// quantum). It returns the table and its capacity.
func (vr *VendorRound) EncodeResponses(quantum int, rnd io.Reader) (*okvs.Table, int, error) {
	return vr.v.encodeResponsePairs(vr.ids, vr.resp, quantum, rnd)
}

// encodeResponsePairs encodes (ids[i] → resp[i]) with random values for the
// ids nobody answered, padded with random pairs to ResponseCapacity(len(ids),
// quantum). The synchronous and the late response tables share it, so both
// have the same shape rules (G6, O11).
func (v *Vendor) encodeResponsePairs(ids []EphemeralID, resp [][]byte, quantum int, rnd io.Reader) (*okvs.Table, int, error) {
	p := v.params
	vs := p.ResponseTableValueSize()
	capacity := ResponseCapacity(len(ids), quantum)
	br, err := bulkRandom(rnd)
	if err != nil {
		return nil, 0, err
	}
	keys := make([][]byte, capacity)
	values := make([][]byte, capacity)
	keyBuf := make([]byte, capacity*EphemeralIDSize)
	for i := range ids {
		keys[i] = keyBuf[i*EphemeralIDSize : (i+1)*EphemeralIDSize]
		copy(keys[i], ids[i][:])
		if val := resp[i]; val != nil {
			values[i] = val
		} else {
			values[i] = make([]byte, vs)
			if _, err := io.ReadFull(br, values[i]); err != nil {
				return nil, 0, err
			}
		}
	}
	if err := padPairs(keys, values, keyBuf, len(ids), vs, br); err != nil {
		return nil, 0, err
	}
	t, err := okvs.EncodeWithSize(keys, values, vs, br)
	if err != nil {
		return nil, 0, fmt.Errorf("encode response table of vendor %d: %w", v.Index, err)
	}
	return t, capacity, nil
}
