package mohito

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"time"
)

// Device is an IoT device: every round it receives q slots from its vendor,
// tries to open each under k_D^ae, never executes a command id twice (O14),
// and answers every slot — with random bytes when the slot carried no
// command, so the vendor cannot tell (spec §3.7 R1).
//
// A command id it has answered before is a user's retry: the round that
// carried it was aborted after the device executed it, and the user re-sent
// the same command (same id and issue time, IssueCommandID) in a later round.
// The device answers it with the response it gave the first time instead of
// executing it again, so a retried command takes effect exactly once. Only a
// holder of k_D^ae can put an id in front of the device again: the device
// ciphertext is bound to z, which is bound to the round, so a server cannot
// replay one into another round.
type Device struct {
	params    Params
	keys      DeviceKeys
	ids       *IDDeriver
	skew      time.Duration
	lastRound uint64
	seen      map[[16]byte]*seenCommand
}

// seenCommand is what the device keeps of a command id for the replay
// window: its issue time, and the response once it has answered.
type seenCommand struct {
	issued   time.Time
	answered bool
	response []byte
}

// NewDevice returns a device holding secret s. Commands whose timestamp is
// more than skew away from the device clock are rejected.
func NewDevice(s *DeviceSecret, p Params, skew time.Duration) *Device {
	k := s.Keys()
	return &Device{params: p, keys: k, ids: NewIDDeriver(&k.PRF), skew: skew, seen: map[[16]byte]*seenCommand{}}
}

// DeviceSlot is the outcome of one slot: the command if one opened.
type DeviceSlot struct {
	J       uint32
	Z       EphemeralID
	Command *Command
	// Repeat marks a command the device answered in an earlier round (a
	// user's retry): the caller must not execute it again, and Respond
	// answers it with the earlier response whatever payload it is given.
	Repeat bool
	Err    error // nil, ErrNoCommand, ErrReplay or ErrNonCanonical
}

// ReceiveCommands opens M6. It returns one DeviceSlot per j; an error is
// returned only for an envelope that is malformed or for a round the device
// has already handled (ErrRound).
func (d *Device) ReceiveCommands(m6 []byte, now time.Time) (uint64, []DeviceSlot, error) {
	p := d.params
	t, err := parseHeader(m6, KindDelivery, p.DeliverySize())
	if err != nil {
		return 0, nil, err
	}
	if d.lastRound != 0 && t <= d.lastRound {
		return 0, nil, fmt.Errorf("%w: round %d after %d", ErrRound, t, d.lastRound)
	}
	d.lastRound = t
	d.prune(now)
	vs := p.DeviceCiphertextSize()
	slots := make([]DeviceSlot, p.Q)
	for j := range p.Q {
		s := &slots[j]
		s.J = uint32(j + 1)
		s.Z = d.ids.Derive(s.J, t)
		ct := m6[headerSize+4+j*vs : headerSize+4+(j+1)*vs]
		pt, err := openDevice(&d.keys.AE, aadCommand, &s.Z, ct)
		if err != nil {
			s.Err = ErrNoCommand
			continue
		}
		cmd, err := parseCommand(pt)
		if err != nil {
			s.Err = err
			continue
		}
		if dt := now.Sub(cmd.Timestamp); dt > d.skew || dt < -d.skew {
			s.Err = fmt.Errorf("%w: timestamp off by %v", ErrReplay, dt)
			continue
		}
		if prev, dup := d.seen[cmd.ID]; dup {
			if !prev.answered || !prev.issued.Equal(cmd.Timestamp) {
				s.Err = fmt.Errorf("%w: command id seen", ErrReplay)
				continue
			}
			s.Repeat = true
		} else {
			d.seen[cmd.ID] = &seenCommand{issued: cmd.Timestamp}
		}
		s.Command = cmd
	}
	return t, slots, nil
}

