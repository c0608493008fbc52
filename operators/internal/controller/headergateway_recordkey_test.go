package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/internal/specs/lois"
	"github.com/obscura-iot/obscura/services/testenv"
)

// The suite's record key rotation timing (LOISOptions): a staged key waits 2 s to become
// current, a superseded key stays 3 s.
const (
	testRecordKeyStageDelay = 2 * time.Second
	testRecordKeyRetention  = 3 * time.Second
)

// TestHeaderGatewayRotatesRecordKey sets spec.registrar.recordKeyRotation on the sample
// against a real API server: the operator rotates the record key Secret on that period —
// each rotation first stages the next key id beside the current one ("current <old>": the
// pods get the key before a record needs it), then makes it current — records a
// RecordKeyStaged and a RecordKeyRotated Event per rotation, mirrors the rotation in
// status.recordKey and the RecordKeyRotation condition, removes a superseded key after the
// retention (RecordKeyRetired), never reuses an id, and stops rotating when the field is
// unset again (condition and status gone, the key file left as it is).
func TestHeaderGatewayRotatesRecordKey(t *testing.T) {
	ns := namespace(t)
	g := sampleGateway(t, ns)
	const period = 6 * time.Second
	g.Spec.Registrar.RecordKeyRotation = &metav1.Duration{Duration: period}
	create(t, g)
	ctx := context.Background()
	secretKey := client.ObjectKey{Namespace: ns, Name: "edge-lois-record-key"}
	readKeys := func() (*lois.RecordKeys, error) {
		var s corev1.Secret
		if err := k8s.Get(ctx, secretKey, &s); err != nil {
			return nil, err
		}
		return lois.ParseRecordKeys(s.Data[lois.RecordKeyFile])
	}
	var first *lois.RecordKeys
	eventually(t, "the generated one-key file", func() (err error) {
		first, err = readKeys()
		return err
	})
	if first.Staged || first.Current != 0 || len(first.Keys) != 1 {
		t.Fatalf("generated file: current %d staged %v ids %v", first.Current, first.Staged, first.IDs())
	}

	// Every state the Secret passes through, polled: a staged key is always the newest id
	// beside the current one, the current key never goes back, a key is never replaced.
	seen := map[uint32]string{0: first.Keys[0]}
	var sawStaged bool
	var lastCurrent uint32
	check := func() error {
		k, err := readKeys()
		if err != nil {
			return err
		}
		for id, key := range k.Keys {
			if old, ok := seen[id]; ok && old != key {
				return fmt.Errorf("key id %d replaced by another key", id)
			}
			seen[id] = key
		}
		if k.Current < lastCurrent {
			t.Fatalf("current key went back from %d to %d", lastCurrent, k.Current)
		}
		lastCurrent = k.Current
		if k.Staged {
			sawStaged = true
			if k.Highest() != k.Current+1 {
				t.Fatalf("staged key id %d beside current %d", k.Highest(), k.Current)
			}
		}
		return nil
	}
	start := time.Now()
	testenv.Eventually(t, 90*time.Second, "two rotations", func() error {
		if err := check(); err != nil {
			return err
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		if st := g.Status.RecordKey; st == nil || st.Rotations < 2 {
			return fmt.Errorf("status.recordKey %+v", g.Status.RecordKey)
		}
		return nil
	})
	elapsed := time.Since(start)
	if !sawStaged {
		t.Error("no staged state seen: a key was made current without being staged first")
	}
	st := g.Status.RecordKey
	if st.CurrentID < 2 || st.LastRotation == nil || st.NextRotation == nil || !st.NextRotation.After(st.LastRotation.Time) {
		t.Errorf("status.recordKey after two rotations: %+v", st)
	}
	// The period drives it: two rotations take at least one period after the first.
	if elapsed < period {
		t.Errorf("two rotations in %v, period %v", elapsed, period)
	}
	c := meta.FindStatusCondition(g.Status.Conditions, ConditionRecordKeyRotation)
	if c == nil || c.Status != metav1.ConditionTrue || (c.Reason != ReasonRecordKeyRotated && c.Reason != ReasonRecordKeyStaged) ||
		c.ObservedGeneration != g.Generation {
		t.Errorf("condition %s: %+v", ConditionRecordKeyRotation, c)
	}

	// One Staged and one Rotated Event per rotation, each naming its rotation and key ids.
	eventually(t, "the rotations' Events", func() error {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		var rotated, staged, retired []string
		for _, e := range list.Items {
			if e.Regarding.Name != g.Name || e.Type != corev1.EventTypeNormal {
				continue
			}
			switch e.Reason {
			case ReasonRecordKeyRotated:
				rotated = append(rotated, e.Note)
			case ReasonRecordKeyStaged:
				staged = append(staged, e.Note)
			case ReasonRecordKeyRetired:
				retired = append(retired, e.Note)
			}
		}
		slices.Sort(rotated)
		if len(rotated) < 2 || !strings.HasPrefix(rotated[0], "rotation 1: session records are sealed under record key id 1 (was 0)") ||
			!strings.HasPrefix(rotated[1], "rotation 2: session records are sealed under record key id 2 (was 1)") {
			return fmt.Errorf("RecordKeyRotated events %q", rotated)
		}
		if len(staged) < 2 {
			return fmt.Errorf("RecordKeyStaged events %q", staged)
		}
		if len(retired) < 1 || !strings.Contains(strings.Join(retired, "\n"), "record key id 0 removed") {
			return fmt.Errorf("RecordKeyRetired events %q", retired)
		}
		return nil
	})
	// Key 0 left the file after the retention; the file still holds the current key and
	// the keys superseded less than the retention ago (status lists them with their time).
	eventually(t, "key 0 removed", func() error {
		k, err := readKeys()
		if err != nil {
			return err
		}
		if _, ok := k.Keys[0]; ok {
			return fmt.Errorf("key 0 still in %v", k.IDs())
		}
		if _, ok := k.Keys[k.Current]; !ok {
			return fmt.Errorf("current %d not in %v", k.Current, k.IDs())
		}
		return nil
	})

	// Unset: no more rotations, condition and status gone, the keys left as they are.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
		t.Fatal(err)
	}
	g.Spec.Registrar.RecordKeyRotation = nil
	update(t, g)
	eventually(t, "rotation off", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		if g.Status.RecordKey != nil || meta.FindStatusCondition(g.Status.Conditions, ConditionRecordKeyRotation) != nil {
			return fmt.Errorf("status.recordKey %+v, conditions %v", g.Status.RecordKey, g.Status.Conditions)
		}
		return nil
	})
	before, err := readKeys()
	if err != nil {
		t.Fatal(err)
	}
	// A staged key left behind is still promoted by nobody: the file stays as it was for
	// more than a period (the reconciler still runs: status is observed every 15 s).
	time.Sleep(period + testRecordKeyStageDelay)
	after, err := readKeys()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before.IDs(), after.IDs()) || before.Current != after.Current {
		t.Errorf("rotation off, yet the file changed: ids %v → %v, current %d → %d", before.IDs(), after.IDs(), before.Current, after.Current)
	}
}

