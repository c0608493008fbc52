package controller

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	loisv1 "github.com/obscura-iot/obscura/operators/api/lois/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs/lois"
)

// The record key rotation's condition, and the reasons of its condition and Events.
const (
	// ConditionRecordKeyRotation says where the rotation of spec.registrar.recordKeyRotation
	// stands (absent when the key is not rotated).
	ConditionRecordKeyRotation = "RecordKeyRotation"
	// ReasonRecordKeyScheduled: no rotation yet; the first is at status.recordKey.nextRotation.
	ReasonRecordKeyScheduled = "RecordKeyScheduled"
	// ReasonRecordKeyStaged: a new key is in the Secret, records are still sealed under the
	// current one until every pod's mounted Secret has it (an Event too).
	ReasonRecordKeyStaged = "RecordKeyStaged"
	// ReasonRecordKeyRotated: the staged key was made current (an Event per rotation).
	ReasonRecordKeyRotated = "RecordKeyRotated"
	// ReasonRecordKeyRetired: a superseded key left the Secret (an Event).
	ReasonRecordKeyRetired = "RecordKeyRetired"
	// ReasonRecordKeyUnreadable: the record key Secret does not parse; nothing is rotated.
	ReasonRecordKeyUnreadable = "RecordKeyUnreadable"
)

// The rotation's schedule lives on the record key Secret, written with its keys in one update,
// so a status write that fails (or a restarted operator) never loses a rotation or a key to
// remove; status.recordKey mirrors it.
const (
	annRecordKeyRotatedAt = "lois.obscura.dev/record-key-rotated-at"
	annRecordKeyRotations = "lois.obscura.dev/record-key-rotations"
	annRecordKeyPromoteAt = "lois.obscura.dev/record-key-promote-at"
	annRecordKeyRemovePfx = "lois.obscura.dev/record-key-remove-"
)

// defaultRecordKeyStageDelay is how long a staged key waits to become current: the kubelet
// updates a mounted Secret within its sync period (1m) plus its cache's TTL.
const defaultRecordKeyStageDelay = 2 * time.Minute

type recordKeyEvent struct{ reason, note string }

