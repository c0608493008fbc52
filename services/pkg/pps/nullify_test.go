package pps

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func layoutOf(n, minInputs int, identity Fixed) *InputLayout {
	l := &InputLayout{MinInputs: minInputs}
	for range n {
		l.Slots = append(l.Slots, SlotSpec{Identity: identity})
	}
	return l
}

func TestNullify(t *testing.T) {
	tests := []struct {
		name      string
		slots     int
		minInputs int
		nulls     map[int]NullReason
		wantN     []uint32
		wantValid int
		wantErr   error
	}{
		{"none nullified", 4, 2, nil, nil, 4, nil},
		{"missing and inconsistent", 5, 2, map[int]NullReason{1: Missing, 3: Inconsistent}, []uint32{1, 3}, 3, nil},
		{"exactly minInputs", 3, 2, map[int]NullReason{0: NotAllowed}, []uint32{0}, 2, nil},
		{"below minInputs is ⊥", 3, 3, map[int]NullReason{2: Erased}, []uint32{2}, 2, ErrInsufficient},
		{"all nullified with minInputs 0 is ⊥", 2, 0, map[int]NullReason{0: Missing, 1: Missing}, []uint32{0, 1}, 0, ErrInsufficient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Nullify(layoutOf(tt.slots, tt.minInputs, 0), tt.nulls)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Nullify: %v, want %v", err, tt.wantErr)
			}
			if a.ValidCount() != tt.wantValid || !slices.Equal(a.Nullified(), tt.wantN) {
				t.Fatalf("valid %d nullified %v, want %d %v", a.ValidCount(), a.Nullified(), tt.wantValid, tt.wantN)
			}
			for s, r := range tt.nulls {
				if a.Reason(s) != r {
					t.Errorf("slot %d reason %v, want %v", s, a.Reason(s), r)
				}
			}
		})
	}
	if _, err := Nullify(layoutOf(2, 1, 0), map[int]NullReason{2: Missing}); err == nil || errors.Is(err, ErrInsufficient) {
		t.Fatalf("a slot out of range: %v", err)
	}
}

func TestConstInputHardWiresIdentityAndValidity(t *testing.T) {
	identities := []Fixed{0, One, MaxFixed, MinFixed}
	l := &InputLayout{MinInputs: 1}
	for _, id := range identities {
		l.Slots = append(l.Slots, SlotSpec{Identity: id})
	}
	nulls := map[int]NullReason{0: Missing, 1: Inconsistent, 3: NotAllowed} // slot 2 valid
	a, err := Nullify(l, nulls)
	if err != nil {
		t.Fatal(err)
	}
	for s, id := range identities {
		var got uint32
		for j := range ValueBits {
			isConst, bit := a.ConstInput(s*ValueBits + j)
			if _, nullified := nulls[s]; isConst != nullified {
				t.Fatalf("slot %d bit %d: const %v, nullified %v", s, j, isConst, nullified)
			}
			if bit {
				got |= 1 << j
			}
		}
		if _, nullified := nulls[s]; nullified && Fixed(got) != id {
			t.Errorf("slot %d hard-wired %#x, identity %#x", s, got, uint32(id))
		}
		isConst, bit := a.ConstInput(l.ValidityWire(s))
		if _, nullified := nulls[s]; !isConst || bit == nullified {
			t.Errorf("slot %d validity wire: const %v bit %v, want const and %v", s, isConst, bit, !nullified)
		}
	}
	xs, valid := a.ModelInputs([]Fixed{5, 6, 7, 8})
	if !slices.Equal(xs, []Fixed{0, One, 7, MinFixed}) || !slices.Equal(valid, []bool{false, false, true, false}) {
		t.Fatalf("ModelInputs = %v %v", xs, valid)
	}
}

// TestInconsistentPublishersAreNullified runs the consistency check and nullification
// together: exactly the publishers that cheated (of every kind in spec §10 #3) lose their slot.
func TestInconsistentPublishersAreNullified(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	w := newPSIWorld(10, rng)
	recv := w.honest()
	recv[PositionOf(2, 0)].Label[3] ^= 1                               // a random label
	recv[PositionOf(5, 9)].Label = ValueLabels(&w.seeds[5], 0)[10][0]  // another bit position
	recv[PositionOf(7, 31)].Label = ValueLabels(&w.seeds[8], 0)[31][1] // another publisher
	other := PRF(&w.seeds[9], "next round")
	recv[PositionOf(9, 4)].Label = ValueLabels(&other, 0)[4][0]                             // another round
	recv = slices.DeleteFunc(recv, func(r ReceivedLabel) bool { return r.Pos.Slot() == 1 }) // missing
	bad, err := (&OPRFChecker{Garbler: &loopback{labels: w.source}}).Check(context.Background(), ExecID{9}, recv)
	if err != nil {
		t.Fatal(err)
	}
	nulls := map[int]NullReason{1: Missing}
	for _, s := range BadSlots(bad) {
		nulls[int(s)] = Inconsistent
	}
	a, err := Nullify(layoutOf(10, 5, 0), nulls)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint32{1, 2, 5, 7, 9}; !slices.Equal(a.Nullified(), want) {
		t.Fatalf("nullified %v, want %v", a.Nullified(), want)
	}
	if a.ValidCount() != 5 {
		t.Fatalf("valid %d, want 5", a.ValidCount())
	}
}
