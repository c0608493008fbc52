package pps

import (
	"errors"
	"slices"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/gc"
)

// GarblerInputsParallel gives exactly GarblerInputs' inputs whatever the worker count, with
// nullified slots and validity constants where GarblerInputs puts them, and fails as it does
// when a slot's labels cannot be derived.
func TestGarblerInputsParallelEqualsSequential(t *testing.T) {
	const n = 3*parallelSlotsMin + 7
	_, labels, a, want := inputsFixture(t, n, 0, 3, map[int]NullReason{0: Missing, parallelSlotsMin: Inconsistent, n - 1: Erased, 2*parallelSlotsMin + 1: NotAllowed})
	for _, w := range []int{2, 3, 4, 64} {
		got, err := GarblerInputsParallel(a, labels, w)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%d workers: inputs differ from GarblerInputs'", w)
		}
	}
	if want[0].Const != true || want[parallelSlotsMin*ValueBits].Const != true || want[ValueBits].A0 == want[ValueBits].A1 {
		t.Error("nullified slots not constant or a valid slot without two labels")
	}
	boom := errors.New("no seed")
	bad := func(s int) (*[ValueBits]LabelPair, error) {
		if s == 2*parallelSlotsMin+3 {
			return nil, boom
		}
		return labels(s)
	}
	if _, err := GarblerInputsParallel(a, bad, 4); !errors.Is(err, boom) {
		t.Errorf("labels error: %v, want %v", err, boom)
	}
}

// GarblerInputsDerived over inputs derived in place (ValueInputs) for some slots, the others
// derived through labels, gives exactly GarblerInputs' inputs: the nullified slots' derived
// labels replaced by their constants, the validity constants set.
func TestGarblerInputsDerivedEqualsGarblerInputs(t *testing.T) {
	const n = 40
	seeds, labels, a, want := inputsFixture(t, n, 0xA5, 5, map[int]NullReason{0: Missing, 7: Inconsistent, n - 1: Erased, 20: NotAllowed})
	in := make([]gc.Input, len(want))
	derived := func(s int) bool { return s%3 != 1 } // slots 1, 4, … through labels
	for s := range n {
		if derived(s) { // nullified slots 0 and 39 too: their labels must be overwritten
			ValueInputs(&seeds[s], s%5, in[s*ValueBits:])
		}
	}
	got, err := GarblerInputsDerived(a, in, derived, labels)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Error("inputs differ from GarblerInputs'")
	}
	boom := errors.New("no seed")
	bad := func(int) (*[ValueBits]LabelPair, error) { return nil, boom }
	if _, err := GarblerInputsDerived(a, make([]gc.Input, len(want)), derived, bad); !errors.Is(err, boom) {
		t.Errorf("labels error: %v, want %v", err, boom)
	}
	if _, err := GarblerInputsDerived(a, make([]gc.Input, len(want)-1), derived, labels); err == nil {
		t.Error("a short input slice was accepted")
	}
}

// inputsFixture is n slots of one value each: slot s's seed (s, s>>8 ^ tag), its labels under
// function key epoch s mod epochs, the slots nulls nullifies, and GarblerInputs' inputs for them.
func inputsFixture(t *testing.T, n int, tag byte, epochs int, nulls map[int]NullReason) ([]Seed, SlotLabels, *Assignment, []gc.Input) {
	t.Helper()
	seeds := make([]Seed, n)
	for s := range seeds {
		seeds[s][0], seeds[s][1] = byte(s), byte(s>>8)^tag
	}
	labels := func(s int) (*[ValueBits]LabelPair, error) {
		l := ValueLabels(&seeds[s], s%epochs)
		return &l, nil
	}
	a, err := Nullify(layoutOf(n, 1, 0), nulls)
	if err != nil {
		t.Fatal(err)
	}
	want, err := GarblerInputs(a, labels)
	if err != nil {
		t.Fatal(err)
	}
	return seeds, labels, a, want
}