// rotateRecordKey drives the record key rotation (docs/lois.md "Record key rotation") on
// spec.registrar.recordKeyRotation: when a rotation is due less the stage delay, a key with
// the next id is added with "current <old id>" (staged: the CI and SI pods get it with their
// mounted Secret while nothing is sealed under it yet); at the rotation the current line goes
// and the new key is current (the registrar reads its file again before sealing); a
// superseded key is removed once the session stream cannot hold a record sealed under it. It
// returns how long until the next step (0: nothing scheduled).
func (r *HeaderGatewayReconciler) rotateRecordKey(ctx context.Context, g *loisv1.HeaderGateway) (time.Duration, error) {
	period := g.Spec.Registrar.RecordKeyRotation
	if period == nil || period.Duration <= 0 {
		g.Status.RecordKey = nil
		meta.RemoveStatusCondition(&g.Status.Conditions, ConditionRecordKeyRotation)
		return 0, nil
	}
	reader := r.APIReader // the Secret as written last, not as the cache may still show it
	if reader == nil {
		reader = r.Client
	}
	var sec corev1.Secret
	name := lois.Name(g, "record-key")
	if err := reader.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: name}, &sec); err != nil {
		return 0, fmt.Errorf("get record key Secret %s/%s: %w", g.Namespace, name, err)
	}
	keys, err := lois.ParseRecordKeys(sec.Data[lois.RecordKeyFile])
	if err != nil {
		g.Status.RecordKey = nil
		meta.SetStatusCondition(&g.Status.Conditions, metav1.Condition{Type: ConditionRecordKeyRotation, Status: metav1.ConditionFalse,
			Reason: ReasonRecordKeyUnreadable, ObservedGeneration: g.Generation,
			Message: fmt.Sprintf("Secret %s entry %s: %v; the key is not rotated until it parses", name, lois.RecordKeyFile, err)})
		return period.Duration, nil
	}
	now := time.Now().Truncate(time.Second)
	stageDelay := min(cmp.Or(r.RecordKeyStageDelay, defaultRecordKeyStageDelay), period.Duration/2)
	retention := cmp.Or(r.RecordKeyRetention, lois.SessionStreamMaxAge+lois.RecordKeySlack)
	ann := sec.Annotations
	if ann == nil {
		ann = map[string]string{}
	}
	var events []recordKeyEvent
	changed := false

	// Superseded keys whose records the stream can no longer hold leave the file.
	for k, v := range ann {
		idStr, ok := strings.CutPrefix(k, annRecordKeyRemovePfx)
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(idStr, 10, 32)
		at, terr := time.Parse(time.RFC3339, v)
		if err != nil || terr != nil {
			continue // not ours to interpret: left as it is
		}
		if _, held := keys.Keys[uint32(id)]; !held || uint32(id) == keys.Current {
			delete(ann, k) // removed by hand, or made current again by hand: nothing to remove
			changed = true
			continue
		}
		if now.Before(at) {
			continue
		}
		delete(keys.Keys, uint32(id))
		delete(ann, k)
		changed = true
		events = append(events, recordKeyEvent{ReasonRecordKeyRetired, fmt.Sprintf(
			"record key id %d removed from Secret %s: the session stream holds no record sealed under it any more", id, name)})
	}

	rotatedAt := parseAnnTime(ann[annRecordKeyRotatedAt], sec.CreationTimestamp.Time)
	rotations, _ := strconv.ParseInt(ann[annRecordKeyRotations], 10, 64)
	if keys.Staged {
		promoteAt, ok := time.Time{}, false
		if v, has := ann[annRecordKeyPromoteAt]; has {
			promoteAt, ok = parseAnnTimeOK(v)
		}
		if !ok { // staged by hand: the pods get a full stage delay from now
			promoteAt, changed = now.Add(stageDelay), true
			ann[annRecordKeyPromoteAt] = promoteAt.UTC().Format(time.RFC3339)
		}
		if !now.Before(promoteAt) {
			old, next := keys.Current, keys.Highest()
			keys.Current, keys.Staged = next, false
			rotations++
			rotatedAt = now
			removeAt := now.Add(retention)
			ann[annRecordKeyRemovePfx+strconv.FormatUint(uint64(old), 10)] = removeAt.UTC().Format(time.RFC3339)
			ann[annRecordKeyRotatedAt] = now.UTC().Format(time.RFC3339)
			ann[annRecordKeyRotations] = strconv.FormatInt(rotations, 10)
			delete(ann, annRecordKeyPromoteAt)
			changed = true
			events = append(events, recordKeyEvent{ReasonRecordKeyRotated, fmt.Sprintf(
				"rotation %d: session records are sealed under record key id %d (was %d); key id %d stays in Secret %s until %s for the records sealed under it",
				rotations, next, old, old, name, removeAt.UTC().Format(time.RFC3339))})
		}
	} else {
		delete(ann, annRecordKeyPromoteAt)
		if due := rotatedAt.Add(period.Duration); !now.Before(due.Add(-stageDelay)) {
			next := keys.Highest() + 1
			keys.Keys[next] = newRecordKeyHex()
			keys.Staged = true
			promoteAt := maxTime(due, now.Add(stageDelay))
			ann[annRecordKeyPromoteAt] = promoteAt.UTC().Format(time.RFC3339)
			changed = true
			events = append(events, recordKeyEvent{ReasonRecordKeyStaged, fmt.Sprintf(
				"record key id %d added to Secret %s; records stay sealed under key id %d until %s, while the pods' mounted Secrets get it",
				next, name, keys.Current, promoteAt.UTC().Format(time.RFC3339))})
		}
	}

	if changed {
		sec.Data[lois.RecordKeyFile] = keys.Render()
		sec.Annotations = ann
		if err := r.Update(ctx, &sec); err != nil {
			return 0, fmt.Errorf("rotate record key Secret %s/%s: %w", g.Namespace, name, err)
		}
	}
	for _, e := range events {
		r.Recorder.Eventf(g, nil, corev1.EventTypeNormal, e.reason, "RotateRecordKey", "%s", e.note)
	}
	st, wake := recordKeyStatus(keys, ann, rotations, rotatedAt, period.Duration, stageDelay, now)
	g.Status.RecordKey = st
	cond := metav1.Condition{Type: ConditionRecordKeyRotation, Status: metav1.ConditionTrue, ObservedGeneration: g.Generation}
	ids := fmt.Sprint(keys.IDs())
	switch {
	case keys.Staged:
		cond.Reason = ReasonRecordKeyStaged
		cond.Message = fmt.Sprintf("key id %d staged (the Secret holds ids %s), sealing under key id %d until %s",
			*st.StagedID, ids, st.CurrentID, st.PromoteAt.UTC().Format(time.RFC3339))
	case rotations > 0:
		cond.Reason = ReasonRecordKeyRotated
		cond.Message = fmt.Sprintf("rotation %d at %s: sealing under key id %d (the Secret holds ids %s); next rotation at %s",
			rotations, rotatedAt.UTC().Format(time.RFC3339), st.CurrentID, ids, st.NextRotation.UTC().Format(time.RFC3339))
	default:
		cond.Reason = ReasonRecordKeyScheduled
		cond.Message = fmt.Sprintf("sealing under key id %d; first rotation at %s", st.CurrentID, st.NextRotation.UTC().Format(time.RFC3339))
	}
	meta.SetStatusCondition(&g.Status.Conditions, cond)
	return wake, nil
}

