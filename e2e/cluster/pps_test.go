package cluster

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/obscura-iot/obscura/e2e/internal/ppsrun"
	"github.com/obscura-iot/obscura/e2e/internal/ready"
	ppsclient "github.com/obscura-iot/obscura/services/pkg/pps/client"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

// The SecurePipeline sample (config/samples/pps_v1alpha1_securepipeline.yaml) in this run:
// the broker in the release's namespace, the garbler in its own, each domain with a Redis of
// its own on a port of the node no other pod uses.
const (
	ppsAPI         = "pps.obscura.dev/v1alpha1"
	pipelineName   = "parking-daily"
	garblerNS      = "pps-garbler"
	garblerKeys    = "pps-garbler-keys"
	brokerRedis    = "127.0.0.1:6390"
	garblerRedis   = "127.0.0.1:6391"
	natsClientAddr = "127.0.0.1:4222"
	// The sample runs once a day over a 5-minute window; here every minute over the last
	// minute, and the publishers' series lands between two ticks (ppsrun.Fleet.Run).
	ppsSchedule = time.Minute
)

// ppsRun is the pipeline's devices and the garbler key they pin.
type ppsRun struct {
	fleet   *ppsrun.Fleet
	garbler ed25519.PublicKey
}

func (e *env) pipeline() (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(ppsAPI)
	u.SetKind("SecurePipeline")
	return u, e.k.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: pipelineName}, u)
}

// applyPipeline creates what a user creates before the sample (the garbler's namespace, its
// keys, the link's TLS Secrets, a Redis per trust domain) and applies the sample with the
// run's devices (nobody holds the keys of the sample's device ids), a short schedule and the
// two Redis addresses.
func (e *env) applyPipeline() *ppsRun {
	ctx := context.Background()
	u := e.readSample("pps_v1alpha1_securepipeline.yaml")
	src, _, _ := unstructured.NestedString(u.Object, "spec", "source")
	fleet, err := ppsrun.NewFleet(src, uint64(time.Now().UnixNano()))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: garblerNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}

	// The garbler's identity (an Ed25519 seed, as `pps keys garbler` writes it) and sealing key.
	seed, seal := make([]byte, ed25519.SeedSize), make([]byte, 32)
	for _, b := range [][]byte{seed, seal} {
		if _, err := rand.Read(b); err != nil {
			e.t.Fatal(err)
		}
	}
	identity := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	e.secretIn(garblerNS, garblerKeys, map[string][]byte{"identity.key": []byte(hex.EncodeToString(seed)), "seal.key": []byte(hex.EncodeToString(seal))})
	e.secrets["PPS garbler identity seed"] = hex.EncodeToString(seed)
	e.secrets["PPS garbler sealing key"] = hex.EncodeToString(seal)
	gtls, btls, err := ppsrun.LinkSecrets(pipelineName + "-pps-garbler." + garblerNS + ".svc")
	if err != nil {
		e.t.Fatal(err)
	}
	e.secretIn(garblerNS, pipelineName+"-pps-garbler-tls", gtls)
	e.secretIn(e.ns, pipelineName+"-pps-broker-tls", btls)
	for what, s := range map[string]map[string][]byte{"garbler": gtls, "broker": btls} {
		e.secrets["PPS "+what+" TLS key"] = pemBody(s[corev1.TLSPrivateKeyKey])
	}
	for _, p := range fleet.Publishers {
		e.secrets["PPS publisher key "+p.Topic] = hex.EncodeToString(p.Key.Seed())
	}
	e.secrets["PPS subscriber key"] = hex.EncodeToString(fleet.Subscriber.Seed())

	e.redis(e.ns, "redis-pps-broker", brokerRedis)
	e.redis(garblerNS, "redis-pps-garbler", garblerRedis)

	var pubs []any
	for _, p := range fleet.Publishers {
		pubs = append(pubs, map[string]any{"topic": p.Topic, "deviceID": p.ID()})
	}
	set := func(v any, fields ...string) {
		if err := unstructured.SetNestedField(u.Object, v, fields...); err != nil {
			e.t.Fatal(err)
		}
	}
	set(pubs, "spec", "publishers")
	set([]any{fleet.SubscriberID()}, "spec", "subscribers")
	set(ppsSchedule.String(), "spec", "schedule")
	set(ppsSchedule.String(), "spec", "window")
	set(brokerRedis, "spec", "broker", "redis", "address")
	set(garblerRedis, "spec", "garbler", "redis", "address")
	u.SetNamespace(e.ns)
	if err := e.k.Create(ctx, u); err != nil {
		e.t.Fatalf("apply the SecurePipeline sample: %v", err)
	}
	return &ppsRun{fleet: fleet, garbler: identity}
}

// readSample decodes one sample of config/samples.
func (e *env) readSample(name string) *unstructured.Unstructured {
	b, err := os.ReadFile(filepath.Join(e.root, "config/samples", name))
	if err != nil {
		e.t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		e.t.Fatalf("%s: %v", name, err)
	}
	return u
}

// pemBody is a PEM block's base64 body on one line, as a log would carry it.
func pemBody(b []byte) string {
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "-----") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return lines[0]
}

// secretIn creates or replaces a Secret in namespace ns.
func (e *env) secretIn(ns, name string, data map[string][]byte) {
	e.t.Helper()
	if ns == e.ns {
		e.secret(name, data)
		return
	}
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}
	if err := upsertSecret(ctx, e.k, s); err != nil {
		e.t.Fatalf("secret %s/%s: %v", ns, name, err)
	}
}

