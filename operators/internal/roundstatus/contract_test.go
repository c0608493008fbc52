package roundstatus_test

// The operator reads what the services write without either importing the other's internals
// in production code (DESIGN.md); this test imports both to prove they agree.

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/obscura-iot/obscura/operators/internal/roundstatus"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roles"
)

func TestNamesAgree(t *testing.T) {
	pairs := map[string][2]string{
		"status bucket":           {roundstatus.BucketStatus, roles.BucketStatus},
		"integrator stream":       {roundstatus.StreamIntegratorIn, roles.StreamIntegratorIn},
		"decrypt worker consumer": {roundstatus.ConsumerDecryptWorkers, roles.ConsumerDecryptWorkers},
		"series key":              {roundstatus.SeriesKey("ns_home"), roles.StatusSeriesKey("ns_home")},
		"vendor key":              {roundstatus.VendorKey(3), roles.StatusVendorKey(3)},
		"shuffler key":            {roundstatus.ShufflerKey(3), roles.StatusShufflerKey(3)},
	}
	for what, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("%s: operator reads %q, services write %q", what, p[0], p[1])
		}
	}
}

// strictRoundTrip marshals what the services write and decodes it into what the operator
// reads, refusing fields the operator does not know.
func strictRoundTrip(t *testing.T, written, read any) {
	t.Helper()
	b, err := json.Marshal(written)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(read); err != nil {
		t.Fatalf("operator cannot read %T: %v (%s)", written, err, b)
	}
	back, err := json.Marshal(read)
	if err != nil {
		t.Fatal(err)
	}
	var a, c map[string]any
	_ = json.Unmarshal(b, &a)
	_ = json.Unmarshal(back, &c)
	if !reflect.DeepEqual(a, c) {
		t.Errorf("%T loses fields on the way: wrote %s, read back %s", written, b, back)
	}
}

func TestStatusJSONAgrees(t *testing.T) {
	active := int64(12)
	strictRoundTrip(t, roles.SeriesStatus{CurrentRound: 9, CompletedRounds: 8, AbortedRounds: 1, LastRoundSeconds: 1.5,
		CommandsPerSecond: 300, FakeRatio: 0.25, Bursts: 2, Updated: "2026-11-22T10:00:00Z"}, &roundstatus.Series{})
	strictRoundTrip(t, roles.VendorStatus{RoundsServed: 8, ShufflerDuty: 3, ActiveDevices: &active}, &roundstatus.Vendor{})
	strictRoundTrip(t, roles.ShufflerStatus{RoundsShuffled: 3, LastRound: 9, LastResult: "Completed"}, &roundstatus.Shuffler{})
}
