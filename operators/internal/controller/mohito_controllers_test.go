package controller

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/api/common"
	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

const seriesLabel = "mohito.obscura.dev/series"

func vendor(ns, name string, index int32, devices int64) *mohitov1.Vendor {
	return &mohitov1.Vendor{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{seriesLabel: "home"}},
		Spec: mohitov1.VendorSpec{
			Index:    index,
			Devices:  devices,
			Capacity: mohitov1.VendorCapacity{Base: 50, Jitter: 10, PaddedEntries: 200},
			Keys:     common.KeyReference{SecretRef: &common.SecretKeyReference{Name: name + "-key"}},
		},
	}
}

func shuffler(ns, name, vendorName string) *mohitov1.Shuffler {
	return &mohitov1.Shuffler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: mohitov1.ShufflerSpec{
			VendorRef: common.LocalObjectReference{Name: vendorName},
			FakePool:  mohitov1.FakePool{Size: 1024},
		},
	}
}

func round(ns, name string) *mohitov1.Round {
	return &mohitov1.Round{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: mohitov1.RoundSpec{
			Period:         metav1.Duration{Duration: 2 * time.Second},
			VendorSelector: metav1.LabelSelector{MatchLabels: map[string]string{seriesLabel: "home"}},
			ShufflerPolicy: mohitov1.ShufflerPolicy{ResponseTimeout: metav1.Duration{Duration: time.Second}},
			Keys:           common.KeyReference{SecretRef: &common.SecretKeyReference{Name: "integrator-key"}},
		},
	}
}

func TestShufflerWaitsForItsVendor(t *testing.T) {
	ns := namespace(t)
	s := shuffler(ns, "acme-shuffler", "acme")
	create(t, s)
	conds := func() []metav1.Condition { return s.Status.Conditions }
	waitReady(t, s, conds, metav1.ConditionFalse, ReasonVendorNotFound)
	waitEvent(t, s, "Warning", ReasonVendorNotFound)
	if s.Status.VendorIndex != nil {
		t.Errorf("vendorIndex = %d with no vendor", *s.Status.VendorIndex)
	}

	// The vendor exists but cannot be ready yet: its key Secret is missing.
	v := vendor(ns, "acme", 7, 1000)
	create(t, v)
	waitReady(t, s, conds, metav1.ConditionFalse, ReasonVendorNotReady)

	keySecret(t, ns, "acme-key", X25519KeySize)
	// No Round selects the vendor, so it runs nothing and is ready at once.
	waitReady(t, v, func() []metav1.Condition { return v.Status.Conditions }, metav1.ConditionTrue, common.ReasonReconciled)
	waitReady(t, s, conds, metav1.ConditionTrue, common.ReasonReconciled)
	waitEvent(t, s, "Normal", common.ReasonReconciled)
	if s.Status.VendorIndex == nil || *s.Status.VendorIndex != 7 {
		t.Errorf("vendorIndex = %v, want 7", s.Status.VendorIndex)
	}
	if s.Status.EffectiveWeight != 1000 {
		t.Errorf("effectiveWeight = %d, want the vendor's 1000 devices", s.Status.EffectiveWeight)
	}
	eventually(t, "vendor counts its shuffler", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(v), v); err != nil {
			return err
		}
		if v.Status.Shufflers != 1 {
			return errorf("status.shufflers = %d", v.Status.Shufflers)
		}
		return nil
	})

	// An explicit weight overrides the device count.
	s.Spec.Weight = ptr.To[int64](5)
	update(t, s)
	eventually(t, "weight override", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
			return err
		}
		if s.Status.EffectiveWeight != 5 {
			return errorf("effectiveWeight = %d", s.Status.EffectiveWeight)
		}
		return nil
	})

	// Deleting the vendor degrades the shuffler again.
	if err := k8s.Delete(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	waitReady(t, s, conds, metav1.ConditionFalse, ReasonVendorNotFound)
}

