package sddr_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"

	sddrv1 "github.com/obscura-iot/obscura/operators/api/sddr/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/sddr"
	"github.com/obscura-iot/obscura/operators/internal/specs/specstest"
	"github.com/obscura-iot/obscura/services/pkg/sddr/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

var sddrBin string

func TestMain(m *testing.M) {
	testenv.RunWithBinary(m, "github.com/obscura-iot/obscura/services/cmd/sddr", &sddrBin)
}

// TestSimulationJobRunsTheSimulator runs what the sample's Job runs: two processes of the real
// `sddr simulate`, each with exactly the container's environment (its shard from
// JOB_COMPLETION_INDEX, the NATS user from the credentials Secret, the password as a file),
// against a real nats-server holding the accounts the operator renders. Both shards finish;
// their results merge into the complete run, with adverts crossing the shards over the
// simulation's own account — which a user of another account does not see.
func TestSimulationJobRunsTheSimulator(t *testing.T) {
	s := &sddrv1.EncounterSimulation{}
	specstest.ReadSample(t, "sddr_v1alpha1_encountersimulation.yaml", s)
	s.Namespace, s.UID = "lab", "5c1d6f0e-9a3b-4c2d-8e7f-0a1b2c3d4e5f"
	// Coefficients other than the defaults: the result shows they came from the environment.
	s.Spec.Energy.DiscoveryMillijoules, s.Spec.Energy.BatteryJoules = "1500.5", "20000"
	sec := sddr.SimNATSSecret(s, []byte("s3cret-sim-password"))
	other := specs.NATSSecret("lab", "vendor", "VENDOR1", "vendor1-user", []byte("vendor-password"), map[string]string{})
	hash := func(_, pw string) (string, error) {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		return string(h), err
	}
	rendered := specs.NATSAccounts(nil, []corev1.Secret{*sec, *other}, hash)
	if len(rendered.Problems) > 0 {
		t.Fatalf("accounts: %v", rendered.Problems)
	}
	srv := testenv.StartNATS(t, testenv.WithNATSConfig(rendered.Config))

	// Another account's user listens on every subject: none of the simulation's arrives.
	spy, err := nats.Connect(srv.URL(), nats.UserInfo("vendor1-user", "vendor-password"))
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	leaked, err := spy.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}

	job := sddr.SimulationJob(s, sddr.Platform{Image: "obscura/sddr:test", Runtime: specs.Runtime{NATSURL: srv.URL()}})
	c := job.Spec.Template.Spec.Containers[0]
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, sec.Data[specs.NATSPasswordKey], 0o400); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var cmds []*exec.Cmd
	var logs []*bytes.Buffer
	for i := range int(*job.Spec.Completions) {
		env := []string{"PATH=" + os.Getenv("PATH"), "JOB_COMPLETION_INDEX=" + strconv.Itoa(i)}
		for _, e := range c.Env {
			v := e.Value
			switch {
			case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
				ref := e.ValueFrom.SecretKeyRef
				if ref.Name != sec.Name {
					t.Fatalf("%s from Secret %s", e.Name, ref.Name)
				}
				v = string(sec.Data[ref.Key])
			case e.ValueFrom != nil:
				continue // the pod's name
			case e.Name == specs.EnvNATSPasswordFile:
				v = pwFile // mounted at specs.NATSDir in the pod
			case e.Name == specs.Env(sddr.FlagResultFile):
				v = filepath.Join(dir, "result-"+strconv.Itoa(i)) // the termination log
			case e.Name == specs.EnvMetricsAddr:
				v = "127.0.0.1:0"
			}
			env = append(env, e.Name+"="+v)
		}
		cmd := exec.CommandContext(ctx, sddrBin, c.Args...)
		cmd.Env = env
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, logs = append(cmds, cmd), append(logs, &log)
	}
	var parts []*contract.Result
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("shard %d: %v\n%s", i, err, logs[i])
		}
		if strings.Contains(logs[i].String(), "s3cret-sim-password") {
			t.Errorf("shard %d logs the NATS password", i)
		}
		b, err := os.ReadFile(filepath.Join(dir, "result-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > contract.MaxBytes {
			t.Errorf("shard %d's result is %d bytes, above a termination message's %d", i, len(b), contract.MaxBytes)
		}
		r, err := contract.Parse(b)
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
		if r.Shard != i || r.RunID != string(s.UID) || r.Devices != 400 || r.Hours != 24 {
			t.Errorf("shard %d's result: shard %d run %q devices %d hours %v", i, r.Shard, r.RunID, r.Devices, r.Hours)
		}
		want := contract.PaperEnergy
		want.DiscoveryMillijoules, want.BatteryJoules = 1500.5, 20000
		if r.Energy != want || r.Energy != sddr.SimulationSettingsOf(s).Energy {
			t.Errorf("shard %d counted with %+v, want %+v", i, r.Energy, want)
		}
		parts = append(parts, r)
	}
	m, err := contract.Merge(parts...)
	if err != nil || !m.Complete() {
		t.Fatalf("merge: %v (complete %v)", err, err == nil && m.Complete())
	}
	if m.CrossAdverts == 0 || m.Encounters == 0 || m.Recognitions == 0 || m.Missed != 0 {
		t.Errorf("merged: %d adverts across shards, %d encounters, %d recognitions, %d missed", m.CrossAdverts, m.Encounters, m.Recognitions, m.Missed)
	}
	if msg, err := leaked.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("another account saw the simulation's %s", msg.Subject)
	}
}