// redis runs a trust domain's Redis as the chart runs its instances (in memory only), on
// addr of the node.
func (e *env) redis(ns, name, addr string) {
	e.t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	labels := map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "obscura-e2e"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork:                  true,
					AutomountServiceAccountToken: ptr.To(false),
					SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532)},
					Containers: []corev1.Container{{
						Name: "redis", Image: e.images["redis"], ImagePullPolicy: corev1.PullNever,
						Args: []string{"--port", port, "--bind", host, "--save", "", "--appendonly", "no", "--dir", "/data"},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
					Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
	if e.images["redis"] == "" {
		e.t.Fatal("images.json has no redis image")
	}
	if err := e.k.Create(context.Background(), d); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatalf("redis %s/%s: %v", ns, name, err)
	}
}

// runPipeline waits for the pipeline to be Ready and for the operator to have granted the
// subscriber the function's output, then publishes a day of parking counts from nine
// publishers over MQTT and checks that the subscriber unmasks the plaintext model's daily
// mean, and that the SecurePipeline reports the execution.
func (e *env) runPipeline(r *ppsRun) {
	testenv.Eventually(e.t, 4*time.Minute, "SecurePipeline "+pipelineName+" Ready", func() error {
		u, err := e.pipeline()
		if err != nil {
			return err
		}
		return ready.Check(u)
	})
	fn := r.fleet.Fn.ID
	testenv.Eventually(e.t, 2*time.Minute, "the operator reports function "+fn, func() error {
		u, err := e.pipeline()
		if err != nil {
			return err
		}
		if got, _, _ := unstructured.NestedString(u.Object, "status", "fnID"); got != fn {
			return fmt.Errorf("status.fnID %q", got)
		}
		return nil
	})

	// The devices' NATS users, which the operator generated.
	secret := pipelineName + "-pps-nats"
	users, pwFiles := map[string]string{}, map[string]string{}
	ids := []string{r.fleet.SubscriberID()}
	for _, p := range r.fleet.Publishers {
		ids = append(ids, p.ID())
	}
	for _, id := range ids {
		users[id] = string(e.secretData(e.ns, secret, id+".user"))
		pw := e.secretData(e.ns, secret, id+".password")
		e.secrets["PPS device password of "+id[:8]] = string(pw)
		pwFiles[id] = e.writeFile("pps-"+id[:16]+".password", pw)
	}
	// The subscriber may read the output once the accounts reconciler has rendered the
	// function's subject and NATS has reloaded; an MQTT SUBACK refusal is silent, so ask NATS.
	sub := r.fleet.SubscriberID()
	testenv.Eventually(e.t, 2*time.Minute, "NATS lets the subscriber read pps.fn."+fn+".out", func() error {
		return natsCanSubscribe(users[sub], string(e.secretData(e.ns, secret, sub+".password")), contract.OutSubject(fn))
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	o, err := r.fleet.Run(ctx, r.garbler, ppsSchedule, func(id string) ppsclient.Options {
		return ppsclient.Options{Addr: mqttAddr, Username: users[id], PasswordFile: pwFiles[id]}
	})
	if err != nil {
		out, _ := e.try("kubectl", "logs", "-n", e.ns, "deployment/"+pipelineName+"-pps-broker", "--tail", "40")
		e.t.Fatalf("one execution of the parking sample: %v\nbroker log:\n%s", err, tail(out, 6000))
	}
	e.t.Logf("PPS: round %d, daily mean %.2f cars over %d slots = the plaintext model (%.1fs from the first publish)",
		o.Round, o.Values[0].Float64(), o.Valid, time.Since(start).Seconds())

	var st map[string]any
	testenv.Eventually(e.t, 2*time.Minute, "SecurePipeline status reports the execution", func() error {
		u, err := e.pipeline()
		if err != nil {
			return err
		}
		st, _, _ = unstructured.NestedMap(u.Object, "status")
		if num(st["executions"]) < 1 || num(st["andGates"]) <= 0 || num(st["circuitBytes"]) <= 0 || st["lastExecution"] == nil {
			return fmt.Errorf("status executions %v, andGates %v, circuitBytes %v, lastExecution %v",
				st["executions"], st["andGates"], st["circuitBytes"], st["lastExecution"])
		}
		return nil
	})
	e.report.Notes = append(e.report.Notes, fmt.Sprintf("PPS parking sample: daily mean %.2f over %d slots equals the plaintext model; status: %v executions, %v AND gates, %v bytes, last latency %v",
		o.Values[0].Float64(), o.Valid, st["executions"], st["andGates"], st["circuitBytes"], st["lastLatency"]))
}

// natsCanSubscribe reports whether user may subscribe to subject: NATS answers a refused
// subscription with a permissions error before the PONG of the flush that follows it.
func natsCanSubscribe(user, password, subject string) error {
	nc, err := nats.Connect("nats://"+natsClientAddr, nats.UserInfo(user, password), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := nc.SubscribeSync(subject); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	return nc.LastError()
}

// deletePipeline deletes the sample (its finalizer removes both domains' objects), the two
// Redis and the garbler's namespace (with its Secrets), whatever of them exists.
func (e *env) deletePipeline() {
	_, _ = e.try("kubectl", "delete", "-n", e.ns, "--wait", "--timeout", "2m", "--ignore-not-found", "securepipelines.pps.obscura.dev/"+pipelineName)
	_, _ = e.try("kubectl", "delete", "-n", e.ns, "--ignore-not-found", "deployment/redis-pps-broker")
	_, _ = e.try("kubectl", "delete", "namespace", garblerNS, "--wait", "--timeout", "2m", "--ignore-not-found")
}