func TestVendorKeyChecks(t *testing.T) {
	ns := namespace(t)
	v := vendor(ns, "globex", 1, 100)
	create(t, v)
	conds := func() []metav1.Condition { return v.Status.Conditions }
	waitReady(t, v, conds, metav1.ConditionFalse, common.ReasonKeySecretNotFound)
	waitEvent(t, v, "Warning", common.ReasonKeySecretNotFound)

	sec := keySecret(t, ns, "globex-key", 16)
	waitReady(t, v, conds, metav1.ConditionFalse, common.ReasonInvalidKey)
	if c := readyCondition(v.Status.Conditions); c == nil || !contains(c.Message, "16 bytes") {
		t.Errorf("InvalidKey message should say what is wrong: %+v", c)
	}
	sec.Data["private.key"] = make([]byte, X25519KeySize)
	update(t, sec)
	waitReady(t, v, conds, metav1.ConditionTrue, common.ReasonReconciled)

	// A Vault reference needs a Vault address; this manager has none.
	v.Spec.Keys = common.KeyReference{Vault: &common.VaultKeyReference{Role: "vendor-globex", Path: "mohito/globex"}}
	update(t, v)
	waitReady(t, v, conds, metav1.ConditionFalse, common.ReasonVaultNotConfigured)
	v.Spec.Keys.Vault.Address = "https://vault.vault.svc:8200"
	update(t, v)
	waitReady(t, v, conds, metav1.ConditionTrue, common.ReasonReconciled)
}

// TestVendorKeyEpochs: a key ring Secret (keys.secretRef.epochs) is checked entry by entry, its
// epochs are reported in status, and a new epoch records a KeyEpochRotated Event; the API
// server refuses a key name that does not apply with epochs.
func TestVendorKeyEpochs(t *testing.T) {
	ns := namespace(t)
	v := vendor(ns, "initech", 2, 10)
	v.Spec.Keys.SecretRef.Epochs = true
	create(t, v)
	conds := func() []metav1.Condition { return v.Status.Conditions }
	key := func() []byte {
		k := make([]byte, X25519KeySize)
		if _, err := rand.Read(k); err != nil {
			t.Fatal(err)
		}
		return []byte(base64.StdEncoding.EncodeToString(k))
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "initech-key"},
		Data: map[string][]byte{"private.key": key()}}
	create(t, sec)
	waitReady(t, v, conds, metav1.ConditionFalse, common.ReasonInvalidKey)
	if c := readyCondition(v.Status.Conditions); c == nil || !contains(c.Message, "no epoch-<n>.key") {
		t.Errorf("message should say the Secret has no epoch entry: %+v", c)
	}

	sec.Data = map[string][]byte{"epoch-3.key": key(), "epoch-4.key": []byte("short")}
	update(t, sec)
	eventually(t, "the message names the bad epoch entry", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(v), v); err != nil {
			return err
		}
		if c := readyCondition(v.Status.Conditions); c == nil || c.Reason != common.ReasonInvalidKey || !contains(c.Message, `"epoch-4.key"`) {
			return errorf("ready condition %+v", c)
		}
		return nil
	})

	delete(sec.Data, "epoch-4.key")
	update(t, sec)
	waitReady(t, v, conds, metav1.ConditionTrue, common.ReasonReconciled)
	if got := v.Status.KeyEpochs; !slices.Equal(got, []int32{3}) {
		t.Errorf("status.keyEpochs = %v, want [3]", got)
	}

	sec.Data["epoch-4.key"] = key()
	update(t, sec)
	eventually(t, "status.keyEpochs [3 4]", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(v), v); err != nil {
			return err
		}
		if !slices.Equal(v.Status.KeyEpochs, []int32{3, 4}) {
			return errorf("status.keyEpochs = %v", v.Status.KeyEpochs)
		}
		return nil
	})
	waitEvent(t, v, "Normal", ReasonKeyEpochRotated)

	bad := vendor(ns, "hooli", 3, 10)
	bad.Spec.Keys.SecretRef.Epochs, bad.Spec.Keys.SecretRef.Key = true, "other.key"
	if err := k8s.Create(context.Background(), bad); err == nil || !contains(err.Error(), "does not apply with epochs") {
		t.Errorf("epochs with a key name: %v, want a CEL rejection", err)
	}
}

func TestVendorIndexMustBeUnique(t *testing.T) {
	ns := namespace(t)
	keySecret(t, ns, "a-key", X25519KeySize)
	keySecret(t, ns, "b-key", X25519KeySize)
	a, b := vendor(ns, "a", 3, 10), vendor(ns, "b", 3, 10)
	create(t, a)
	create(t, b)
	waitReady(t, a, func() []metav1.Condition { return a.Status.Conditions }, metav1.ConditionFalse, ReasonDuplicateIndex)
	waitReady(t, b, func() []metav1.Condition { return b.Status.Conditions }, metav1.ConditionFalse, ReasonDuplicateIndex)
	if err := k8s.Delete(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, func() []metav1.Condition { return a.Status.Conditions }, metav1.ConditionTrue, common.ReasonReconciled)
}

