package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/api/common"
	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// js connects to the suite's NATS server as the services would.
func js(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(natsServer.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	j, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func putJSON(t *testing.T, kv jetstream.KeyValue, key string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, b); err != nil {
		t.Fatal(err)
	}
}

// TestStatusFromTheServicesKV writes what a coordinator writes after a round and expects the
// Round, Vendor and Shuffler status to show it.
func TestStatusFromTheServicesKV(t *testing.T) {
	ns, rd, vs, ss := newSeries(t)
	markAvailableWhenCreated(t, ns)
	ctx := context.Background()
	kv, err := js(t).CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: contract.BucketStatus})
	if err != nil {
		t.Fatal(err)
	}
	putJSON(t, kv, contract.StatusSeriesKey(mohito.SeriesName(rd)), contract.SeriesStatus{CurrentRound: 42, CompletedRounds: 40, AbortedRounds: 1,
		LastRoundSeconds: 1.934, CommandsPerSecond: 5100, FakeRatio: 0.41, Bursts: 2, Updated: time.Now().UTC().Format(time.RFC3339)})
	putJSON(t, kv, contract.StatusVendorKey(1), contract.VendorStatus{RoundsServed: 40, ShufflerDuty: 27, ActiveDevices: ptr.To[int64](180)})
	putJSON(t, kv, contract.StatusShufflerKey(1), contract.ShufflerStatus{RoundsShuffled: 26, LastRound: 41, LastResult: "Completed"})

	eventually(t, "round status from KV", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rd), rd); err != nil {
			return err
		}
		st := rd.Status
		if st.CurrentRound == nil || *st.CurrentRound != 42 || st.CompletedRounds != 40 || st.AbortedRounds != 1 || st.Bursts != 2 ||
			st.CommandsPerSecond != 5100 || st.LastRoundSeconds == nil || math.Abs(st.LastRoundSeconds.AsApproximateFloat64()-1.934) > 1e-9 ||
			st.FakeRatio == nil || math.Abs(st.FakeRatio.AsApproximateFloat64()-0.41) > 1e-9 {
			return fmt.Errorf("status %+v (current round %v)", st, st.CurrentRound)
		}
		return nil
	})
	if rd.Status.CapacityPercent != 100 || rd.Status.LastCapacityChange != nil {
		t.Fatalf("no capacity classes: capacityPercent %d, last change %+v; want 100 and none", rd.Status.CapacityPercent, rd.Status.LastCapacityChange)
	}
	// The coordinator raises the series' capacity class: the Round shows it and says so once.
	at := time.Now().UTC().Truncate(time.Second)
	putJSON(t, kv, contract.StatusSeriesKey(mohito.SeriesName(rd)), contract.SeriesStatus{CurrentRound: 43, CompletedRounds: 41,
		CapacityClass: 1, CapacityPercent: 150, CapacityChange: &contract.CapacityChange{At: at.Format(time.RFC3339), FromPercent: 100,
			ToPercent: 150, Rounds: 300, BurstRate: 0.12, MinFakeRatio: 0}, Updated: at.Format(time.RFC3339)})
	eventually(t, "capacity class from KV", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rd), rd); err != nil {
			return err
		}
		c := rd.Status.LastCapacityChange
		if rd.Status.CapacityPercent != 150 || c == nil || !c.Time.Time.Equal(at) || c.FromPercent != 100 || c.ToPercent != 150 ||
			!strings.Contains(c.Message, "12.0% of them burst") {
			return fmt.Errorf("capacityPercent %d, last change %+v", rd.Status.CapacityPercent, c)
		}
		return nil
	})
	waitEvent(t, rd, corev1.EventTypeNormal, ReasonCapacityRaised)
	eventually(t, "vendor status from KV", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(vs[1]), vs[1]); err != nil {
			return err
		}
		if vs[1].Status.RoundsServed != 40 || vs[1].Status.ShufflerDuty != 27 || vs[1].Status.ActiveDevices != 180 {
			return fmt.Errorf("status %+v", vs[1].Status)
		}
		return nil
	})
	eventually(t, "shuffler status from KV", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(ss[1]), ss[1]); err != nil {
			return err
		}
		if ss[1].Status.RoundsShuffled != 26 || ss[1].Status.LastRound == nil || *ss[1].Status.LastRound != 41 || ss[1].Status.LastResult != "Completed" {
			return fmt.Errorf("status %+v", ss[1].Status)
		}
		return nil
	})
}

