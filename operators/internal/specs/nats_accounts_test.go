package specs_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	pdav1 "github.com/obscura-iot/obscura/operators/api/pda/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
	"github.com/obscura-iot/obscura/operators/internal/specs/pda"
	"github.com/obscura-iot/obscura/operators/internal/specs/specstest"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// fakeHash stands in for bcrypt where only the layout matters: deterministic and visibly not
// the password.
func fakeHash(user, password string) (string, error) {
	return fmt.Sprintf("$2a$11$fake.%s.%d", user, len(password)), nil
}

func credentialSecrets() []corev1.Secret {
	rd := &mohitov1.Round{ObjectMeta: metav1.ObjectMeta{Name: "home", Namespace: "iot"}}
	v0 := &mohitov1.Vendor{ObjectMeta: metav1.ObjectMeta{Name: "acme", Namespace: "iot"}, Spec: mohitov1.VendorSpec{Index: 0}}
	v1 := &mohitov1.Vendor{ObjectMeta: metav1.ObjectMeta{Name: "bolt", Namespace: "iot"}, Spec: mohitov1.VendorSpec{Index: 1}}
	return []corev1.Secret{
		*mohito.VendorNATSSecret(v1, []byte("pw-v1"), map[string][]byte{"d1": []byte("pw-d1")}),
		*mohito.RoundNATSSecret(rd, []byte("pw-round")),
		*mohito.VendorNATSSecret(v0, []byte("pw-v0"), map[string][]byte{"d0": []byte("pw-d0"), "e0": []byte("pw-e0")}),
	}
}

func TestNATSAccountsGolden(t *testing.T) {
	job := &pdav1.AggregationJob{}
	specstest.ReadSample(t, "pda_v1alpha1_aggregationjob.yaml", job)
	job.Namespace, job.UID = "security", "3f1c2a4e-0000-4000-8000-000000000001"
	secrets := append(credentialSecrets(), *pda.NATSSecret(job, pda.ProxyDomain, []byte("pw-proxy")), *pda.NATSSecret(job, pda.DBDomain, []byte("pw-db")))
	operator := []specs.NATSUser{{Account: contract.IntegratorAccount, Name: "operator", Password: "pw-op", Source: "flag --nats-user"}}
	res := specs.NATSAccounts(operator, secrets, fakeHash)
	if len(res.Problems) > 0 {
		t.Fatalf("problems: %q", res.Problems)
	}
	want := map[string]int{"INTEGRATOR": 2, "VENDOR0": 3, "VENDOR1": 2, "PDA_PROXY": 1, "PDA_DB": 1, "SYS": 0}
	if fmt.Sprint(res.Users) != fmt.Sprint(want) {
		t.Errorf("users per account %v, want %v", res.Users, want)
	}
	specstest.GoldenText(t, "nats_accounts.conf", res.Config)
	for _, pw := range []string{"pw-op", "pw-round", "pw-v0", "pw-d1", "pw-proxy"} {
		if strings.Contains(res.Config, pw) {
			t.Errorf("rendered accounts contain the password %q", pw)
		}
	}
}

// TestNATSAccountsDeterministic: any order of the same Secrets renders the same bytes.
func TestNATSAccountsDeterministic(t *testing.T) {
	secrets := credentialSecrets()
	want := specs.NATSAccounts(nil, secrets, fakeHash).Config
	for i := range 20 {
		r := rand.New(rand.NewPCG(uint64(i), 1))
		s := slices.Clone(secrets)
		r.Shuffle(len(s), func(a, b int) { s[a], s[b] = s[b], s[a] })
		if got := specs.NATSAccounts(nil, s, fakeHash).Config; got != want {
			t.Fatalf("order %d renders differently:\n%s\nwant:\n%s", i, got, want)
		}
	}
}

