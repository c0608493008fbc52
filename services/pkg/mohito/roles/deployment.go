package roles

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/records"
)

// Deployment is the public configuration every role agrees on.
type Deployment struct {
	Series   string // the round series (status key series.<series>)
	Params   mohito.Params
	Policy   []mohito.TargetPolicy // public per-vendor target policy (G3a draw is secret)
	Delta    uint64                // δ
	Capacity []int                 // public command-table capacity K_v (G3b)
	Quantum  int                   // public response-table quantum (G6)
	Weights  []int                 // shuffler selection weights (O4): the vendor's Shuffler weight, else its devices; 0 never shuffles
	OutBatch int                   // records per M4/M9/M10 batch
	Encoders int                   // P, number of encoder partitions

	Round            time.Duration // T, the collection period
	ShufflerTimeout  time.Duration // abort when V* does not answer in time (G7)
	ResponseDeadline time.Duration // vendor's fixed release of S_v^resp after it received S_v (O12, G7)
	// DeviceAnswerAfter is when devices answer after a delivery, whatever they
	// executed (G7); 0 means ResponseDeadline/4. See [Deployment.AnswerAfter].
	DeviceAnswerAfter time.Duration

	// Classes moves every vendor's target between size classes with the demand the
	// integrator observes (contract.CapacityClasses); nil keeps Policy as set.
	Classes *CapacityClasses

	VendorNames      []string // display names (optional, logs and status only)
	ResponseCapacity []int    // declared response-table capacity per vendor (informational: tables are sized by Quantum)
}

// Validate checks the deployment.
func (d *Deployment) Validate() error {
	var errs []error
	if err := d.Params.Validate(); err != nil {
		errs = append(errs, err)
	}
	n := d.Params.Vendors
	if len(d.Policy) != n || len(d.Capacity) != n || len(d.Weights) != n {
		errs = append(errs, fmt.Errorf("policy, capacity and weights need one entry per vendor (%d)", n))
	}
	positive := false
	for v, w := range d.Weights {
		if w < 0 {
			errs = append(errs, fmt.Errorf("weight of vendor %d is negative", v))
		}
		positive = positive || w > 0
	}
	if len(d.Weights) > 0 && !positive {
		errs = append(errs, errors.New("no vendor has a positive shuffler weight: every round needs a shuffler (spec G7)"))
	}
	if d.Quantum < 1 || d.OutBatch < 1 || d.Encoders < 1 {
		errs = append(errs, errors.New("quantum, out-batch and encoders must be ≥ 1"))
	}
	if d.Round <= 0 || d.ShufflerTimeout <= 0 || d.ResponseDeadline <= 0 {
		errs = append(errs, errors.New("round, shuffler-timeout and response-deadline must be > 0"))
	}
	if d.DeviceAnswerAfter < 0 || d.ResponseDeadline > 0 && d.AnswerAfter() > d.ResponseDeadline/2 {
		errs = append(errs, fmt.Errorf("device answer offset %v must be in (0, response-deadline/2 = %v]: the rest of the deadline is the devices' transit slack", d.DeviceAnswerAfter, d.ResponseDeadline/2))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid deployment: %w", errors.Join(errs...))
	}
	return nil
}

// AnswerAfter is the fixed offset after a delivery at which every device
// answers, whatever it executed (spec G7): DeviceAnswerAfter, or a quarter of
// the response deadline when unset. A command that takes longer to execute
// makes its device late; the agent drops answers that miss its release.
func (d *Deployment) AnswerAfter() time.Duration {
	if d.DeviceAnswerAfter > 0 {
		return d.DeviceAnswerAfter
	}
	return contract.DefaultDeviceAnswerAfter(d.ResponseDeadline)
}

// ResponsePhase bounds a round's response phase, from its plan to its release, before the
// coordinator aborts it (spec O12): the shuffler's exchange, the vendors' fixed release one
// response deadline after their commands went out (G7), and slack for the encoders, the
// responder and an encoder handover (after a crash its successor waits for the partition's
// lease, EncoderLeaseTTL, and for the redelivery of what the dead one held) — three response
// deadlines, at least 10 s.
func (d *Deployment) ResponsePhase() time.Duration {
	return d.ShufflerTimeout + d.ResponseDeadline + max(3*d.ResponseDeadline, 10*time.Second)
}

// TableTTL is how long a sealed command table stays in MOHITO_OKVS (memory storage): two
// whole rounds — period and response phase — and at least a minute, long after any round that
// could still read it has released or aborted. Ten minutes of tables filled a 128 MB memory
// store at 2 s rounds of 544-entry tables and stopped every encoder ("insufficient
// resources").
func (d *Deployment) TableTTL() time.Duration {
	return max(2*(d.Round+d.ResponsePhase()), time.Minute)
}