// TestRecordKeyFileRoundTrip: the operator reads and writes the record key file in the
// services' format (services/pkg/lois/roles RecordSeal): a bare key is id 0, "current" marks
// a staged rotation, and rendering keeps ids and keys.
func TestRecordKeyFileRoundTrip(t *testing.T) {
	k0, k1 := strings.Repeat("ab", 32), strings.Repeat("CD", 32)
	k, err := lois.ParseRecordKeys([]byte(k0 + "\n"))
	if err != nil || k.Current != 0 || k.Staged || k.Keys[0] != k0 {
		t.Fatalf("bare key: %+v %v", k, err)
	}
	k.Keys[1] = newRecordKeyHex()
	k.Staged = true
	got, err := lois.ParseRecordKeys(k.Render())
	if err != nil || !got.Staged || got.Current != 0 || got.Highest() != 1 || got.Keys[1] != k.Keys[1] {
		t.Fatalf("staged render %q: %+v %v", k.Render(), got, err)
	}
	got.Current, got.Staged = 1, false
	if s := string(got.Render()); strings.Contains(s, "current") || !strings.Contains(s, "\n0 "+k0+"\n1 ") {
		t.Fatalf("promoted render %q", s)
	}
	if k, err := lois.ParseRecordKeys([]byte("0 " + k0 + "\n1 " + k1 + "\ncurrent 0\n")); err != nil || !k.Staged || k.Keys[1] != strings.ToLower(k1) {
		t.Fatalf("services' staged form: %+v %v", k, err)
	}
	for name, bad := range map[string]string{"empty": "# none\n", "short": "0 abcd\n", "dup": "1 " + k0 + "\n1 " + k1 + "\n",
		"unknown current": k0 + "\ncurrent 4\n", "fields": "0 " + k0 + " x\n"} {
		if _, err := lois.ParseRecordKeys([]byte(bad)); err == nil {
			t.Errorf("%s accepted", name)
		} else if strings.Contains(err.Error(), k0) {
			t.Errorf("%s: the error quotes a key", name)
		}
	}
}