func TestRoundNeedsVendorsShufflersCapacityAndKey(t *testing.T) {
	ns := namespace(t)
	rd := round(ns, "home")
	create(t, rd)
	conds := func() []metav1.Condition { return rd.Status.Conditions }
	waitReady(t, rd, conds, metav1.ConditionFalse, ReasonNoVendorsSelected)
	waitEvent(t, rd, "Warning", ReasonNoVendorsSelected)

	keySecret(t, ns, "small-key", X25519KeySize)
	keySecret(t, ns, "large-key", X25519KeySize)
	small, large := vendor(ns, "small", 0, 10), vendor(ns, "large", 1, 1000)
	create(t, small)
	create(t, large)
	// δ defaults to 100: K_v = 200 cannot hold base 50 + δ 100 + jitter 10 = 160? It can; make
	// the small vendor's padding too small instead.
	small.Spec.Capacity.PaddedEntries = 120
	update(t, small)
	waitReady(t, rd, conds, metav1.ConditionFalse, ReasonCapacityTooSmall)
	if c := readyCondition(rd.Status.Conditions); c == nil || !contains(c.Message, "small") {
		t.Errorf("CapacityTooSmall should name the vendor: %+v", c)
	}
	small.Spec.Capacity.PaddedEntries = 160
	update(t, small)
	waitReady(t, rd, conds, metav1.ConditionFalse, ReasonNoShufflerAvailable)

	// A shuffler with weight 0 is out of the rotation and does not count. It is healthy, and
	// waits for the series to publish its deployment before its workload can run.
	s := shuffler(ns, "large-shuffler", "large")
	s.Spec.Weight = ptr.To[int64](0)
	create(t, s)
	waitRollingOut(t, s, func() []metav1.Condition { return s.Status.Conditions })
	waitReady(t, rd, conds, metav1.ConditionFalse, ReasonNoShufflerAvailable)
	s.Spec.Weight = nil
	update(t, s)
	// One vendor with a shuffler is enough: the small vendor, without one, is out of the
	// rotation — rendered with weight 0, so the services never choose it as V* (its rounds
	// would abort) — and the Round says so.
	waitReady(t, rd, conds, metav1.ConditionFalse, common.ReasonKeySecretNotFound)
	keySecret(t, ns, "integrator-key", X25519KeySize)
	waitRollingOut(t, rd, conds)
	markAvailable(t, ns)
	waitReady(t, rd, conds, metav1.ConditionTrue, common.ReasonReconciled)
	if c := readyCondition(rd.Status.Conditions); c == nil || !contains(c.Message, "out of the shuffler rotation (no Shuffler of positive weight): small") {
		t.Errorf("Ready should name the vendor out of the rotation: %+v", c)
	}
	waitWeights(t, rd, map[string]int{"large": int(large.Spec.Devices), "small": 0})

	// The small vendor's Shuffler, weighted 3, joins the rotation with that weight.
	ss := shuffler(ns, "small-shuffler", "small")
	ss.Spec.Weight = ptr.To[int64](3)
	create(t, ss)
	waitWeights(t, rd, map[string]int{"large": int(large.Spec.Devices), "small": 3})
	// The deployment changed: the workloads roll again, and the Round is ready once they are
	// available.
	waitRollingOut(t, rd, conds)
	markAvailable(t, ns)
	waitReady(t, rd, conds, metav1.ConditionTrue, common.ReasonReconciled)
	waitEvent(t, rd, "Normal", common.ReasonReconciled)
	if rd.Status.Vendors != 2 || rd.Status.Shufflers != 2 || rd.Status.PaddedCapacity != 160+200 {
		t.Errorf("status vendors/shufflers/capacity = %d/%d/%d, want 2/2/360",
			rd.Status.Vendors, rd.Status.Shufflers, rd.Status.PaddedCapacity)
	}
	// The response timing every round has (G7, issue item 10): the deadline is one period and
	// devices answer at a quarter of it.
	if rd.Status.ResponseDeadline == nil || rd.Status.ResponseDeadline.Duration != rd.Spec.Period.Duration ||
		rd.Status.DeviceAnswerAfter == nil || rd.Status.DeviceAnswerAfter.Duration != rd.Spec.Period.Duration/4 {
		t.Errorf("status responseDeadline/deviceAnswerAfter = %v/%v, want %v/%v",
			rd.Status.ResponseDeadline, rd.Status.DeviceAnswerAfter, rd.Spec.Period.Duration, rd.Spec.Period.Duration/4)
	}

	// Raising δ makes the same capacities insufficient: C_v could exceed K_v.
	rd.Spec.Delta = 150
	update(t, rd)
	waitReady(t, rd, conds, metav1.ConditionFalse, ReasonCapacityTooSmall)
	rd.Spec.Delta = 100
	// The response OKVS must hold q entries per device (G6).
	rd.Spec.CommandsPerUser = 2
	update(t, rd)
	large.Spec.Capacity.ResponsePaddedEntries = 1500
	update(t, large)
	waitReady(t, rd, conds, metav1.ConditionFalse, ReasonResponseCapacityTooSmall)
	large.Spec.Capacity.ResponsePaddedEntries = 2048
	update(t, large)
	// q changed the deployment: the workloads roll again.
	waitRollingOut(t, rd, conds)
	markAvailable(t, ns)
	waitReady(t, rd, conds, metav1.ConditionTrue, common.ReasonReconciled)

	// Capacity classes (issue 14): a hold under ten periods is refused by condition, the largest
	// class's draw must fit every K_v, and a valid policy reaches the coordinator's deployment.
	rd.Spec.Capacity.Classes = &mohitov1.CapacityClasses{Percent: []int32{100, 150}, Hold: metav1.Duration{Duration: 10 * time.Second},
		BurstPercent: 5, LowerFakePercent: 80}
	update(t, rd)
	waitReadyMessage(t, rd, conds, ReasonInvalidCapacityClasses, "at least 10 periods")
	rd.Spec.Capacity.Classes.Hold = metav1.Duration{Duration: time.Minute}
	update(t, rd)
	waitReadyMessage(t, rd, conds, ReasonCapacityTooSmall, "× 150%") // small: ⌈50 × 1.5⌉ + 100 + 10 > 160
	small.Spec.Capacity.PaddedEntries = 200
	update(t, small)
	eventually(t, "capacity classes in the deployment", func() error {
		doc, err := deploymentDoc(rd)
		if err != nil {
			return err
		}
		if c := doc.CapacityClasses; c == nil || c.Hold != "1m0s" || !slices.Equal(c.Percent, []int{100, 150}) || c.BurstRate != 0.05 || c.LowerFakeRatio != 0.8 {
			return fmt.Errorf("capacityClasses %+v", c)
		}
		return nil
	})
	waitRollingOut(t, rd, conds)
	markAvailable(t, ns)
	waitReady(t, rd, conds, metav1.ConditionTrue, common.ReasonReconciled)

	// A selector that matches nothing any more.
	rd.Spec.VendorSelector = metav1.LabelSelector{MatchLabels: map[string]string{seriesLabel: "office"}}
	update(t, rd)
	waitReady(t, rd, conds, metav1.ConditionFalse, ReasonNoVendorsSelected)
}

