package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	"github.com/obscura-iot/obscura/operators/api/common"
)

// outcome is what one reconcile concluded about an object: either ready, or degraded for a
// reason. Checks return the first failing outcome; the reconciler writes it as conditions.
type outcome struct {
	ready   bool
	reason  string
	message string
}

func ready(message string) outcome {
	return outcome{ready: true, reason: common.ReasonReconciled, message: message}
}

func degraded(reason, format string, args ...any) *outcome {
	return &outcome{reason: reason, message: fmt.Sprintf(format, args...)}
}

// apply writes the outcome into conditions as Ready/Degraded/Progressing for generation gen
// and reports whether the Ready condition changed (status, reason or message).
func (o outcome) apply(conds *[]metav1.Condition, gen int64) bool {
	readyStatus, degradedStatus := metav1.ConditionFalse, metav1.ConditionTrue
	if o.ready {
		readyStatus, degradedStatus = metav1.ConditionTrue, metav1.ConditionFalse
	}
	changed := meta.SetStatusCondition(conds, metav1.Condition{
		Type: common.ConditionReady, Status: readyStatus, Reason: o.reason, Message: o.message, ObservedGeneration: gen,
	})
	degradedReason := o.reason
	degradedMessage := o.message
	if o.ready {
		degradedMessage = "no problem found"
	}
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: common.ConditionDegraded, Status: degradedStatus, Reason: degradedReason, Message: degradedMessage, ObservedGeneration: gen,
	})
	// Workloads arrive with later releases; until then nothing is ever in flight.
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: common.ConditionProgressing, Status: metav1.ConditionFalse, Reason: o.reason,
		Message: "the desired state has been evaluated", ObservedGeneration: gen,
	})
	return changed
}

// record emits an Event for an outcome that changed: Normal when ready, Warning otherwise.
func (o outcome) record(rec events.EventRecorder, obj runtime.Object) {
	kind := corev1.EventTypeNormal
	if !o.ready {
		kind = corev1.EventTypeWarning
	}
	rec.Eventf(obj, nil, kind, o.reason, "Reconcile", "%s", o.message)
}
