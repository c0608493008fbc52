package controller

import (
	pdacontract "github.com/obscura-iot/obscura/services/pkg/pda/contract"

	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/api/common"
	pdav1 "github.com/obscura-iot/obscura/operators/api/pda/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs/pda"

	// The services' own ring decoder: a contract test that what the operator writes is what
	// the front-ends read (the operator code itself never imports it).
	"github.com/obscura-iot/obscura/services/pkg/pda/ring"
)

// pdaJob is a ready-to-run job in a fresh namespace, with both trust domains and their keys.
func pdaJob(t *testing.T, window pdav1.Window, shards int32) (*pdav1.AggregationJob, string, string) {
	t.Helper()
	ns := namespace(t)
	proxyNS, dbNS := ns+"-proxy", ns+"-db"
	for _, n := range []string{proxyNS, dbNS} {
		create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	keySecret(t, proxyNS, "proxy-keys", 32)
	keySecret(t, dbNS, "db-keys", 32)
	job := aggregationJob(ns, proxyNS, dbNS)
	job.Spec.Window, job.Spec.Shards = window, shards
	job.Spec.ResultSink = pdav1.ResultSink{ConfigMap: &common.LocalObjectReference{Name: "attackers-result"}}
	create(t, job)
	t.Cleanup(func() { deleteJob(t, job) })
	return job, proxyNS, dbNS
}

// deleteJob deletes a job and waits until its finalizer has let it go.
func deleteJob(t *testing.T, job *pdav1.AggregationJob) {
	t.Helper()
	if err := k8s.Delete(context.Background(), job); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, "job "+job.Name+" deleted", func() error {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), &pdav1.AggregationJob{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

func waitPhase(t *testing.T, job *pdav1.AggregationJob, want pdav1.Phase) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s phase %s", job.Name, want), func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
			return err
		}
		if job.Status.Phase != want {
			return fmt.Errorf("phase %s", job.Status.Phase)
		}
		return nil
	})
}

// kv opens (creating it as the services do) one of the PDA services' buckets.
func kv(t *testing.T, bucket string) jetstream.KeyValue {
	t.Helper()
	b, err := js(t).CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: bucket, Storage: jetstream.FileStorage, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func shardSet(t *testing.T, job *pdav1.AggregationJob) *appsv1.StatefulSet {
	t.Helper()
	var s appsv1.StatefulSet
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: job.Spec.Database.Namespace, Name: job.Name + "-db-shard"}, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

func waitShardReplicas(t *testing.T, job *pdav1.AggregationJob, want int32) {
	t.Helper()
	eventually(t, fmt.Sprintf("shard StatefulSet at %d replicas", want), func() error {
		var s appsv1.StatefulSet
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: job.Spec.Database.Namespace, Name: job.Name + "-db-shard"}, &s); err != nil {
			return err
		}
		if *s.Spec.Replicas != want {
			return fmt.Errorf("%d replicas", *s.Spec.Replicas)
		}
		return nil
	})
}

// currentRing reads the ring document with the services' decoder.
func currentRing(t *testing.T) (*ring.Ring, []byte) {
	t.Helper()
	e, err := kv(t, pdacontract.RingBucket).Get(context.Background(), pdacontract.RingKey)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ring.Decode(e.Value())
	if err != nil {
		t.Fatalf("the services reject the operator's ring document %s: %v", e.Value(), err)
	}
	return r, e.Value()
}

