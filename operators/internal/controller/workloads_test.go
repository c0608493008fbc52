package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/api/common"
	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// newSeries creates a ready-to-run series in a fresh namespace: two vendors (the first with a
// hosted agent), a shuffler each, key Secrets and the Round.
func newSeries(t *testing.T) (string, *mohitov1.Round, []*mohitov1.Vendor, []*mohitov1.Shuffler) {
	t.Helper()
	ns := namespace(t)
	keySecret(t, ns, "integrator-key", X25519KeySize)
	var vs []*mohitov1.Vendor
	var ss []*mohitov1.Shuffler
	for i, name := range []string{"acme", "globex"} {
		keySecret(t, ns, name+"-key", X25519KeySize)
		v := vendor(ns, name, int32(i), int64(100*(i+1)))
		if i == 0 {
			v.Spec.Agent = &mohitov1.VendorAgent{Replicas: 1, Devices: &common.SecretFileReference{Name: "acme-devices"}}
			create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "acme-devices"},
				Data: map[string][]byte{mohito.DevicesFile: []byte("[]")}})
		}
		create(t, v)
		s := shuffler(ns, name+"-shuffler", name)
		create(t, s)
		vs, ss = append(vs, v), append(ss, s)
	}
	rd := round(ns, "home")
	rd.Spec.Gateway.Tokens = &common.SecretFileReference{Name: "home-tokens", Key: "users"}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "home-tokens"},
		Data: map[string][]byte{"users": []byte(`{"t": "alice"}`)}})
	rd.Spec.Encoders.Partitions = 3
	rd.Spec.DecryptWorkers = mohitov1.DecryptWorkers{Min: 2, Max: 6, TargetLag: 1000}
	create(t, rd)
	return ns, rd, vs, ss
}

func get(t *testing.T, obj client.Object) {
	t.Helper()
	eventually(t, fmt.Sprintf("%T %s exists", obj, obj.GetName()), func() error {
		return k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
	})
}

func ownedBy(t *testing.T, obj client.Object, owner client.Object) {
	t.Helper()
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID == owner.GetUID() && ref.Controller != nil && *ref.Controller && ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion {
			return
		}
	}
	t.Errorf("%T %s is not controlled by %s (owner references %v): deleting %s would leave it behind",
		obj, obj.GetName(), owner.GetName(), obj.GetOwnerReferences(), owner.GetName())
}

