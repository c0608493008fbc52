package controller

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/api/common"
	sddrv1 "github.com/obscura-iot/obscura/operators/api/sddr/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/sddr"
	"github.com/obscura-iot/obscura/operators/internal/specs/specstest"
)

// sampleMailbox is config/samples' EncounterMailbox in ns.
func sampleMailbox(t *testing.T, ns string) *sddrv1.EncounterMailbox {
	t.Helper()
	m := &sddrv1.EncounterMailbox{}
	specstest.ReadSample(t, "sddr_v1alpha1_encountermailbox.yaml", m)
	m.Namespace = ns
	return m
}

// TestEncounterMailboxRunsTheMailbox applies the sample to a real API server: the mailbox
// API's Deployment with every setting of the spec as the flags `sddr mailbox` reads, its
// Service, Ready once the replicas are; the scale subresource (what an HPA drives) scales
// the Deployment and reports the replicas and the pod selector.
func TestEncounterMailboxRunsTheMailbox(t *testing.T) {
	ns := namespace(t)
	m := sampleMailbox(t, ns)
	m.Spec.MessageTTL = metav1.Duration{Duration: 90 * 60 * 1e9}
	m.Spec.MaxMessageBytes = 1065
	create(t, m)
	conds := func() []metav1.Condition { return m.Status.Conditions }
	waitRollingOut(t, m, conds)

	ctx := context.Background()
	var d appsv1.Deployment
	eventually(t, "mailbox Deployment", func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mailbox-sddr-mailbox"}, &d)
	})
	if *d.Spec.Replicas != 1 || d.OwnerReferences[0].Name != "mailbox" {
		t.Fatalf("replicas %d, owner %v", *d.Spec.Replicas, d.OwnerReferences)
	}
	c := d.Spec.Template.Spec.Containers[0]
	e := env(c)
	for k, want := range map[string]string{
		specs.Env(sddr.FlagListenAddr):      ":8090",
		specs.Env(sddr.FlagRedisAddr):       "obscura-redis-sddr-mailbox:6382",
		specs.Env(sddr.FlagTTL):             "1h30m0s",
		specs.Env(sddr.FlagMaxMessages):     "64",
		specs.Env(sddr.FlagMaxMessageBytes): "1065",
		specs.Env(sddr.FlagRate):            "5",
		specs.Env(sddr.FlagBurst):           "20",
		specs.Env(sddr.FlagMaxClients):      "100000",
	} {
		if e[k] != want {
			t.Errorf("%s = %q, want %q", k, e[k], want)
		}
	}
	if _, ok := e[specs.Env(sddr.FlagRedisPasswordFile)]; ok {
		t.Error("a Redis password file without a passwordSecret")
	}
	if _, ok := e[specs.EnvNATSURL]; ok {
		t.Error("the mailbox holds NATS settings: it needs none")
	}
	if c.Args[0] != "mailbox" || c.Image != "obscura/sddr:test" || *d.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Errorf("args %v image %s automount %v", c.Args, c.Image, *d.Spec.Template.Spec.AutomountServiceAccountToken)
	}
	var svc corev1.Service
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mailbox-sddr-mailbox"}, &svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Ports[0].Port != 8090 || svc.Spec.Ports[0].Name != "api" {
		t.Errorf("api port %+v", svc.Spec.Ports[0])
	}

	markAvailable(t, ns)
	waitReady(t, m, conds, metav1.ConditionTrue, common.ReasonReconciled)
	if m.Status.ReadyReplicas != 1 || m.Status.Replicas != 1 || m.Status.Endpoint != "http://mailbox-sddr-mailbox."+ns+".svc:8090" {
		t.Errorf("status %+v", m.Status)
	}
	if !strings.Contains(m.Status.Selector, "app.kubernetes.io/instance=mailbox") {
		t.Errorf("selector %q", m.Status.Selector)
	}

	// The scale subresource: what an HPA (or kubectl scale) writes.
	var sc autoscalingv1.Scale
	if err := k8s.SubResource("scale").Get(ctx, m, &sc); err != nil {
		t.Fatal(err)
	}
	if sc.Spec.Replicas != 1 || sc.Status.Selector != m.Status.Selector {
		t.Fatalf("scale %+v", sc)
	}
	sc.Spec.Replicas = 3
	if err := k8s.SubResource("scale").Update(ctx, m, client.WithSubResourceBody(&sc)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Deployment scaled to 3", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(&d), &d); err != nil {
			return err
		}
		if *d.Spec.Replicas != 3 {
			return errorf("replicas %d", *d.Spec.Replicas)
		}
		return nil
	})
	waitRollingOut(t, m, conds)
	markAvailable(t, ns)
	waitReady(t, m, conds, metav1.ConditionTrue, common.ReasonReconciled)
	if m.Status.Replicas != 3 {
		t.Errorf("status.replicas %d after scaling", m.Status.Replicas)
	}
}

