package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"

	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/api/common"
	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// renderedHashes reads the accounts Secret: user → bcrypt hash, checking the hash annotation.
func renderedHashes() (map[string]string, error) {
	var s corev1.Secret
	if err := k8s.Get(context.Background(), testAccountsSecret, &s); err != nil {
		return nil, err
	}
	conf := string(s.Data[specs.NATSAccountsKey])
	if got, want := s.Annotations[specs.AnnotationNATSAccountsHash], specs.NATSAccountsHash(conf); got != want {
		return nil, fmt.Errorf("hash annotation %q, content hash %q", got, want)
	}
	users := map[string]string{}
	for _, m := range regexp.MustCompile(`\{user: "([^"]+)", password: "([^"]+)"`).FindAllStringSubmatch(conf, -1) {
		users[m[1]] = m[2]
	}
	return users, nil
}

// hasUser checks that the accounts hold user with a hash of password.
func hasUser(users map[string]string, user string, password []byte) error {
	h, ok := users[user]
	if !ok {
		return fmt.Errorf("user %s not rendered (have %d users)", user, len(users))
	}
	if c := hashCost(h); c != costFor(string(password)) {
		return fmt.Errorf("user %s: a cost-%d bcrypt hash, want cost %d", user, c, costFor(string(password)))
	}
	if err := bcrypt.CompareHashAndPassword([]byte(h), password); err != nil {
		return fmt.Errorf("user %s: the hash is not the Secret's password", user)
	}
	return nil
}

func TestNATSAccountsRenderVendorsAndRounds(t *testing.T) {
	// nats-server user names are global, so vendor 0 of every test namespace claims the same
	// users and the first Secret by namespace/name wins: this namespace sorts before the
	// suite's "t-" namespaces.
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "a0-nats-"}}
	create(t, nsObj)
	ns := nsObj.Name
	keySecret(t, ns, "integrator-key", X25519KeySize)
	keySecret(t, ns, "acme-key", X25519KeySize)
	// The agent's device registry: each device is issued its own NATS login.
	registry := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "acme-devices"},
		Data: map[string][]byte{mohito.DevicesFile: []byte(`[{"id": "lamp"}, {"id": "lock"}]`)}}
	create(t, registry)
	v := vendor(ns, "acme", 0, 100)
	v.Spec.Agent = &mohitov1.VendorAgent{Replicas: 1, Devices: &common.SecretFileReference{Name: "acme-devices"}}
	create(t, v)
	create(t, shuffler(ns, "acme-shuffler", "acme"))
	rd := round(ns, "home")
	create(t, rd)

	vs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: mohito.NATSSecretName("acme")}}
	rs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: mohito.NATSSecretName("home")}}
	get(t, vs)
	get(t, rs)
	if string(rs.Data[specs.NATSUserKey]) != mohito.RoundNATSUser(rd) {
		t.Errorf("Round user %q, want %q", rs.Data[specs.NATSUserKey], mohito.RoundNATSUser(rd))
	}
	eventually(t, "the vendor Secret holds a login per registered device", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(vs), vs); err != nil {
			return err
		}
		for _, id := range []string{"lamp", "lock"} {
			if string(vs.Data[id+specs.DeviceUserSuffix]) != contract.DeviceUser(0, id) || len(vs.Data[id+specs.DevicePasswordSuffix]) != 64 {
				return fmt.Errorf("no login for device %s: keys %v", id, keysOf(vs.Data))
			}
		}
		if bytes.Equal(vs.Data["lamp"+specs.DevicePasswordSuffix], vs.Data["lock"+specs.DevicePasswordSuffix]) {
			return errors.New("two devices share a password")
		}
		return nil
	})
	var before map[string]string
	eventually(t, "accounts hold the operator, the Round and the vendor", func() error {
		users, err := renderedHashes()
		if err != nil {
			return err
		}
		before = users
		return errors.Join(
			hasUser(users, "operator", []byte("operator-password")),
			hasUser(users, mohito.RoundNATSUser(rd), rs.Data[specs.NATSPasswordKey]),
			hasUser(users, "vendor0", vs.Data[specs.NATSPasswordKey]),
			hasUser(users, "device0.lamp", vs.Data["lamp"+specs.DevicePasswordSuffix]),
			hasUser(users, "device0.lock", vs.Data["lock"+specs.DevicePasswordSuffix]))
	})
	accounts := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testAccountsSecret.Namespace, Name: testAccountsSecret.Name}}
	waitEvent(t, accounts, corev1.EventTypeNormal, ReasonAccountsRendered)

	// The Round's credentials change (deleted, regenerated with a new password): the round's
	// hash follows, every other hash stays as it was, so the server reloads only what changed.
	if err := k8s.Delete(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the regenerated Round password is rendered", func() error {
		fresh := &corev1.Secret{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(rs), fresh); err != nil {
			return err
		}
		if fresh.UID == rs.UID {
			return fmt.Errorf("not regenerated yet")
		}
		users, err := renderedHashes()
		if err != nil {
			return err
		}
		if err := hasUser(users, mohito.RoundNATSUser(rd), fresh.Data[specs.NATSPasswordKey]); err != nil {
			return err
		}
		for _, u := range []string{"operator", "vendor0", "device0.lamp", "device0.lock"} {
			if users[u] != before[u] {
				return fmt.Errorf("%s's hash changed on a re-render", u)
			}
		}
		return nil
	})

	// Revoking a device: it leaves the registry, so its entries leave the vendor's Secret and
	// its user the rendered accounts (the reloader then reloads the server); its sibling keeps
	// its password and hash.
	registry.Data[mohito.DevicesFile] = []byte(`[{"id": "lamp"}]`)
	if err := k8s.Update(context.Background(), registry); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the revoked device's user leaves the accounts", func() error {
		users, err := renderedHashes()
		if err != nil {
			return err
		}
		if _, ok := users["device0.lock"]; ok {
			return errors.New("device0.lock still rendered")
		}
		if users["device0.lamp"] != before["device0.lamp"] {
			return errors.New("the sibling's hash changed")
		}
		fresh := &corev1.Secret{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(vs), fresh); err != nil {
			return err
		}
		if _, ok := fresh.Data["lock"+specs.DevicePasswordSuffix]; ok {
			return errors.New("the vendor Secret still holds the revoked device's password")
		}
		if !bytes.Equal(fresh.Data["lamp"+specs.DevicePasswordSuffix], vs.Data["lamp"+specs.DevicePasswordSuffix]) {
			return errors.New("the sibling's password changed")
		}
		return nil
	})
}

func keysOf(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestBcryptCacheSurvivesRestart: a fresh cache seeded with the written configuration reuses
// its hashes, so a restarted operator rewrites nothing; a changed password is hashed anew.
func TestBcryptCacheSurvivesRestart(t *testing.T) {
	var first bcryptCache
	h, err := first.hash("vendor0", "pw")
	if err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("accounts {\n  \"VENDOR0\": {\n    users: [\n      {user: %q, password: %q}\n    ]\n  }\n}\n", "vendor0", h)
	var restarted bcryptCache
	restarted.seed(conf)
	if again, err := restarted.hash("vendor0", "pw"); err != nil || again != h {
		t.Errorf("after a restart the hash changed (%v)", err)
	}
	if other, err := restarted.hash("vendor0", "new-pw"); err != nil || other == h || bcrypt.CompareHashAndPassword([]byte(other), []byte("new-pw")) != nil {
		t.Errorf("a new password kept the old hash (%v)", err)
	}
}
