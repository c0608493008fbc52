package controller

import (
	"crypto/rand"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/obscura-iot/obscura/operators/api/common"
	mohitolib "github.com/obscura-iot/obscura/services/pkg/mohito"
)

// TestMohitoKeyFormatPerSuite: each suite's private-key format is checked as that suite's
// services parse it. Both take 32 bytes today (an X25519 scalar; the hybrid KEM's seed), so the
// old "32-byte key" check passed for MLKEM768X25519 by coincidence; a 64-byte ML-KEM seed (d ‖ z,
// FIPS 203) or an expanded 2400-byte decapsulation key must be refused by name.
func TestMohitoKeyFormatPerSuite(t *testing.T) {
	for _, tc := range []struct {
		suite string
		lib   mohitolib.Suite
		name  string
	}{
		{"", mohitolib.SuiteX25519, "X25519 private key"},
		{"X25519", mohitolib.SuiteX25519, "X25519 private key"},
		{"MLKEM768X25519", mohitolib.SuiteMLKEM768X25519, "MLKEM768X25519 private key seed"},
	} {
		f, err := mohitoKeyFormat(tc.suite)
		if err != nil {
			t.Fatalf("suite %q: %v", tc.suite, err)
		}
		if f.name != tc.name {
			t.Errorf("suite %q: format %q, want %q", tc.suite, f.name, tc.name)
		}
		k, err := mohitolib.GenerateKey(tc.lib)
		if err != nil {
			t.Fatal(err)
		}
		good, err := k.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if o := checkKeyEntry("integrator key", secretWith(good), "private.key", f); o != nil {
			t.Errorf("suite %q: a key the services generate is refused: %s", tc.suite, o.message)
		}
		// The same bytes must load in the services: the check uses their parser.
		if _, err := mohitolib.ParsePrivateKey(tc.lib, good); err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{16, 31, 33, 64, 2400} {
			o := checkKeyEntry("integrator key", secretWith(randomBytes(t, n)), "private.key", f)
			if o == nil || o.reason != common.ReasonInvalidKey || !strings.Contains(o.message, tc.name) {
				t.Errorf("suite %q: a %d-byte key: outcome %+v, want InvalidKey naming %q", tc.suite, n, o, tc.name)
			}
		}
	}
	if _, err := mohitoKeyFormat("Kyber512"); err == nil {
		t.Error("an unknown suite has a key format")
	}
	// A vendor key must load in every suite (Rounds of either suite can select the vendor).
	if o := checkKeyEntry("vendor key", secretWith(randomBytes(t, 32)), "private.key", vendorKeyFormat()); o != nil {
		t.Errorf("vendor key of 32 bytes: %s", o.message)
	}
	if o := checkKeyEntry("vendor key", secretWith(randomBytes(t, 64)), "private.key", vendorKeyFormat()); o == nil {
		t.Error("a 64-byte vendor key passed")
	}
}

// TestRoundChecksItsSuitesKey: a Round of suite MLKEM768X25519 whose integrator key is a 64-byte
// ML-KEM seed is InvalidKey, naming the suite's format; the hybrid KEM's 32-byte seed makes it
// ready.
func TestRoundChecksItsSuitesKey(t *testing.T) {
	ns := namespace(t)
	keySecret(t, ns, "acme-key", X25519KeySize)
	create(t, vendor(ns, "acme", 0, 100))
	create(t, shuffler(ns, "acme-shuffler", "acme"))
	sec := keySecret(t, ns, "integrator-key", 64)
	rd := round(ns, "pq")
	rd.Spec.Suite = "MLKEM768X25519"
	create(t, rd)
	conds := func() []metav1.Condition { return rd.Status.Conditions }
	waitReady(t, rd, conds, metav1.ConditionFalse, common.ReasonInvalidKey)
	if c := readyCondition(rd.Status.Conditions); c == nil || !contains(c.Message, "32-byte MLKEM768X25519 private key seed") {
		t.Errorf("InvalidKey should name the suite's key format: %+v", c)
	}
	k, err := mohitolib.GenerateKey(mohitolib.SuiteMLKEM768X25519)
	if err != nil {
		t.Fatal(err)
	}
	if sec.Data["private.key"], err = k.Bytes(); err != nil {
		t.Fatal(err)
	}
	update(t, sec)
	waitRollingOut(t, rd, conds)
	markAvailable(t, ns)
	waitReady(t, rd, conds, metav1.ConditionTrue, common.ReasonReconciled)
}

func secretWith(key []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "key"}, Data: map[string][]byte{"private.key": key}}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