// deploymentDoc reads the Round's deployment document as the services read it.
func deploymentDoc(rd *mohitov1.Round) (contract.DeploymentFile, error) {
	var cm corev1.ConfigMap
	var doc contract.DeploymentFile
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: rd.Namespace, Name: mohito.DeploymentConfigName(rd)}, &cm); err != nil {
		return doc, err
	}
	return doc, json.Unmarshal([]byte(cm.Data[contract.DeploymentKey]), &doc)
}

// waitWeights waits until the Round's deployment document gives each vendor (by name) its
// weight in the shuffler rotation, as the services read it.
func waitWeights(t *testing.T, rd *mohitov1.Round, want map[string]int) {
	t.Helper()
	eventually(t, fmt.Sprintf("shuffler weights %v in the deployment of %s", want, rd.Name), func() error {
		doc, err := deploymentDoc(rd)
		if err != nil {
			return err
		}
		for _, v := range doc.Vendors {
			if v.ShufflerWeight == nil || *v.ShufflerWeight != want[v.Name] {
				return fmt.Errorf("vendor %s: shufflerWeight %v", v.Name, v.ShufflerWeight)
			}
		}
		return nil
	})
}

func readyCondition(conds []metav1.Condition) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == common.ConditionReady {
			return &conds[i]
		}
	}
	return nil
}