// TestAggregationJobWindowLifecycle: the clock drives Pending → Collecting → Mixing, then the
// KV entries the services write drive Aggregating → Revealing → Complete, with an Event per
// transition; Complete copies the results into the ConfigMap sink.
func TestAggregationJobWindowLifecycle(t *testing.T) {
	start := time.Now().Truncate(time.Second).Add(3 * time.Second)
	job, proxyNS, dbNS := pdaJob(t, pdav1.Window{Start: &metav1.Time{Time: start}, Duration: &metav1.Duration{Duration: 3 * time.Second}}, 2)
	conds := func() []metav1.Condition { return job.Status.Conditions }

	waitPhase(t, job, pdav1.PhasePending)
	waitRollingOut(t, job, conds)
	for _, want := range []struct{ ns, name string }{
		{proxyNS, "attackers-proxy"}, {proxyNS, "attackers-mixer"}, {proxyNS, "attackers-oracle"}, {dbNS, "attackers-db-frontend"},
	} {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: want.ns, Name: want.name}, &appsv1.Deployment{}); err != nil {
			t.Errorf("Deployment %s/%s: %v", want.ns, want.name, err)
		}
	}
	if n := *shardSet(t, job).Spec.Replicas; n != 2 {
		t.Errorf("shards StatefulSet has %d replicas, want 2", n)
	}
	markAvailable(t, proxyNS)
	markAvailable(t, dbNS)
	waitReady(t, job, conds, metav1.ConditionTrue, common.ReasonReconciled)

	waitPhase(t, job, pdav1.PhaseCollecting)
	waitPhase(t, job, pdav1.PhaseMixing)
	if job.Status.Window == nil {
		t.Fatal("no window id in status")
	}
	w := strconv.FormatInt(*job.Status.Window, 10)
	if want := start.Unix() / 3; *job.Status.Window != want {
		t.Errorf("window id %d, want %d (start ÷ length)", *job.Status.Window, want)
	}

	// The mixer seals the window.
	putJSON(t, kv(t, pdacontract.WindowsBucket), w, map[string]any{"state": "sealed", "closed_at": time.Now(), "last_seq": 9, "total": 42, "batches": []string{"b1"}})
	waitPhase(t, job, pdav1.PhaseAggregating)
	if job.Status.Submissions != 42 {
		t.Errorf("submissions = %d, want the sealed total 42", job.Status.Submissions)
	}
	// The front-end pins the ring and records the Seal.
	cur, raw := currentRing(t)
	dbw := kv(t, pdacontract.DBWindowsBucket)
	if _, err := dbw.Put(context.Background(), w+".ring", raw); err != nil {
		t.Fatal(err)
	}
	putJSON(t, dbw, w+".seal", map[string]any{"window": *job.Status.Window, "total": 42, "batches": []string{"b1"}})
	waitPhase(t, job, pdav1.PhaseRevealing)
	// The shards publish the merged result.
	putJSON(t, kv(t, pdacontract.ResultsBucket), w, map[string]any{"window": *job.Status.Window, "ring_version": cur.Version(),
		"shards": cur.Shards(), "revealed": []map[string]any{{"key": "198.51.100.7", "type": 1, "count": 3}, {"key": "203.0.113.9", "type": 1, "count": 2}}})
	waitPhase(t, job, pdav1.PhaseComplete)
	eventually(t, "results in the ConfigMap sink", func() error {
		var cm corev1.ConfigMap
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: job.Namespace, Name: "attackers-result"}, &cm); err != nil {
			return err
		}
		if cm.Data["keys"] != "198.51.100.7\n203.0.113.9\n" {
			return fmt.Errorf("keys %q", cm.Data["keys"])
		}
		var res pdacontract.WindowResult
		if err := json.Unmarshal([]byte(cm.Data["result.json"]), &res); err != nil || len(res.Revealed) != 2 {
			return fmt.Errorf("result.json %q: %v", cm.Data["result.json"], err)
		}
		return nil
	})
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	if job.Status.RevealedKeys != 2 || job.Status.RingVersion != int64(cur.Version()) || job.Status.ResultsPublished == nil {
		t.Errorf("status after Complete: revealed %d, ring %d (want %d), published %v",
			job.Status.RevealedKeys, job.Status.RingVersion, cur.Version(), job.Status.ResultsPublished)
	}
	for _, p := range []pdav1.Phase{pdav1.PhaseCollecting, pdav1.PhaseMixing, pdav1.PhaseAggregating, pdav1.PhaseRevealing, pdav1.PhaseComplete} {
		waitEvent(t, job, corev1.EventTypeNormal, string(p))
	}
	waitEvent(t, job, corev1.EventTypeNormal, ReasonResultsPublished)
}

