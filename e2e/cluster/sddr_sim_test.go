package cluster

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/services/pkg/sddr/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

// The EncounterSimulation sample (config/samples/sddr_v1alpha1_encountersimulation.yaml): a
// city of 400 devices over a simulated day in two shards, which the operator runs as an
// Indexed Job of `sddr simulate` (the release's sddr image), the shards exchanging the adverts
// that cross shards over the release's NATS in the simulation's own account.
const simName = "sim"

func (e *env) simulation() (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(sddrAPI)
	u.SetKind("EncounterSimulation")
	return u, e.k.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: simName}, u)
}

// simCondition is the status of condition typ, with its reason and message.
func simCondition(u *unstructured.Unstructured, typ string) (status, reason, message string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			return s, r, msg
		}
	}
	return "", "", ""
}

// runSimulation applies the sample and waits for it to complete: an Indexed Job with
// completions = parallelism = 2 whose two pods (indexes 0 and 1) both succeeded, status
// Complete with 2 of 2 shards done, and status.results equal to the merge of the two
// termination messages the ConfigMap holds — every count the sum of the shards', adverts
// crossed between the shards over NATS.
func (e *env) runSimulation() {
	e.t.Helper()
	ctx := context.Background()
	u := e.readSample("sddr_v1alpha1_encountersimulation.yaml")
	u.SetNamespace(e.ns)
	if err := e.k.Create(ctx, u); err != nil {
		e.t.Fatalf("apply the EncounterSimulation sample: %v", err)
	}
	var sim *unstructured.Unstructured
	testenv.Eventually(e.t, 8*time.Minute, "EncounterSimulation "+simName+" Complete", func() error {
		var err error
		if sim, err = e.simulation(); err != nil {
			return err
		}
		if s, r, m := simCondition(sim, "Failed"); s == "True" {
			e.t.Fatalf("EncounterSimulation failed: %s: %s", r, m)
		}
		if s, r, m := simCondition(sim, "Complete"); s != "True" {
			return fmt.Errorf("Complete=%s (%s: %s)", s, r, m)
		}
		return nil
	})
	if done, _, _ := unstructured.NestedInt64(sim.Object, "status", "shardsDone"); done != 2 {
		e.t.Errorf("status.shardsDone = %d, want 2", done)
	}

	// The Job: Indexed, 2 completions run 2 at a time, both indexes succeeded. The simulation
	// completes as soon as both termination messages are read; the Job controller may count
	// the last pod a moment later.
	jobName, _, _ := unstructured.NestedString(sim.Object, "status", "job")
	var job batchv1.Job
	testenv.Eventually(e.t, time.Minute, "Job "+jobName+" complete with indexes 0,1", func() error {
		if err := e.k.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: jobName}, &job); err != nil {
			return err
		}
		if job.Spec.CompletionMode == nil || *job.Spec.CompletionMode != batchv1.IndexedCompletion || *job.Spec.Completions != 2 || *job.Spec.Parallelism != 2 {
			e.t.Fatalf("Job %s: mode %v completions %d parallelism %d", jobName, ptrString(job.Spec.CompletionMode), *job.Spec.Completions, *job.Spec.Parallelism)
		}
		complete := false
		for _, c := range job.Status.Conditions {
			complete = complete || c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue
		}
		if !complete || job.Status.Succeeded != 2 || job.Status.CompletedIndexes != "0,1" {
			return fmt.Errorf("complete %v, succeeded %d, completed indexes %q", complete, job.Status.Succeeded, job.Status.CompletedIndexes)
		}
		return nil
	})
	var pods corev1.PodList
	if err := e.k.List(ctx, &pods, client.InNamespace(e.ns), client.MatchingLabels{"batch.kubernetes.io/job-name": jobName}); err != nil {
		e.t.Fatal(err)
	}
	var indexes []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded {
			indexes = append(indexes, p.Annotations["batch.kubernetes.io/job-completion-index"])
		}
	}
	sort.Strings(indexes)
	if fmt.Sprint(indexes) != "[0 1]" {
		e.t.Errorf("succeeded pods' completion indexes %v, want [0 1]", indexes)
	}

	// The ConfigMap: each shard's termination message and their merge; status.results is the
	// merge, every count the sum of the shards'.
	cmName, _, _ := unstructured.NestedString(sim.Object, "status", "resultsConfigMap")
	var cm corev1.ConfigMap
	if err := e.k.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: cmName}, &cm); err != nil {
		e.t.Fatalf("results ConfigMap: %v", err)
	}
	var shards []*contract.Result
	for i := range 2 {
		r, err := contract.Parse([]byte(cm.Data[fmt.Sprintf("shard-%d.json", i)]))
		if err != nil {
			e.t.Fatalf("ConfigMap %s, shard %d: %v", cmName, i, err)
		}
		if r.Shard != i || r.Shards != 2 || r.RunID != string(sim.GetUID()) {
			e.t.Errorf("shard %d's result: shard %d of %d, run %q", i, r.Shard, r.Shards, r.RunID)
		}
		shards = append(shards, r)
	}
	merged, err := contract.Parse([]byte(cm.Data["result.json"]))
	if err != nil || !merged.Complete() {
		e.t.Fatalf("ConfigMap %s, result.json: %v (complete %v)", cmName, err, err == nil && merged.Complete())
	}
	res, _, _ := unstructured.NestedMap(sim.Object, "status", "results")
	count := func(k string) int64 {
		switch v := res[k].(type) {
		case int64:
			return v
		case float64:
			return int64(v)
		}
		return -1
	}
	sum := func(f func(*contract.Result) int64) int64 { return f(shards[0]) + f(shards[1]) }
	for k, want := range map[string]int64{
		"devices":           sum(func(r *contract.Result) int64 { return r.ShardDevices }),
		"inquiries":         sum(func(r *contract.Result) int64 { return r.Inquiries }),
		"responses":         sum(func(r *contract.Result) int64 { return r.Responses }),
		"encounters":        sum(func(r *contract.Result) int64 { return r.Encounters }),
		"friendEncounters":  sum(func(r *contract.Result) int64 { return r.FriendEncounters }),
		"recognitions":      sum(func(r *contract.Result) int64 { return r.Recognitions }),
		"missed":            sum(func(r *contract.Result) int64 { return r.Missed }),
		"falseRecognitions": sum(func(r *contract.Result) int64 { return r.FalseRecognitions }),
		"crossAdverts":      sum(func(r *contract.Result) int64 { return r.CrossAdverts }),
	} {
		if got := count(k); got != want {
			e.t.Errorf("status.results.%s = %d, the shards' sum %d", k, got, want)
		}
	}
	if merged.Encounters != count("encounters") || merged.Recognitions != count("recognitions") {
		e.t.Errorf("result.json: %d encounters, %d recognitions; status %d, %d", merged.Encounters, merged.Recognitions, count("encounters"), count("recognitions"))
	}
	if count("encounters") <= 0 || count("recognitions") <= 0 || count("crossAdverts") <= 0 || count("missed") != 0 {
		e.t.Errorf("a day of a 400-device city: %d encounters, %d recognitions, %d adverts across shards, %d missed",
			count("encounters"), count("recognitions"), count("crossAdverts"), count("missed"))
	}
	for k, want := range map[string]float64{
		"deviceHours": shards[0].DeviceHours + shards[1].DeviceHours,
		"cpuSeconds":  shards[0].CPUSeconds + shards[1].CPUSeconds,
	} {
		s, _ := res[k].(string)
		got, err := strconv.ParseFloat(s, 64)
		if err != nil || got < want-0.001 || got > want+0.001 {
			e.t.Errorf("status.results.%s = %q, the shards' sum %.3f", k, s, want)
		}
	}
	energy, _, _ := unstructured.NestedSlice(sim.Object, "status", "results", "energy")
	if len(energy) == 0 {
		e.t.Error("status.results.energy is empty")
	}
	rate, _ := res["deviceHoursPerCPUSecond"].(string)
	note := fmt.Sprintf("EncounterSimulation sample: 2 shards, %d encounters, %d recognitions, %d false, %d adverts across shards; %s device-hours per CPU-second, wall %s s",
		count("encounters"), count("recognitions"), count("falseRecognitions"), count("crossAdverts"), rate, res["wallSeconds"])
	e.t.Log(note)
	e.report.Notes = append(e.report.Notes, note)

	// The shards' NATS password is a secret no pod log may hold.
	var sec corev1.Secret
	if err := e.k.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: simName + "-sddr-sim-nats"}, &sec); err != nil {
		e.t.Errorf("the simulation's NATS credentials: %v", err)
	} else if pw := string(sec.Data["password"]); pw != "" {
		e.secrets["sddr-sim NATS password"] = pw
	}
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprint(*p)
}

// deleteSimulation removes the sample; its Job, pods, ConfigMap and Secret go with it.
func (e *env) deleteSimulation() {
	_, _ = e.try("kubectl", "delete", "-n", e.ns, "--wait", "--timeout", "2m", "--ignore-not-found", "encountersimulations.sddr.obscura.dev/"+simName)
}