// WorkTTL is how long a message of the integrator's work stream (StreamWork, memory storage:
// round plans, decrypted parts, response-layer shares) is kept: as long as a sealed table, by
// the same reasoning. The coordinator purges a round's work once the round is done or
// aborted; this age bounds what is left by a round no coordinator finished. Ten minutes of
// work at a 512-entry class filled a 256 MB memory store and aborted every later round.
func (d *Deployment) WorkTTL() time.Duration { return d.TableTTL() }

// Batches is the number of M4 batches of a list of n entries.
func (d *Deployment) Batches(n int) int { return (n + d.OutBatch - 1) / d.OutBatch }

// EncoderLoadSlack is ε of the encoders' bounded-load placement: no partition
// takes more than (1+ε) × its fair share of the expected entries, unless one
// vendor alone is larger than that.
const EncoderLoadSlack = 0.25

// EncoderOf returns the encoder partition of vendor v (see [Deployment.Placement]).
func (d *Deployment) EncoderOf(v int) int { return d.Placement()[v] }

// VendorsOf returns the vendors encoder p owns.
func (d *Deployment) VendorsOf(p int) []int {
	var out []int
	for v, q := range d.Placement() {
		if q == p {
			out = append(out, v)
		}
	}
	return out
}

// Placement assigns every vendor to an encoder partition by consistent
// hashing with bounded loads: each vendor has its own rendezvous order of the
// partitions (independent of the others and of traffic) and, taken from the
// largest expected C_v down, goes to the first partition in its order whose
// load stays within (1+ε) × Σ C_v / P — so large vendors spread over the
// partitions instead of meeting by chance on one, and a rescale moves the
// vendors of the removed partition (or those the new one attracts) plus the
// few that the load bound then displaces. A vendor no partition can take
// within the bound goes to the least loaded one. Every role computes the
// same placement from the public deployment.
func (d *Deployment) Placement() []int {
	n, parts := d.Params.Vendors, max(d.Encoders, 1)
	weight := make([]float64, n)
	var total float64
	for v := range n {
		weight[v] = float64(d.Policy[v].Base+d.Delta+d.Policy[v].Width/2) + 1
		total += weight[v]
	}
	order := make([]int, n)
	for v := range order {
		order[v] = v
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(weight[b], weight[a]) })
	bound := (1 + EncoderLoadSlack) * total / float64(parts)
	load := make([]float64, parts)
	out := make([]int, n)
	rank := make([]int, parts)
	score := make([]float64, parts)
	for _, v := range order {
		for p := range parts {
			h := fnv.New64a()
			var b [16]byte
			binary.BigEndian.PutUint64(b[:], uint64(v))
			binary.BigEndian.PutUint64(b[8:], uint64(p))
			h.Write(b[:])
			score[p] = float64(h.Sum64()>>11) / float64(1<<53)
			rank[p] = p
		}
		slices.SortFunc(rank, func(a, b int) int { return cmp.Compare(score[b], score[a]) })
		best := -1
		for _, p := range rank {
			if load[p]+weight[v] <= bound {
				best = p
				break
			}
		}
		if best < 0 {
			best = rank[0]
			for _, p := range rank {
				if load[p] < load[best] {
					best = p
				}
			}
		}
		out[v] = best
		load[best] += weight[v]
	}
	return out
}

// Scheduler is the smooth weighted round-robin shuffler selection (spec O4):
// deterministic, proportional to active-device weight in the long run, and
// independent of user data.
type Scheduler struct {
	weights []int
	current []int
}

// NewScheduler returns a scheduler over weights.
func NewScheduler(weights []int) *Scheduler {
	return &Scheduler{weights: append([]int(nil), weights...), current: make([]int, len(weights))}
}

// Next returns the next shuffler, skipping vendors for which skip is true
// (spec O4: unavailable ones); if skip leaves no vendor of positive weight,
// it chooses among all of them, since a round always has a shuffler.
func (s *Scheduler) Next(skip func(v int) bool) int {
	if skip != nil {
		eligible := false
		for v, w := range s.weights {
			eligible = eligible || (w > 0 && !skip(v))
		}
		if !eligible {
			skip = nil
		}
	}
	total, best := 0, -1
	for v, w := range s.weights {
		if w <= 0 || (skip != nil && skip(v)) {
			continue
		}
		s.current[v] += w
		total += w
		if best < 0 || s.current[v] > s.current[best] {
			best = v
		}
	}
	if best < 0 {
		return 0
	}
	s.current[best] -= total
	return best
}

// plan is the coordinator's message to encoders and the responder after V*'s
// summary: everything they need to finish the round without the coordinator.
type plan struct {
	T        uint64
	Shuffler uint32
	N, S, K  int
	Counts   []int // C_v + S per vendor
}

func (p *plan) marshal() []byte {
	b := make([]byte, 0, 28+4*len(p.Counts))
	b = binary.BigEndian.AppendUint64(b, p.T)
	b = binary.BigEndian.AppendUint32(b, p.Shuffler)
	b = binary.BigEndian.AppendUint32(b, uint32(p.N))
	b = binary.BigEndian.AppendUint32(b, uint32(p.S))
	b = binary.BigEndian.AppendUint32(b, uint32(p.K))
	b = binary.BigEndian.AppendUint32(b, uint32(len(p.Counts)))
	for _, c := range p.Counts {
		b = binary.BigEndian.AppendUint32(b, uint32(c))
	}
	return b
}

