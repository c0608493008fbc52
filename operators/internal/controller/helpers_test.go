package controller

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// update writes obj's spec (or data), retrying on conflicts with the reconcilers' status
// writes by re-reading and re-applying the caller's change.
func update(t *testing.T, obj client.Object) {
	t.Helper()
	want := obj.DeepCopyObject().(client.Object)
	for range 20 {
		err := k8s.Update(context.Background(), obj)
		if err == nil {
			return
		}
		if !errors.IsConflict(err) {
			t.Fatalf("update %T %s: %v", obj, obj.GetName(), err)
		}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		// Carry the caller's desired object over the fresh resourceVersion.
		rv := obj.GetResourceVersion()
		want.SetResourceVersion(rv)
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(want.DeepCopyObject()).Elem())
	}
	t.Fatalf("update %T %s: still conflicting", obj, obj.GetName())
}

// waitReadyMessage waits until obj is Ready=False with reason and a message containing want.
func waitReadyMessage(t *testing.T, obj client.Object, conds func() []metav1.Condition, reason, want string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%T %s Ready=False/%s %q", obj, obj.GetName(), reason, want), func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		c := readyCondition(conds())
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason || !contains(c.Message, want) {
			return fmt.Errorf("ready condition %+v", c)
		}
		return nil
	})
}