// prune forgets command ids whose timestamps can no longer pass the window.
func (d *Device) prune(now time.Time) {
	for id, c := range d.seen {
		if now.Sub(c.issued) > 2*d.skew {
			delete(d.seen, id)
		}
	}
}

// Respond is D.IssueResponse for all q slots (spec §3.7 R1 with G1): for a
// slot with a command it sends ⟨r⟩_D ⊕ XSalsa20(k_V*^resp) ⊕ XSalsa20(k_I^resp);
// otherwise uniformly random bytes of the same length. payloads[j] is the
// response to slot j (ignored for slots without a command). It returns M7.
func (d *Device) Respond(t uint64, slots []DeviceSlot, payloads [][]byte, rnd io.Reader) ([]byte, error) {
	p := d.params
	if len(slots) != p.Q {
		return nil, fmt.Errorf("%w: %d slots", ErrParams, len(slots))
	}
	if p.ResponseMode != ResponseHardened {
		return nil, fmt.Errorf("%w: paper-literal responses need RespondPaperLiteral", ErrParams)
	}
	rs := EphemeralIDSize + p.ResponseValueSize()
	m := make([]byte, p.DeviceResponseSize())
	putHeader(m, KindDeviceResponse, t)
	for j := range slots {
		s := &slots[j]
		rec := m[headerSize+j*rs : headerSize+(j+1)*rs]
		copy(rec, s.Z[:])
		val := rec[EphemeralIDSize:]
		if s.Command == nil {
			if _, err := io.ReadFull(rnd, val); err != nil {
				return nil, err
			}
			continue
		}
		pt, err := d.response(s, payloadAt(payloads, j))
		if err != nil {
			return nil, err
		}
		ct, err := sealDevice(&d.keys.AE, aadResponse, &s.Z, pt, rnd)
		if err != nil {
			return nil, err
		}
		copy(val, ct)
		xorRespLayer(val, &s.Command.ShufflerRespKey, &nonceRespShuffler)
		xorRespLayer(val, &s.Command.IntegratorRespKey, &nonceRespIntegrator)
	}
	return m, nil
}

// payloadAt is payloads[j], or nil past its end.
func payloadAt(payloads [][]byte, j int) []byte {
	if j < len(payloads) {
		return payloads[j]
	}
	return nil
}

// response is the padded response plaintext for a slot with a command:
// payload for a new command, which the device remembers for the replay
// window, or the remembered one for a repeat.
func (d *Device) response(s *DeviceSlot, payload []byte) ([]byte, error) {
	c := d.seen[s.Command.ID]
	if c == nil {
		// Pruned between receive and respond, or a slot the device did not
		// open: answer without remembering.
		c = &seenCommand{}
	}
	if s.Repeat && c.answered {
		return marshalResponse(&s.Command.ID, c.response, d.params.ResponseSize)
	}
	pt, err := marshalResponse(&s.Command.ID, payload, d.params.ResponseSize)
	if err != nil {
		return nil, err
	}
	c.answered, c.response = true, slices.Clone(payload)
	return pt, nil
}

// ParseResponseOut decodes an M10 batch at the integrator: the values r_i for
// input indices [start, start+len) (aliasing b).
func ParseResponseOut(p Params, t uint64, b []byte, k int) (int, [][]byte, error) {
	return parseBatch(KindResponseOut, t, b, p.ResponseValueSize(), k)
}

// ParseResponseLayer decodes an M9 batch (for tests and relays).
func ParseResponseLayer(p Params, t uint64, b []byte, n int) (int, [][]byte, error) {
	return parseBatch(KindResponseLayer, t, b, p.ResponseLayerSize(), n)
}

// ParseDelivery returns the round and shuffler named in an M6 header (the
// device's source of t and V*, spec O10).
func ParseDelivery(p Params, b []byte) (uint64, uint32, error) {
	t, err := parseHeader(b, KindDelivery, p.DeliverySize())
	if err != nil {
		return 0, 0, err
	}
	return t, binary.BigEndian.Uint32(b[headerSize:]), nil
}
