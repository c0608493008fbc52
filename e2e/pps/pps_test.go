package pps

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/obscura-iot/obscura/e2e/internal/ppsrun"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pps/client"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	"github.com/obscura-iot/obscura/services/testenv"
)

// binary is the pps binary built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	testenv.RunWithBinary(m, "github.com/obscura-iot/obscura/services/cmd/pps", &binary)
}

// The sample's names, as the golden files render them (SecurePipeline parking-daily in lax,
// garbler domain pps-garbler).
const (
	golden       = "operators/internal/specs/pps/testdata/host_network.yaml"
	brokerTLS    = "parking-daily-pps-broker-tls"
	garblerTLS   = "parking-daily-pps-garbler-tls"
	garblerKeys  = "pps-garbler-keys"
	natsSecret   = "parking-daily-pps-nats"
	pipelinesCM  = "parking-daily-pps-pipelines"
	garblerHost  = "parking-daily-pps-garbler.pps-garbler.svc"
	account      = "PPS_lax_parking-daily"
	brokerUser   = "pps-broker.lax.parking-daily"
	deviceUserOf = "pps.lax.parking-daily."
)

// schedule is the pipeline's schedule and window here (the sample's are a day and 5 minutes):
// the publishers' series land in one period (ppsrun.Fleet.Run).
const schedule = 30 * time.Second

// rendered is what the operator renders for the sample on the host network.
type rendered struct {
	pipelines contract.PipelinesFile
	broker    *appsv1.Deployment
	garbler   *appsv1.Deployment
}

func readGolden(t *testing.T, root string) *rendered {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, golden))
	if err != nil {
		t.Fatal(err)
	}
	r := &rendered{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode %s: %v", golden, err)
		}
		var meta struct {
			Kind     string
			Metadata struct{ Labels map[string]string }
		}
		if err := json.Unmarshal(raw.Raw, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ConfigMap":
			var cm corev1.ConfigMap
			mustUnmarshal(t, raw.Raw, &cm)
			mustUnmarshal(t, []byte(cm.Data["pipelines.json"]), &r.pipelines)
		case "Deployment":
			d := &appsv1.Deployment{}
			mustUnmarshal(t, raw.Raw, d)
			switch meta.Metadata.Labels["app.kubernetes.io/component"] {
			case "broker":
				r.broker = d
			case "garbler":
				r.garbler = d
			}
		}
	}
	if len(r.pipelines.Pipelines) != 1 || r.broker == nil || r.garbler == nil {
		t.Fatalf("%s: want the pipelines ConfigMap and both Deployments", golden)
	}
	return r
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %T: %v", v, err)
	}
}

// hermeticEnv is the test's environment without OBSCURA_* variables: every flag falls back
// to one, and a developer's shell must not configure the roles under test.
func hermeticEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "OBSCURA_") })
}

// pod runs a rendered pod's container as a process of the pps binary: its volumes are
// written under a directory of its own (Secrets and ConfigMaps from objects, keyed by name),
// every variable that names a file points there, and vars replaces the node-specific values
// (addresses, which on a shared machine must be free ports) of variables that must exist.
type pod struct {
	t    *testing.T
	name string
	root string
	c    corev1.Container
	env  []string
	d    *testenv.Daemon
}

func startPod(t *testing.T, name string, d *appsv1.Deployment, objects map[string]map[string][]byte, vars map[string]string) *pod {
	t.Helper()
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 || !spec.HostNetwork {
		t.Fatalf("%s: want one host-network container", name)
	}
	p := &pod{t: t, name: name, root: t.TempDir(), c: spec.Containers[0]}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	var mounts []string
	for _, m := range p.c.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			t.Fatalf("%s mounts volume %s, which the pod lacks", name, m.Name)
		}
		dst := filepath.Join(p.root, m.MountPath)
		mounts = append(mounts, m.MountPath)
		switch {
		case v.EmptyDir != nil:
			mkdir(t, dst)
		case v.ConfigMap != nil:
			data := object(t, objects, v.ConfigMap.Name)
			if m.SubPath == "" {
				t.Fatalf("%s: ConfigMap %s mounted without subPath", name, v.ConfigMap.Name)
			}
			write(t, dst, data[m.SubPath])
		case v.Secret != nil:
			data := object(t, objects, v.Secret.SecretName)
			if len(v.Secret.Items) == 0 {
				for k, b := range data {
					write(t, filepath.Join(dst, k), b)
				}
			}
			for _, it := range v.Secret.Items {
				b, ok := data[it.Key]
				if !ok {
					t.Fatalf("%s: Secret %s has no key %s", name, v.Secret.SecretName, it.Key)
				}
				write(t, filepath.Join(dst, it.Path), b)
			}
		default:
			t.Fatalf("%s: volume %s of an unexpected kind", name, v.Name)
		}
	}
	seen := map[string]bool{}
	for _, e := range p.c.Env {
		val := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			val = string(object(t, objects, ref.Name)[ref.Key])
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			val = d.Name + "-e2e"
		case e.ValueFrom != nil:
			t.Fatalf("%s: variable %s from an unexpected source", name, e.Name)
		}
		if v, ok := vars[e.Name]; ok {
			val, seen[e.Name] = v, true
		}
		for _, m := range mounts {
			if val == m || strings.HasPrefix(val, m+"/") {
				val = filepath.Join(p.root, val)
				break
			}
		}
		p.env = append(p.env, e.Name+"="+val)
	}
	for v := range vars {
		if !seen[v] {
			t.Fatalf("%s: the rendered pod sets no %s", name, v)
		}
	}
	cmd := exec.Command(binary, p.c.Args...)
	cmd.Env = append(hermeticEnv(), p.env...)
	p.d = testenv.StartDaemon(t, name, cmd)
	t.Cleanup(func() { p.d.Stop(t) })
	return p
}