func parsePlan(b []byte) (*plan, error) {
	if len(b) < 28 {
		return nil, errors.New("short plan")
	}
	p := &plan{T: binary.BigEndian.Uint64(b), Shuffler: binary.BigEndian.Uint32(b[8:])}
	p.N = int(binary.BigEndian.Uint32(b[12:]))
	p.S = int(binary.BigEndian.Uint32(b[16:]))
	p.K = int(binary.BigEndian.Uint32(b[20:]))
	n := int(binary.BigEndian.Uint32(b[24:]))
	if n > mohito.MaxVendors || len(b) != 28+4*n || p.N > mohito.MaxRoundMessages || p.K > mohito.MaxRoundMessages {
		return nil, errors.New("malformed plan")
	}
	for i := range n {
		p.Counts = append(p.Counts, int(binary.BigEndian.Uint32(b[28+4*i:])))
	}
	return p, nil
}

// Stage A → C records: batch start(4) ‖ a batch (package records) of (pos ‖ z ‖ k_I^resp ‖ ⟨cmd⟩_D).
func recordSize(p mohito.Params) int {
	return 4 + mohito.EphemeralIDSize + mohito.KeySize + p.DeviceCiphertextSize()
}

func marshalPart(p mohito.Params, start int, cmds []mohito.ShuffledCommand) []byte {
	b := records.Begin(binary.BigEndian.AppendUint32(nil, uint32(start)), len(cmds), recordSize(p))
	for i := range cmds {
		c := &cmds[i]
		b = binary.BigEndian.AppendUint32(b, c.Pos)
		b = append(b, c.Z[:]...)
		b = append(b, c.RespKey[:]...)
		b = append(b, c.DeviceCiphertext...)
	}
	return b
}

func parsePart(p mohito.Params, v int, b []byte) (int, []mohito.ShuffledCommand, error) {
	if len(b) < 4 {
		return 0, nil, errors.New("short part")
	}
	recs, err := records.Parse(b[4:], recordSize(p), mohito.MaxRoundMessages)
	if err != nil {
		return 0, nil, fmt.Errorf("malformed part: %w", err)
	}
	out := make([]mohito.ShuffledCommand, len(recs))
	for i, r := range recs {
		c := &out[i]
		c.Pos = binary.BigEndian.Uint32(r)
		c.Vendor = uint32(v)
		copy(c.Z[:], r[4:])
		copy(c.RespKey[:], r[4+mohito.EphemeralIDSize:])
		c.DeviceCiphertext = r[4+mohito.EphemeralIDSize+mohito.KeySize:]
	}
	return int(binary.BigEndian.Uint32(b)), out, nil
}

// Response slots in Redis: a batch of (pos ‖ key ‖ k_I^resp).
const slotSize = 4 + mohito.EphemeralIDSize + mohito.KeySize

func marshalSlots(slots []mohito.ResponseSlot) []byte {
	b := records.Begin(nil, len(slots), slotSize)
	for _, s := range slots {
		b = binary.BigEndian.AppendUint32(b, s.Pos)
		b = append(b, s.Key[:]...)
		b = append(b, s.RespKey[:]...)
	}
	return b
}

func parseSlots(v int, b []byte) ([]mohito.ResponseSlot, error) {
	recs, err := records.Parse(b, slotSize, mohito.MaxRoundMessages)
	if err != nil {
		return nil, fmt.Errorf("malformed slots: %w", err)
	}
	out := make([]mohito.ResponseSlot, len(recs))
	for i, r := range recs {
		out[i].Pos = binary.BigEndian.Uint32(r)
		out[i].Vendor = uint32(v)
		copy(out[i].Key[:], r[4:])
		copy(out[i].RespKey[:], r[4+mohito.EphemeralIDSize:])
	}
	return out, nil
}

// r′ records from an encoder to the responder: a batch of (pos ‖ value).
func marshalLayer(p mohito.Params, slots []mohito.ResponseSlot, vals [][]byte) []byte {
	b := records.Begin(nil, len(slots), 4+p.ResponseValueSize())
	for i, s := range slots {
		b = binary.BigEndian.AppendUint32(b, s.Pos)
		b = append(b, vals[i]...)
	}
	return b
}

func parseLayer(p mohito.Params, b []byte, into [][]byte) error {
	recs, err := records.Parse(b, 4+p.ResponseValueSize(), len(into))
	if err != nil {
		return fmt.Errorf("malformed layer: %w", err)
	}
	for _, r := range recs {
		pos := int(binary.BigEndian.Uint32(r))
		if pos >= len(into) {
			return errors.New("layer position out of range")
		}
		into[pos] = r[4:]
	}
	return nil
}