// TestAggregationJobResharding: shards 2 → 3 before the database routes the window bumps the
// ring version and scales the StatefulSet; about 1/3 of the key space moves, and only to the
// new shard. Once the window is pinned to the 3-shard ring, going back to 2 shards bumps the
// ring again but keeps shard 2 running until the window's results are out: no pinned entry
// is ever left without its shard, none is routed twice. Deleting the job removes its
// workloads in both trust domains.
func TestAggregationJobResharding(t *testing.T) {
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	job, proxyNS, dbNS := pdaJob(t, pdav1.Window{Start: &metav1.Time{Time: start}, Duration: &metav1.Duration{Duration: 7 * time.Second}}, 2)
	waitPhase(t, job, pdav1.PhaseMixing)
	waitShardReplicas(t, job, 2)
	eventually(t, "ring of the job's 2 shards", func() error {
		r, _ := currentRing(t)
		if fmt.Sprint(r.Shards()) != fmt.Sprint(pda.ShardIDs(job, 2)) {
			return fmt.Errorf("ring shards %v", r.Shards())
		}
		return nil
	})
	before, _ := currentRing(t)

	job.Spec.Shards = 3
	update(t, job)
	waitShardReplicas(t, job, 3)
	var after *ring.Ring
	eventually(t, "ring version bumped to 3 shards", func() error {
		after, _ = currentRing(t)
		if after.Version() != before.Version()+1 || len(after.Shards()) != 3 {
			return fmt.Errorf("ring v%d with %v (was v%d)", after.Version(), after.Shards(), before.Version())
		}
		return nil
	})
	waitEvent(t, job, corev1.EventTypeNormal, ReasonRingUpdated)
	moved, n := 0, 30000
	newShard := pda.ShardIDs(job, 3)[2]
	for i := range n {
		h := sha256.Sum256([]byte("PDA-key" + strconv.Itoa(i)))
		pos := binary.BigEndian.Uint64(h[:8])
		if a, b := before.Owner(pos), after.Owner(pos); a != b {
			moved++
			if b != newShard {
				t.Fatalf("key moved from %s to %s, not to the new shard", a, b)
			}
		}
	}
	if f := float64(moved) / float64(n); f < 0.25 || f > 0.42 {
		t.Errorf("%.3f of the key space moved, want about 1/3", f)
	}

	// The front-end routes the window: it pins the 3-shard ring.
	eventually(t, "window id", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
			return err
		}
		if job.Status.Window == nil {
			return fmt.Errorf("none")
		}
		return nil
	})
	w := strconv.FormatInt(*job.Status.Window, 10)
	_, raw := currentRing(t)
	if _, err := kv(t, pdacontract.DBWindowsBucket).Put(context.Background(), w+".ring", raw); err != nil {
		t.Fatal(err)
	}
	job.Spec.Shards = 2
	update(t, job)
	eventually(t, "ring version bumped back to 2 shards", func() error {
		r, _ := currentRing(t)
		if r.Version() != after.Version()+1 || len(r.Shards()) != 2 {
			return fmt.Errorf("ring v%d with %v", r.Version(), r.Shards())
		}
		return nil
	})
	eventually(t, "status shows the pinned ring", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
			return err
		}
		if job.Status.RingVersion != int64(after.Version()) || job.Status.RingShards != 3 {
			return fmt.Errorf("ring v%d with %d shards", job.Status.RingVersion, job.Status.RingShards)
		}
		return nil
	})
	if n := *shardSet(t, job).Spec.Replicas; n != 3 {
		t.Fatalf("shard StatefulSet scaled to %d while the window is pinned to 3 shards", n)
	}
	putJSON(t, kv(t, pdacontract.ResultsBucket), w, map[string]any{"window": *job.Status.Window, "ring_version": after.Version(),
		"shards": after.Shards(), "revealed": []any{}})
	waitPhase(t, job, pdav1.PhaseComplete)
	waitShardReplicas(t, job, 2)

	// Deletion removes everything in both trust domains.
	deleteJob(t, job)
	for _, ns := range []string{proxyNS, dbNS} {
		for _, l := range pdaKinds() {
			if err := k8s.List(context.Background(), l, client.InNamespace(ns), client.MatchingLabels{pda.LabelJob: job.Name}); err != nil {
				t.Fatal(err)
			}
			items, _ := metaItems(l)
			for _, o := range items {
				if o.GetDeletionTimestamp() == nil {
					t.Errorf("%T %s/%s survived the job", o, ns, o.GetName())
				}
			}
		}
	}
}