func object(t *testing.T, objects map[string]map[string][]byte, name string) map[string][]byte {
	t.Helper()
	o, ok := objects[name]
	if !ok {
		t.Fatalf("the pod needs %s, which the test did not create", name)
	}
	return o
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	mkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, b, 0o400); err != nil {
		t.Fatal(err)
	}
}

// waitReady runs the rendered readiness probe (an exec probe: `pps probe /readyz`, which
// reads the address file) until it passes, then reads the bound addresses.
func (p *pod) waitReady(timeout time.Duration) {
	p.t.Helper()
	probe := p.c.ReadinessProbe
	if probe == nil || probe.Exec == nil || len(probe.Exec.Command) < 2 || probe.Exec.Command[0] != "/usr/local/bin/pps" {
		p.t.Fatalf("%s: readiness probe %+v, want an exec probe of /usr/local/bin/pps", p.name, probe)
	}
	testenv.Eventually(p.t, timeout, p.name+" ready (its readiness probe passes)", func() error {
		if err := p.d.Exited(); err != nil {
			p.t.Fatalf("%s exited: %v\n%s", p.name, err, p.d.Log())
		}
		cmd := exec.Command(binary, probe.Exec.Command[1:]...)
		cmd.Env = append(hermeticEnv(), p.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
		}
		return nil
	})
}

// addr is the address the process bound for name (telemetry.AddrGRPC, AddrMetrics).
func (p *pod) addr(name string) string {
	p.t.Helper()
	a, err := telemetry.ReadAddr(p.envValue("OBSCURA_ADDR_FILE"), name)
	if err != nil {
		p.t.Fatalf("%s: %v", p.name, err)
	}
	return a
}

func (p *pod) envValue(name string) string {
	for _, kv := range p.env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	p.t.Fatalf("%s has no %s", p.name, name)
	return ""
}