// TestEncounterMailboxRefusals: what CEL and the schema refuse at admission, and a Redis
// password Secret that is not there (Degraded until it exists, then mounted as a file).
func TestEncounterMailboxRefusals(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		mut  func(*sddrv1.EncounterMailbox)
		msg  string
	}{
		{"short-ttl", func(m *sddrv1.EncounterMailbox) { m.Spec.MessageTTL = metav1.Duration{Duration: 5e8} }, "messageTTL must be within [1s, 720h]"},
		{"long-ttl", func(m *sddrv1.EncounterMailbox) { m.Spec.MessageTTL = metav1.Duration{Duration: 721 * 3600 * 1e9} }, "messageTTL must be within [1s, 720h]"},
		{"tiny-messages", func(m *sddrv1.EncounterMailbox) { m.Spec.MaxMessageBytes = 100 }, "maxMessageBytes"},
		{"huge-messages", func(m *sddrv1.EncounterMailbox) { m.Spec.MaxMessageBytes = 5000 }, "maxMessageBytes"},
		{"no-redis-port", func(m *sddrv1.EncounterMailbox) { m.Spec.Redis.Address = "obscura-redis-sddr-mailbox" }, "redis.address"},
		{"too-many-replicas", func(m *sddrv1.EncounterMailbox) { m.Spec.Replicas = 33 }, "replicas"},
		{"a.dotted.name", func(m *sddrv1.EncounterMailbox) {}, "without dots"},
	} {
		m := sampleMailbox(t, ns)
		m.Name = c.name
		c.mut(m)
		err := k8s.Create(ctx, m)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: admitted or wrong message: %v", c.name, err)
		}
	}

	m := sampleMailbox(t, ns)
	m.Spec.Redis.PasswordSecret = &common.SecretFileReference{Name: "mailbox-redis"}
	create(t, m)
	conds := func() []metav1.Condition { return m.Status.Conditions }
	waitReady(t, m, conds, metav1.ConditionFalse, ReasonRedisSecretNotFound)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mailbox-redis"},
		Data: map[string][]byte{"other": []byte("x")}})
	waitReadyMessage(t, m, conds, ReasonRedisSecretNotFound, `no entry "password"`)
	var s corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mailbox-redis"}, &s); err != nil {
		t.Fatal(err)
	}
	s.Data["password"] = []byte("pw")
	update(t, &s)
	waitRollingOut(t, m, conds)
	var d appsv1.Deployment
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mailbox-sddr-mailbox"}, &d); err != nil {
		t.Fatal(err)
	}
	p := d.Spec.Template.Spec
	if e := env(p.Containers[0]); e[specs.Env(sddr.FlagRedisPasswordFile)] != sddr.SecretsDir+"/redis/password" {
		t.Errorf("password file %q", e[specs.Env(sddr.FlagRedisPasswordFile)])
	}
	found := false
	for _, v := range p.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "mailbox-redis" && *v.Secret.DefaultMode == 0o400 {
			found = true
		}
	}
	for _, e := range p.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "mailbox-redis" {
			t.Error("the Redis password reaches the environment")
		}
	}
	if !found {
		t.Errorf("the password Secret is not mounted read-only: %+v", p.Volumes)
	}
}