// TestAggregationJobWithoutNATSWaits: with no NATS connection a closed window stays
// Collecting with a condition saying why, never a guessed phase.
func TestAggregationJobWithoutNATSWaits(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &AggregationJobReconciler{Recorder: rec}
	job := aggregationJob("ns", "p", "d")
	job.Status.Phase = pdav1.PhaseCollecting
	start := metav1.NewTime(time.Now().Add(-2 * time.Hour))
	o, next := r.advance(context.Background(), job, start, metav1.NewTime(start.Add(time.Hour)), ready("ok"))
	if job.Status.Phase != pdav1.PhaseCollecting || o.reason != ReasonServicesNotObserved || !o.progressing || next != 0 {
		t.Fatalf("phase %s, outcome %+v, next %s", job.Status.Phase, o, next)
	}
	if !contains(o.message, "no NATS connection") {
		t.Errorf("message does not say why: %s", o.message)
	}
}

// TestShardsScaleSubresourceAndBacklog (issue 14 item 2): an AggregationJob's shards are its
// scale subresource (replicas = the ring in force, selector = the shard pods), so kubectl scale
// or an HPA resizes the ring; with spec.shardAutoscale the operator follows the shards' backlog
// — 45 sub-batch messages pending at a target of 10 per shard: 2 → 5 shards — and says why.
func TestShardsScaleSubresourceAndBacklog(t *testing.T) {
	ctx := context.Background()
	start := time.Now().Truncate(time.Second)
	job, _, _ := pdaJob(t, pdav1.Window{Start: &metav1.Time{Time: start}, Duration: &metav1.Duration{Duration: time.Hour}}, 1)
	waitShardReplicas(t, job, 1)
	scale := &autoscalingv1.Scale{}
	eventually(t, "the scale subresource shows the ring and the shard pods", func() error {
		if err := k8s.SubResource("scale").Get(ctx, job, scale); err != nil {
			return err
		}
		if scale.Status.Replicas != 1 || scale.Status.Selector == "" {
			return fmt.Errorf("scale status %+v", scale.Status)
		}
		return nil
	})
	scale.Spec.Replicas = 2
	if err := k8s.SubResource("scale").Update(ctx, job, client.WithSubResourceBody(scale)); err != nil {
		t.Fatal(err)
	}
	waitShardReplicas(t, job, 2)

	j := js(t)
	stream, err := j.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: pdacontract.ShardStream, Subjects: []string{"pda.v1.shard.>"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.DeleteStream(context.Background(), pdacontract.ShardStream) })
	ids := pda.ShardIDs(job, 2)
	for _, id := range ids {
		if _, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "shard-" + id, AckPolicy: jetstream.AckExplicitPolicy,
			FilterSubject: "pda.v1.shard." + id + ".>"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 45 {
		if _, err := j.Publish(ctx, "pda.v1.shard."+ids[0]+".1", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	job.Spec.ShardAutoscale = &pdav1.ShardAutoscale{Min: 1, Max: 5, TargetLag: 10}
	update(t, job)
	eventually(t, "shards scaled to the backlog", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return err
		}
		if job.Spec.Shards != 5 || job.Status.LastShardScaleTime == nil {
			return fmt.Errorf("shards %d, last scale %v", job.Spec.Shards, job.Status.LastShardScaleTime)
		}
		return nil
	})
	waitShardReplicas(t, job, 5)
	eventually(t, "a ScaleUp event for the shards", func() error {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(job.Namespace)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == job.Name && e.Reason == "ScaleUp" && strings.Contains(e.Note, "2→5 database shards: lag 45") {
				return nil
			}
		}
		return fmt.Errorf("not among %d events", len(list.Items))
	})
}

