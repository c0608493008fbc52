package controller

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/api/common"
	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// TestVendorRefusesInvalidDeviceRegistry: a device registry the operator cannot read issues no
// device login and says so (Degraded, InvalidDeviceRegistry, without repeating an id); once it
// is fixed, each device gets its own.
func TestVendorRefusesInvalidDeviceRegistry(t *testing.T) {
	ns := namespace(t)
	keySecret(t, ns, "acme-key", X25519KeySize)
	registry := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "acme-devices"},
		Data: map[string][]byte{mohito.DevicesFile: []byte(`[{"id": "lamp"}, {"id": "bad.id"}]`)}}
	create(t, registry)
	v := vendor(ns, "acme", 7, 100)
	v.Spec.Agent = &mohitov1.VendorAgent{Replicas: 1, Devices: &common.SecretFileReference{Name: "acme-devices"}}
	create(t, v)
	conds := func() []metav1.Condition { return v.Status.Conditions }
	waitReady(t, v, conds, metav1.ConditionFalse, ReasonInvalidDeviceRegistry)
	vs := &corev1.Secret{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: mohito.NATSSecretName("acme")}, vs); err == nil {
		if _, ok := vs.Data["lamp"+specs.DevicePasswordSuffix]; ok {
			t.Fatal("a device got a login from a registry that does not parse")
		}
	}

	registry.Data[mohito.DevicesFile] = []byte(`[{"id": "lamp"}, {"id": "lock"}]`)
	if err := k8s.Update(context.Background(), registry); err != nil {
		t.Fatal(err)
	}
	eventually(t, "each device has its own login", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: mohito.NATSSecretName("acme")}, vs); err != nil {
			return err
		}
		for _, id := range []string{"lamp", "lock"} {
			if string(vs.Data[id+specs.DeviceUserSuffix]) != contract.DeviceUser(7, id) || len(vs.Data[id+specs.DevicePasswordSuffix]) != 64 {
				return fmt.Errorf("device %s has no login", id)
			}
		}
		return nil
	})
}