func TestNATSAccountsLayout(t *testing.T) {
	res := specs.NATSAccounts(nil, credentialSecrets(), fakeHash)
	cfg := res.Config
	for _, want := range []string{
		// each vendor exports its inbox to the integrator only, and imports its own slice of
		// the integrator's inbox only
		`{service: "mohito.v0.in.>", accounts: ["INTEGRATOR"]}`,
		`{service: {account: "INTEGRATOR", subject: "mohito.i.in.v0.>"}}`,
		`{service: "mohito.v1.in.>", accounts: ["INTEGRATOR"]}`,
		`{service: {account: "INTEGRATOR", subject: "mohito.i.in.v1.>"}}`,
		`{service: "mohito.i.in.v0.>", accounts: ["VENDOR0"]}`,
		`{service: "mohito.i.in.v1.>", accounts: ["VENDOR1"]}`,
		// every device has its own login, which may only publish its own responses and
		// receive its own commands (issue 15 #2)
		`{user: "device0.d0", password: "$2a$11$fake.device0.d0.5", permissions: {publish: {allow: ["mohito.dev.d0.resp"]}, subscribe: {allow: ["mohito.dev.d0.cmd"]}}}`,
		`{user: "device0.e0", password: "$2a$11$fake.device0.e0.5", permissions: {publish: {allow: ["mohito.dev.e0.resp"]}, subscribe: {allow: ["mohito.dev.e0.cmd"]}}}`,
		`{user: "device1.d1", password: "$2a$11$fake.device1.d1.5", permissions: {publish: {allow: ["mohito.dev.d1.resp"]}, subscribe: {allow: ["mohito.dev.d1.cmd"]}}}`,
		`{user: "vendor1", password: "$2a$11$fake.vendor1.5"}`,
		`{user: "round-iot.home", password: `,
		`system_account: "SYS"`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("rendered accounts lack %s:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "PDA_") {
		t.Error("PDA accounts rendered without a PDA user")
	}
	// A vendor's service user is never restricted, and no other user is.
	if n := strings.Count(cfg, "permissions:"); n != 3 {
		t.Errorf("%d restricted users, want the 3 device users", n)
	}
	if strings.Contains(cfg, "mohito.dev.*") {
		t.Error("a device user holds a wildcard over its siblings' subjects")
	}
}

func TestNATSAccountsRejects(t *testing.T) {
	secrets := credentialSecrets()
	// Another namespace's vendor 0 takes the same user names: nats-server users are global.
	dup := secrets[2].DeepCopy()
	dup.Namespace = "other"
	bad := secrets[1].DeepCopy()
	bad.Name, bad.Data[specs.NATSUserKey] = "bad-nats", []byte(`x" } ] } evil { `)
	unknown := secrets[1].DeepCopy()
	unknown.Name, unknown.Annotations[specs.AnnotationNATSAccount] = "unknown-nats", "$SYS"
	device := secrets[1].DeepCopy()
	device.Name, device.Data["x"+specs.DeviceUserSuffix], device.Data["x"+specs.DevicePasswordSuffix] = "device-nats", []byte("sneaky"), []byte("pw")
	// A vendor Secret whose device entry names another device's user: it would get that
	// device's subjects.
	swapped := secrets[0].DeepCopy()
	swapped.Name, swapped.Data["d1"+specs.DeviceUserSuffix] = "swapped-nats", []byte(contract.DeviceUser(1, "sneaky"))
	empty := secrets[1].DeepCopy()
	empty.Name, empty.Data[specs.NATSUserKey], empty.Data[specs.NATSPasswordKey] = "empty-nats", []byte("someone"), nil
	failing := func(user, password string) (string, error) {
		if user == "operator" {
			return "", errors.New("password too long")
		}
		return fakeHash(user, password)
	}
	operator := []specs.NATSUser{{Account: contract.IntegratorAccount, Name: "operator", Password: "pw", Source: "flag --nats-user"},
		{Account: contract.IntegratorAccount, Name: "vendor0", Password: "pw", Source: "flag --nats-user"}}
	res := specs.NATSAccounts(operator, append(secrets, *dup, *bad, *unknown, *device, *swapped, *empty), failing)
	for _, want := range []string{"password too long", "other/acme-nats: user vendor0 is already defined by flag --nats-user",
		"iot/acme-nats: user vendor0 is already defined", "other/acme-nats: user device0.d0 is already defined by iot/acme-nats", "iot/swapped-nats: a device's user is not",
		"iot/bad-nats: user name", "iot/unknown-nats: annotation", "iot/device-nats: only a vendor", "iot/empty-nats: user someone has an empty password"} {
		if !slices.ContainsFunc(res.Problems, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("problems %q lack %q", res.Problems, want)
		}
	}
	if strings.Contains(res.Config, "evil") || strings.Contains(res.Config, "sneaky") {
		t.Errorf("rejected credentials rendered:\n%s", res.Config)
	}
	// The rest still renders: the round and vendor 1.
	if !strings.Contains(res.Config, `"round-iot.home"`) || !strings.Contains(res.Config, `"vendor1"`) {
		t.Errorf("valid credentials left out:\n%s", res.Config)
	}
}

// TestNATSAccountsBcrypt: with bcrypt, every rendered hash verifies against its password.
func TestNATSAccountsBcrypt(t *testing.T) {
	hash := func(_, password string) (string, error) {
		h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		return string(h), err
	}
	secrets := credentialSecrets()[:1] // vendor 1: service and device user
	res := specs.NATSAccounts(nil, secrets, hash)
	for user, pw := range map[string]string{"vendor1": "pw-v1", "device1.d1": "pw-d1"} {
		i := strings.Index(res.Config, fmt.Sprintf(`{user: %q, password: "`, user))
		if i < 0 {
			t.Fatalf("%s not rendered", user)
		}
		rest := res.Config[i+len(fmt.Sprintf(`{user: %q, password: "`, user)):]
		h := rest[:strings.IndexByte(rest, '"')]
		if err := bcrypt.CompareHashAndPassword([]byte(h), []byte(pw)); err != nil {
			t.Errorf("%s: hash does not verify: %v", user, err)
		}
	}
}

func TestNATSCredentialSecretsContract(t *testing.T) {
	for _, s := range credentialSecrets() {
		if s.Labels[specs.LabelNATSCredentials] != "true" || s.Annotations[specs.AnnotationNATSAccount] == "" {
			t.Errorf("%s: labels %v annotations %v", s.Name, s.Labels, s.Annotations)
		}
	}
	v := credentialSecrets()[0]
	if string(v.Data["d1"+specs.DeviceUserSuffix]) != "device1.d1" || string(v.Data["d1"+specs.DevicePasswordSuffix]) != "pw-d1" || v.Annotations[specs.AnnotationNATSAccount] != "VENDOR1" {
		t.Errorf("vendor Secret %v", v)
	}
	s := specs.NATSAccountsSecret("obscura-system", "nats-accounts", "accounts {}\n")
	if s.Annotations[specs.AnnotationNATSAccountsHash] != specs.NATSAccountsHash("accounts {}\n") || string(s.Data[specs.NATSAccountsKey]) != "accounts {}\n" {
		t.Errorf("accounts Secret %v", s)
	}
	if _, ok := s.Labels[specs.LabelNATSCredentials]; ok {
		t.Error("the accounts Secret must not be rendered as credentials")
	}
}