func TestRoundRunsItsWorkloads(t *testing.T) {
	ns, rd, vs, _ := newSeries(t)
	conds := func() []metav1.Condition { return rd.Status.Conditions }
	waitRollingOut(t, rd, conds)

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "home-deployment"}}
	get(t, cm)
	ownedBy(t, cm, rd)
	var doc contract.DeploymentFile
	if err := json.Unmarshal([]byte(cm.Data[contract.DeploymentKey]), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Vendors) != 2 || doc.Vendors[1].Name != "globex" || doc.Encoders != 3 || doc.Period != "2s" {
		t.Errorf("deployment document does not describe the series: %+v", doc)
	}

	deployments := map[string]int32{"home-coordinator": 1, "home-gateway": 2, "home-decrypt-worker": 2, "home-responder": 1}
	for name, replicas := range deployments {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		get(t, d)
		ownedBy(t, d, rd)
		if *d.Spec.Replicas != replicas {
			t.Errorf("%s runs %d replicas, want %d", name, *d.Spec.Replicas, replicas)
		}
	}
	enc := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "home-encoder"}}
	get(t, enc)
	ownedBy(t, enc, rd)
	if *enc.Spec.Replicas != 3 {
		t.Errorf("encoder partitions = %d, want 3", *enc.Spec.Replicas)
	}
	// The scalable stages spread by hostname as the API server stored them (testRuntime:
	// ScheduleAnyway); the coordinator does not.
	dw := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "home-decrypt-worker"}}
	get(t, dw)
	coordinator := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "home-coordinator"}}
	get(t, coordinator)
	for name, c := range map[string][]corev1.TopologySpreadConstraint{"home-decrypt-worker": dw.Spec.Template.Spec.TopologySpreadConstraints,
		"home-encoder": enc.Spec.Template.Spec.TopologySpreadConstraints} {
		if len(c) != 1 || c[0].TopologyKey != corev1.LabelHostname || c[0].WhenUnsatisfiable != corev1.ScheduleAnyway || c[0].MaxSkew != 1 {
			t.Errorf("%s spread constraints %+v: want maxSkew 1 by hostname, ScheduleAnyway", name, c)
		}
	}
	if c := coordinator.Spec.Template.Spec.TopologySpreadConstraints; len(c) != 0 {
		t.Errorf("the coordinator is spread: %+v", c)
	}
	for _, name := range []string{"home-gateway", "home-decrypt-worker", "home-encoder"} {
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		get(t, pdb)
		ownedBy(t, pdb, rd)
	}
	for _, name := range []string{"home-gateway", "home-encoder"} {
		get(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}
	natsSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "home-nats"}}
	get(t, natsSecret)
	ownedBy(t, natsSecret, rd)
	password := string(natsSecret.Data["password"])
	if len(password) != 64 {
		t.Errorf("generated NATS password has %d characters, want 64 hex", len(password))
	}

	markAvailable(t, ns)
	waitReady(t, rd, conds, metav1.ConditionTrue, common.ReasonReconciled)
	if rd.Status.WorkerReplicas != 2 || rd.Status.WorkerSelector == "" {
		t.Errorf("status workers %d selector %q", rd.Status.WorkerReplicas, rd.Status.WorkerSelector)
	}

	// An HPA drives the workers through the scale subresource once the Round hands scaling
	// to it (with autoscaler Operator, the operator's next decision would replace the count).
	rd.Spec.DecryptWorkers.Autoscaler = mohitov1.AutoscalerExternal
	update(t, rd)
	scale := &autoscalingv1.Scale{}
	if err := k8s.SubResource("scale").Get(context.Background(), rd, scale); err != nil {
		t.Fatalf("get scale: %v", err)
	}
	if scale.Status.Replicas != 2 || scale.Status.Selector != rd.Status.WorkerSelector {
		t.Errorf("scale status %+v", scale.Status)
	}
	scale.Spec.Replicas = 5
	if err := k8s.SubResource("scale").Update(context.Background(), rd, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("update scale: %v", err)
	}
	workers := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "home-decrypt-worker"}}
	eventually(t, "decrypt workers follow the scale subresource", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(workers), workers); err != nil {
			return err
		}
		if *workers.Spec.Replicas != 5 {
			return fmt.Errorf("%d replicas", *workers.Spec.Replicas)
		}
		return nil
	})

	// A parameter change rolls every integrator workload with a new config hash, and the
	// generated NATS password survives it.
	coord := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "home-coordinator"}}
	get(t, coord)
	before := coord.Spec.Template.Annotations[mohito.ConfigHashAnnotation]
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(rd), rd); err != nil {
		t.Fatal(err)
	}
	rd.Spec.CommandSize = 2048
	update(t, rd)
	eventually(t, "coordinator rolls to the new deployment", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(coord), coord); err != nil {
			return err
		}
		if coord.Spec.Template.Annotations[mohito.ConfigHashAnnotation] == before {
			return fmt.Errorf("config hash unchanged")
		}
		return nil
	})
	waitRollingOut(t, rd, conds)
	get(t, natsSecret)
	if string(natsSecret.Data["password"]) != password {
		t.Error("the NATS password changed under running pods")
	}

	// The vendors' roles follow the series too: the hosted agent and both shufflers run with
	// the new deployment's hash.
	markAvailable(t, ns)
	waitReady(t, rd, conds, metav1.ConditionTrue, common.ReasonReconciled)
	get(t, coord)
	hash := coord.Spec.Template.Annotations[mohito.ConfigHashAnnotation]
	for _, name := range []string{"acme-vendor-agent", "acme-shuffler", "globex-shuffler"} {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		eventually(t, name+" on the new deployment", func() error {
			if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(d), d); err != nil {
				return err
			}
			if d.Spec.Template.Annotations[mohito.ConfigHashAnnotation] != hash {
				return fmt.Errorf("hash %s, want %s", d.Spec.Template.Annotations[mohito.ConfigHashAnnotation], hash)
			}
			return nil
		})
	}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(vs[1]), vs[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := getDeployment(ns, "globex-vendor-agent"); err == nil {
		t.Error("globex hosts no agent, yet one runs")
	}
}