// TestRenderedPodsRunOneExecution runs the garbler and the broker exactly as rendered for the
// parking sample (keys in a Secret) and drives one execution of its function: nine
// publishers publish a day of counts each (288 rounds), and the subscriber unmasks the daily
// mean, which must be the plaintext model's over those values.
func TestRenderedPodsRunOneExecution(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	r := readGolden(t, root)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()

	// The devices, and the pipelines file the operator would render for a SecurePipeline
	// naming them: the sample's program and topics, a schedule short enough for a test.
	fleet, err := ppsrun.NewFleet(r.pipelines.Pipelines[0].Source, 1)
	if err != nil {
		t.Fatal(err)
	}
	pl := r.pipelines.Pipelines[0]
	pl.Schedule, pl.Window = contract.Duration{Duration: schedule}, contract.Duration{Duration: schedule}
	if pl, err = fleet.Bind(pl); err != nil {
		t.Fatal(err)
	}
	pipelines, err := json.MarshalIndent(contract.PipelinesFile{Pipelines: []contract.Pipeline{pl}}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}

	// NATS with the pipeline's account as the operator renders it: the broker's user, one
	// user per device with contract.DevicePermissions (the subscriber's including the
	// function's output), MQTT on.
	dir := t.TempDir()
	pw := func(user string) string { return "pw-of-" + user }
	users := []natsx.User{{Name: brokerUser, Password: pw(brokerUser)}}
	pwFiles := map[string]string{}
	devices := []string{fleet.SubscriberID()}
	for _, p := range fleet.Publishers {
		devices = append(devices, p.ID())
	}
	for _, id := range devices {
		pub, sub := contract.DevicePermissions(id, []string{fleet.Fn.ID})
		users = append(users, natsx.User{Name: deviceUserOf + id, Password: pw(deviceUserOf + id),
			Permissions: &natsx.Permissions{PublishAllow: pub, SubscribeAllow: sub}})
		pwFiles[id] = filepath.Join(dir, id[:16]+".password")
		write(t, pwFiles[id], []byte(pw(deviceUserOf+id)+"\n"))
	}
	layout := natsx.Layout{Accounts: []natsx.Account{{Name: account, JetStream: true, Users: users}}}
	ns := testenv.StartNATS(t, testenv.WithNATSConfig(layout.Render()), testenv.WithMQTT())
	brokerRedis, garblerRedis := testenv.StartRedis(t), testenv.StartRedis(t)

	// The garbler's keys as its Secret holds them: an identity from `pps keys garbler` and a
	// 32-byte sealing key; the link's two TLS Secrets, each with the other domain's CA.
	idFile := filepath.Join(dir, "identity.key")
	out, err := exec.CommandContext(ctx, binary, "keys", "garbler", "--out", idFile).Output()
	if err != nil {
		t.Fatalf("pps keys garbler: %v", err)
	}
	identity, err := hex.DecodeString(strings.TrimSpace(string(out)))
	if err != nil || len(identity) != ed25519.PublicKeySize {
		t.Fatalf("pps keys garbler printed %q", out)
	}
	idKey, err := os.ReadFile(idFile)
	if err != nil {
		t.Fatal(err)
	}
	seal := make([]byte, 32)
	if _, err := rand.Read(seal); err != nil {
		t.Fatal(err)
	}
	gtls, btls, err := ppsrun.LinkSecrets(garblerHost)
	if err != nil {
		t.Fatal(err)
	}
	objects := map[string]map[string][]byte{
		pipelinesCM: {"pipelines.json": pipelines},
		garblerKeys: {"identity.key": idKey, "seal.key": []byte(hex.EncodeToString(seal))},
		garblerTLS:  gtls,
		brokerTLS:   btls,
		natsSecret:  {"user": []byte(brokerUser), "password": []byte(pw(brokerUser))},
	}

	// Addresses are the node's: free ports here instead of the pipeline's fixed ones, which
	// must agree (the broker dials where the garbler listens).
	if l, a := renderedEnv(t, r.garbler, "OBSCURA_LISTEN"), renderedEnv(t, r.broker, "OBSCURA_GARBLER_ADDR"); l != a {
		t.Fatalf("the garbler listens on %s, the broker dials %s", l, a)
	}
	garbler := startPod(t, "garbler", r.garbler, objects, map[string]string{
		"OBSCURA_REDIS_ADDR": garblerRedis.Addr(),
		"OBSCURA_LISTEN":     "127.0.0.1:0",
	})
	garbler.waitReady(30 * time.Second)
	broker := startPod(t, "broker", r.broker, objects, map[string]string{
		"OBSCURA_NATS_URL":     ns.URL(),
		"OBSCURA_REDIS_ADDR":   brokerRedis.Addr(),
		"OBSCURA_GARBLER_ADDR": garbler.addr(telemetry.AddrGRPC),
		"OBSCURA_METRICS_ADDR": "127.0.0.1:0",
	})
	broker.waitReady(30 * time.Second)

	// A failed execution is a failure of the services: stop waiting for the output.
	rctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go func() {
		for rctx.Err() == nil {
			if l := failedExecution(broker.d.Log()); l != "" {
				stop(fmt.Errorf("the broker logged a failed execution: %s", l))
			}
			select {
			case <-rctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	o, err := fleet.Run(rctx, identity, schedule, func(id string) client.Options {
		return client.Options{Addr: ns.MQTTAddr(), Username: deviceUserOf + id, PasswordFile: pwFiles[id]}
	})
	if err != nil {
		t.Fatalf("%v (%v)\nbroker log:\n%s", err, context.Cause(rctx), tail(broker.d.Log(), 3000))
	}
	t.Logf("round %d: daily mean %.2f cars over %d slots (plaintext model %.2f)", o.Round, o.Values[0].Float64(), o.Valid, fleet.Want[0].Float64())
	for _, l := range strings.Split(broker.d.Log(), "\n") {
		if strings.Contains(l, `"msg":"execution"`) && strings.Contains(l, `"status":"ok"`) {
			t.Logf("broker: %s", l)
		}
	}

	// The broker reports the execution on its metrics, which the operator reads into status
	// (it counts an execution once its output is published, so a moment after the subscriber
	// may have it).
	testenv.Eventually(t, 30*time.Second, "the broker's metrics report the execution", func() error {
		metrics := broker.d.Get(t, 10*time.Second, broker.addr(telemetry.AddrMetrics), "/metrics")
		for _, want := range []string{
			fmt.Sprintf(`%s{%s="%s",%s="%s"}`, contract.MetricExecutions, contract.LabelPipeline, pl.Name, contract.LabelStatus, contract.StatusOK),
			fmt.Sprintf(`%s{%s="%s"}`, contract.MetricANDGates, contract.LabelPipeline, pl.Name),
			fmt.Sprintf(`%s{%s="%s"}`, contract.MetricCircuitBytes, contract.LabelPipeline, pl.Name),
		} {
			if !strings.Contains(metrics, want) {
				return fmt.Errorf("no %s", want)
			}
		}
		return nil
	})
}

// renderedEnv is the value of variable name in d's container as rendered.
func renderedEnv(t *testing.T, d *appsv1.Deployment, name string) string {
	t.Helper()
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	t.Fatalf("%s sets no %s", d.Name, name)
	return ""
}

// failedExecution returns the broker's first log line about a failed execution, or "".
func failedExecution(log string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `"msg":"execution failed"`) {
			return l
		}
	}
	return ""
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