// TestShardsFollowThePooledSubmissions (issue 14 item 2): in window mode nothing reaches a
// shard before the seal, so while the window collects the shard autoscaler counts the submit
// requests pooled for it — 30 requests at a target of 10 per shard: 1 → 3 shards, before the
// seal, so the window is routed with the grown ring.
func TestShardsFollowThePooledSubmissions(t *testing.T) {
	ctx := context.Background()
	start := time.Now().Truncate(time.Second)
	job, _, _ := pdaJob(t, pdav1.Window{Start: &metav1.Time{Time: start}, Duration: &metav1.Duration{Duration: time.Hour}}, 1)
	waitShardReplicas(t, job, 1)
	_, w := pda.Window(metav1.Time{Time: start}, metav1.Time{Time: start.Add(time.Hour)})
	j := js(t)
	if _, err := j.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: pdacontract.PoolStream, Subjects: []string{"pda.v1.pool.>"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.DeleteStream(context.Background(), pdacontract.PoolStream) })
	for i := range 30 {
		if _, err := j.Publish(ctx, pdacontract.PoolSubject(w), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Another window's pool does not count.
	if _, err := j.Publish(ctx, pdacontract.PoolSubject(w+1), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	job.Spec.ShardAutoscale = &pdav1.ShardAutoscale{Min: 1, Max: 3, TargetLag: 10}
	update(t, job)
	waitShardReplicas(t, job, 3)
	eventually(t, "a ScaleUp event for the shards from the pooled requests", func() error {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(job.Namespace)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == job.Name && e.Reason == "ScaleUp" && strings.Contains(e.Note, "1→3 database shards: lag 30 ") {
				return nil
			}
		}
		return fmt.Errorf("not among %d events", len(list.Items))
	})
}

// TestAggregationJobRingRetriedAfterNATSOutage: a shard change made while NATS is down cannot
// write the ring (RingUnavailable). Nothing in the cluster changes when NATS comes back, so the
// job must look again by itself: without a retry it stayed RingUnavailable and its shards never
// scaled (the cluster e2e's PDA phase right after NATS restarted for an account change).
func TestAggregationJobRingRetriedAfterNATSOutage(t *testing.T) {
	start := time.Now().Add(time.Hour).Truncate(time.Second)
	job, _, _ := pdaJob(t, pdav1.Window{Start: &metav1.Time{Time: start}, Duration: &metav1.Duration{Duration: time.Hour}}, 2)
	ringShards := func() (int, error) {
		e, err := kv(t, pdacontract.RingBucket).Get(context.Background(), pdacontract.RingKey)
		if err != nil {
			return 0, err
		}
		r, err := ring.Decode(e.Value())
		if err != nil {
			return 0, err
		}
		return len(r.Shards()), nil
	}
	eventually(t, "ring of the job's 2 shards", func() error {
		if n, err := ringShards(); err != nil || n != 2 {
			return fmt.Errorf("ring of %d shards (%v)", n, err)
		}
		return nil
	})
	natsServer.Down()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := natsServer.Restart(); err != nil {
				t.Error(err)
			}
		}
	})
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	job.Spec.Shards = 3
	update(t, job)
	waitReady(t, job, func() []metav1.Condition { return job.Status.Conditions }, metav1.ConditionFalse, ReasonRingUnavailable)
	if err := natsServer.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	eventually(t, "ring of 3 shards written once NATS is back, with no change to the job", func() error {
		if n, err := ringShards(); err != nil || n != 3 {
			return fmt.Errorf("ring of %d shards (%v)", n, err)
		}
		return nil
	})
	waitShardReplicas(t, job, 3)
}