// markAvailableWhenCreated plays the workload controllers for a namespace until the test ends.
func markAvailableWhenCreated(t *testing.T, ns string) {
	t.Helper()
	eventually(t, "workloads created", func() error {
		var ds appsv1.DeploymentList
		if err := k8s.List(context.Background(), &ds, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(ds.Items) < 4 {
			return fmt.Errorf("%d deployments", len(ds.Items))
		}
		return nil
	})
	markAvailable(t, ns)
}

// TestVendorRegistry: the operator registers every vendor in NATS KV and removes the entry
// (through its finalizer) when the Vendor is deleted.
func TestVendorRegistry(t *testing.T) {
	ns := namespace(t)
	keySecret(t, ns, "initech-key", X25519KeySize)
	v := vendor(ns, "initech", 40, 77)
	create(t, v)
	ctx := context.Background()
	j := js(t)
	var reg contract.Registration
	eventually(t, "vendor registered", func() error {
		kv, err := j.KeyValue(ctx, contract.BucketVendors)
		if err != nil {
			return err
		}
		e, err := kv.Get(ctx, "40")
		if err != nil {
			return err
		}
		return json.Unmarshal(e.Value(), &reg)
	})
	if reg.Name != "initech" || reg.Devices != 77 || reg.PaddedEntries != 200 || reg.Namespace != ns {
		t.Errorf("registration %+v", reg)
	}
	if err := k8s.Delete(ctx, v); err != nil {
		t.Fatal(err)
	}
	eventually(t, "vendor deregistered and gone", func() error {
		kv, err := j.KeyValue(ctx, contract.BucketVendors)
		if err != nil {
			return err
		}
		if _, err := kv.Get(ctx, "40"); err == nil {
			return fmt.Errorf("registration still present")
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(v), v); err == nil {
			return fmt.Errorf("vendor still present (finalizers %v)", v.Finalizers)
		}
		return nil
	})
}

// decryptWorkersConsumer creates the integrator's inbound stream and the decrypt workers'
// consumer on it, as the services do, and deletes the stream when the test ends.
func decryptWorkersConsumer(t *testing.T, j jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	stream, err := j.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: contract.StreamIntegratorIn, Subjects: []string{"mohito.i.in.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: contract.ConsumerDecryptWorkers, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.DeleteStream(context.Background(), contract.StreamIntegratorIn) })
}

// TestAutoscalerScalesOnConsumerLag puts a real backlog on the decrypt workers' consumer and
// expects the operator to add workers, with an Event carrying the figures.
func TestAutoscalerScalesOnConsumerLag(t *testing.T) {
	ns, rd, _, _ := newSeries(t)
	markAvailableWhenCreated(t, ns)
	ctx := context.Background()
	j := js(t)
	decryptWorkersConsumer(t, j)
	// 4,500 pending at a target of 1,000 per worker: 5 workers (max 6).
	// In batches that wait for their acks: the client stalls above its outstanding-publish
	// limit (4,000 by default) on a busy machine.
	for i := range 4500 {
		if _, err := j.PublishAsync("mohito.i.in.v0.r.1.shuffled", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		if i%500 == 499 || i == 4499 {
			select {
			case <-j.PublishAsyncComplete():
			case <-time.After(30 * time.Second):
				t.Fatal("publishes not acknowledged")
			}
		}
	}
	eventually(t, "decrypt workers scaled to the backlog", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rd), rd); err != nil {
			return err
		}
		if r := rd.Spec.DecryptWorkers.Replicas; r == nil || *r != 5 {
			return fmt.Errorf("replicas %v", r)
		}
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "home-decrypt-worker"}, d); err != nil {
			return err
		}
		if *d.Spec.Replicas != 5 {
			return fmt.Errorf("deployment runs %d", *d.Spec.Replicas)
		}
		return nil
	})
	waitEvent(t, rd, "Normal", "ScaleUp")
	if rd.Status.LastScaleTime == nil {
		t.Error("no lastScaleTime after scaling")
	}

	// With the autoscaler External, the operator leaves the count to the scale subresource.
	rd.Spec.DecryptWorkers.Autoscaler = mohitov1.AutoscalerExternal
	rd.Spec.DecryptWorkers.Replicas = ptr.To[int32](3)
	update(t, rd)
	eventually(t, "external count applied and kept", func() error {
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "home-decrypt-worker"}, d); err != nil {
			return err
		}
		if *d.Spec.Replicas != 3 {
			return fmt.Errorf("deployment runs %d", *d.Spec.Replicas)
		}
		return nil
	})
	markAvailable(t, ns)
	waitReady(t, rd, func() []metav1.Condition { return rd.Status.Conditions }, metav1.ConditionTrue, common.ReasonReconciled)
	if *rd.Spec.DecryptWorkers.Replicas != 3 {
		t.Errorf("the operator overrode an external count: %d", *rd.Spec.DecryptWorkers.Replicas)
	}
}