// TestSimulationJobOnHostNetwork: on a node's network the shards bind their metrics to an
// ephemeral loopback port (two shards share a node) and keep no probes.
func TestSimulationJobOnHostNetwork(t *testing.T) {
	s := &sddrv1.EncounterSimulation{}
	specstest.ReadSample(t, "sddr_v1alpha1_encountersimulation.yaml", s)
	job := sddr.SimulationJob(s, sddr.Platform{Image: "i", Runtime: specs.Runtime{NATSURL: "nats://127.0.0.1:4222", HostNetwork: true}})
	p := job.Spec.Template.Spec
	c := p.Containers[0]
	if !p.HostNetwork || c.StartupProbe != nil || c.LivenessProbe != nil || c.ReadinessProbe != nil || len(c.Ports) != 0 {
		t.Errorf("host network %v probes %v/%v ports %v", p.HostNetwork, c.LivenessProbe, c.ReadinessProbe, c.Ports)
	}
	for _, e := range c.Env {
		if e.Name == specs.EnvMetricsAddr && e.Value != "127.0.0.1:0" {
			t.Errorf("metrics on %s", e.Value)
		}
	}
}

// TestValidateSimulationEnergy: what an API server without the CRD's CEL rules would let
// through, the operator refuses (InvalidSimulation) with the bounds `sddr simulate` checks;
// unset coefficients are the paper's.
func TestValidateSimulationEnergy(t *testing.T) {
	s := &sddrv1.EncounterSimulation{}
	specstest.ReadSample(t, "sddr_v1alpha1_encountersimulation.yaml", s)
	if err := sddr.ValidateSimulation(s); err != nil {
		t.Fatal(err)
	}
	s.Spec.Energy = nil
	if o := sddr.SimulationSettingsOf(s); o.Energy != contract.PaperEnergy || len(o.EnergyText) != len(contract.EnergyFields) {
		t.Fatalf("no spec.energy: %+v %v, want the paper's", o.Energy, o.EnergyText)
	}
	// Each field of spec.energy is the contract's coefficient of the same name, and only it.
	typ := reflect.TypeOf(sddrv1.EnergyModel{})
	if typ.NumField() != len(contract.EnergyFields) {
		t.Fatalf("spec.energy has %d fields, the contract %d coefficients", typ.NumField(), len(contract.EnergyFields))
	}
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		s.Spec.Energy = &sddrv1.EnergyModel{}
		reflect.ValueOf(s.Spec.Energy).Elem().Field(i).SetString("7.25")
		o := sddr.SimulationSettingsOf(s)
		for j, f := range contract.EnergyFields {
			if got := o.EnergyText[j]; (f.Field == name) != (got == "7.25") || (f.Field == name) != (*f.Value(&o.Energy) == 7.25) {
				t.Errorf("spec.energy.%s = 7.25: --%s = %q", name, f.Flag, got)
			}
		}
	}
	for _, c := range []struct {
		mut  func(e *sddrv1.EnergyModel)
		want string
	}{
		{func(e *sddrv1.EnergyModel) { e.DiscoveryMillijoules = "0" }, "energy.discoveryMillijoules \"0\""},
		{func(e *sddrv1.EnergyModel) { e.AnswerMillijoules = "-1" }, "energy.answerMillijoules"},
		{func(e *sddrv1.EnergyModel) { e.RecognitionMillijoules = "abc" }, "energy.recognitionMillijoules"},
		{func(e *sddrv1.EnergyModel) { e.EpochChangeMillijoules = "100001" }, "energy.epochChangeMillijoules"},
		{func(e *sddrv1.EnergyModel) { e.IdleBluetoothJoulesPerDay = "NaN" }, "energy.idleBluetoothJoulesPerDay"},
		{func(e *sddrv1.EnergyModel) { e.BatteryJoules = "0.5" }, "energy.batteryJoules \"0.5\" must be a decimal within [1, 1000000] J"},
	} {
		s.Spec.Energy = &sddrv1.EnergyModel{}
		c.mut(s.Spec.Energy)
		if err := sddr.ValidateSimulation(s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", s.Spec.Energy, err, c.want)
		}
	}
}