// recordKeyStatus mirrors the Secret's keys and schedule, and returns how long until the next
// step (a key to stage or promote, or one to remove).
func recordKeyStatus(keys *lois.RecordKeys, ann map[string]string, rotations int64, rotatedAt time.Time, period, stageDelay time.Duration,
	now time.Time) (*loisv1.RecordKeyStatus, time.Duration) {
	st := &loisv1.RecordKeyStatus{CurrentID: int64(keys.Current), Rotations: rotations}
	if rotations > 0 {
		st.LastRotation = &metav1.Time{Time: rotatedAt}
	}
	next := rotatedAt.Add(period)
	step := next.Add(-stageDelay)
	if keys.Staged {
		id := int64(keys.Highest())
		st.StagedID = &id
		next, _ = parseAnnTimeOK(ann[annRecordKeyPromoteAt])
		st.PromoteAt = &metav1.Time{Time: next}
		step = next
	}
	st.NextRotation = &metav1.Time{Time: next}
	for k, v := range ann {
		idStr, ok := strings.CutPrefix(k, annRecordKeyRemovePfx)
		id, err := strconv.ParseInt(idStr, 10, 64)
		at, tok := parseAnnTimeOK(v)
		if !ok || err != nil || !tok {
			continue
		}
		st.Retiring = append(st.Retiring, loisv1.RetiringRecordKey{ID: id, RemoveAt: metav1.Time{Time: at}})
		if at.Before(step) {
			step = at
		}
	}
	slices.SortFunc(st.Retiring, func(a, b loisv1.RetiringRecordKey) int { return cmp.Compare(a.ID, b.ID) })
	return st, max(step.Sub(now), time.Second)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func parseAnnTimeOK(v string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, v)
	return t, err == nil
}

func parseAnnTime(v string, def time.Time) time.Time {
	if t, ok := parseAnnTimeOK(v); ok {
		return t
	}
	return def
}

// newRecordKeyHex is a fresh record key as its file holds it (32 random bytes, hex).
func newRecordKeyHex() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	defer clear(b)
	return hex.EncodeToString(b)
}