// TestAutoscalerReadsTheWorkNotTheRoundTime: every round lasts its period plus the vendors'
// fixed response deadline whatever the load (G7), so a round time of 3 periods with little work
// must not add workers — the operator once scaled every stage to its maximum that way — while
// work above 80 % of the period must.
func TestAutoscalerReadsTheWorkNotTheRoundTime(t *testing.T) {
	ns, rd, _, _ := newSeries(t)
	markAvailableWhenCreated(t, ns)
	ctx := context.Background()
	j := js(t)
	decryptWorkersConsumer(t, j)
	kv, err := j.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: contract.BucketStatus})
	if err != nil {
		t.Fatal(err)
	}
	period := rd.Spec.Period.Duration.Seconds()
	report := func(round int, work float64) {
		putJSON(t, kv, contract.StatusSeriesKey(mohito.SeriesName(rd)), contract.SeriesStatus{CurrentRound: uint64(round), CompletedRounds: int64(round),
			LastRoundSeconds: 3 * period, LastProcessingSeconds: work, Updated: time.Unix(int64(1_700_000_000+round), 0).UTC().Format(time.RFC3339)})
	}
	// Little work in long rounds: the operator reads them and stays at min (2).
	for i := 1; i <= 5; i++ {
		report(i, 0.1*period)
		eventually(t, fmt.Sprintf("round %d reported", i), func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(rd), rd); err != nil {
				return err
			}
			if rd.Status.CurrentRound == nil || *rd.Status.CurrentRound != int64(i) || rd.Status.LastRoundWork == nil {
				return fmt.Errorf("status round %v, work %v", rd.Status.CurrentRound, rd.Status.LastRoundWork)
			}
			return nil
		})
	}
	if r := rd.Spec.DecryptWorkers.Replicas; r == nil || *r != 2 || rd.Status.LastScaleTime != nil {
		t.Fatalf("rounds of 3 periods with 10 %% of a period of work scaled the workers to %v (last scale %v); want 2, never scaled", r, rd.Status.LastScaleTime)
	}
	// Work of 2 periods: 2 / (0.8 × 1) = 2.5 × 2 workers → 5.
	for i := 6; i <= 8; i++ {
		report(i, 2*period)
	}
	waitEvent(t, rd, "Normal", "ScaleUp")
	eventually(t, "workers scaled to the work", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rd), rd); err != nil {
			return err
		}
		if r := rd.Spec.DecryptWorkers.Replicas; r == nil || *r != 5 {
			return fmt.Errorf("replicas %v", r)
		}
		return nil
	})
}

// TestEncodersScaleOnBacklog (issue 14 item 2): with spec.encoders.autoscale the operator sets
// the partitions from the records pending on the encoders' consumers — 35 pending at a target of
// 10 per partition asks for 4 (max 4), capped at the series' 2 vendors since a partition owns
// whole vendors — rolls the encoders' StatefulSet to them and says why.
func TestEncodersScaleOnBacklog(t *testing.T) {
	ns, rd, _, _ := newSeries(t)
	markAvailableWhenCreated(t, ns)
	ctx := context.Background()
	j := js(t)
	stream, err := j.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: contract.StreamWork, Subjects: []string{contract.WorkSubjects}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.DeleteStream(context.Background(), contract.StreamWork) })
	if _, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: contract.EncoderConsumer(0, 1),
		AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for i := range 35 {
		if _, err := j.Publish(ctx, fmt.Sprintf("mohito.r.1.part.%d", i), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(rd), rd); err != nil {
		t.Fatal(err)
	}
	rd.Spec.Encoders = mohitov1.Encoders{Partitions: 1, Autoscale: true, Min: 1, Max: 4, TargetLag: 10}
	update(t, rd)
	eventually(t, "encoder partitions scaled to the backlog", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rd), rd); err != nil {
			return err
		}
		// The backlog asks for 4 (35 pending, 10 each) but the series has 2 vendors: a partition
		// owns whole vendors, so a third and fourth would idle.
		if p := rd.Spec.Encoders.Partitions; p != 2 {
			return fmt.Errorf("partitions %d", p)
		}
		var sts appsv1.StatefulSet
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "home-encoder"}, &sts); err != nil {
			return err
		}
		if *sts.Spec.Replicas != 2 {
			return fmt.Errorf("the encoders' StatefulSet runs %d", *sts.Spec.Replicas)
		}
		return nil
	})
	eventually(t, "a ScaleUp event for the encoders", func() error {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == rd.Name && e.Reason == "ScaleUp" && strings.Contains(e.Note, "1→2 encoder partitions: lag 35") {
				return nil
			}
		}
		return fmt.Errorf("not among %d events", len(list.Items))
	})
	if rd.Status.LastEncoderScaleTime == nil {
		t.Error("no lastEncoderScaleTime after scaling the encoders")
	}
}