func getDeployment(ns, name string) (*appsv1.Deployment, error) {
	d := &appsv1.Deployment{}
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d)
	return d, err
}

func TestVendorRolesRunInTheVendorsTrustDomain(t *testing.T) {
	ns, _, vs, ss := newSeries(t)
	agent := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "acme-vendor-agent"}}
	get(t, agent)
	ownedBy(t, agent, vs[0])
	shuf := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "globex-shuffler"}}
	get(t, shuf)
	ownedBy(t, shuf, ss[1])

	pod := shuf.Spec.Template.Spec
	if pod.ServiceAccountName != "globex-vendor" {
		t.Errorf("globex's shuffler runs as %s", pod.ServiceAccountName)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e
	}
	if env[mohito.EnvVendorIndex].Value != "1" {
		t.Errorf("shuffler vendor index %q, want 1", env[mohito.EnvVendorIndex].Value)
	}
	if u := env[specs.EnvNATSUser].ValueFrom; u == nil || u.SecretKeyRef.Name != "globex-nats" {
		t.Errorf("shuffler authenticates to NATS with %+v, want globex's own user", u)
	}
	var keyVolume *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == "keys" {
			keyVolume = &pod.Volumes[i]
		}
	}
	if keyVolume == nil || keyVolume.Secret.SecretName != "globex-key" {
		t.Errorf("shuffler key volume %+v, want globex's key Secret", keyVolume)
	}
	for _, name := range []string{"acme-nats", "globex-nats"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		get(t, s)
		if string(s.Data["user"]) != map[string]string{"acme-nats": "vendor0", "globex-nats": "vendor1"}[name] {
			t.Errorf("%s user %q", name, s.Data["user"])
		}
	}

	// The shuffler reports rolling out until its pods are available.
	conds := func() []metav1.Condition { return ss[1].Status.Conditions }
	waitRollingOut(t, ss[1], conds)
	markAvailable(t, ns)
	waitReady(t, ss[1], conds, metav1.ConditionTrue, common.ReasonReconciled)
}

func TestVendorInTwoSeriesIsDegraded(t *testing.T) {
	ns, _, vs, _ := newSeries(t)
	other := round(ns, "office")
	create(t, other)
	waitReady(t, vs[0], func() []metav1.Condition { return vs[0].Status.Conditions }, metav1.ConditionFalse, ReasonMultipleSeries)
}

// TestSecretFilesAreCheckedAndMounted: a Round whose gateway tokens Secret is missing is
// degraded until it exists; the gateway mounts it at the contract's path.
func TestSecretFilesAreCheckedAndMounted(t *testing.T) {
	ns, rd, _, _ := newSeries(t)
	gw := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "home-gateway"}}
	get(t, gw)
	var vol *corev1.Volume
	for i := range gw.Spec.Template.Spec.Volumes {
		if gw.Spec.Template.Spec.Volumes[i].Name == "tokens" {
			vol = &gw.Spec.Template.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Secret.SecretName != "home-tokens" || vol.Secret.Items[0].Key != "users" || vol.Secret.Items[0].Path != mohito.TokensFile {
		t.Fatalf("gateway tokens volume %+v", vol)
	}

	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(rd), rd); err != nil {
		t.Fatal(err)
	}
	rd.Spec.Gateway.Tokens = &common.SecretFileReference{Name: "no-such-tokens"}
	update(t, rd)
	waitReady(t, rd, func() []metav1.Condition { return rd.Status.Conditions }, metav1.ConditionFalse, ReasonSecretNotFound)
}
