package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/obscura-iot/obscura/operators/api/common"
)

// outcome is what one reconcile concluded about an object: ready, rolling its workloads out,
// or degraded for a reason. Checks return the first failing outcome; the reconciler writes it
// as conditions.
type outcome struct {
	ready       bool // every check passed
	progressing bool // checks passed and workloads are still catching up
	reason      string
	message     string
	// retryAfter: a degraded outcome caused by something outside the cluster's objects (NATS
	// unavailable) that no watch event will report gone; the reconcile is repeated after it.
	retryAfter time.Duration
}

// retryTransient is how soon a reconcile degraded by an unavailable service runs again.
const retryTransient = 10 * time.Second

// unavailable is a degraded outcome that clears by itself once a service is back: the
// reconcile is retried after retryTransient.
func unavailable(reason, format string, args ...any) *outcome {
	o := degraded(reason, format, args...)
	o.retryAfter = retryTransient
	return o
}

// ReasonRollingOut: the checks passed and the operator is waiting for workloads to catch up.
const ReasonRollingOut = "RollingOut"

func ready(message string) outcome {
	return outcome{ready: true, reason: common.ReasonReconciled, message: message}
}

func rollingOut(format string, args ...any) outcome {
	return outcome{ready: true, progressing: true, reason: ReasonRollingOut, message: fmt.Sprintf(format, args...)}
}

func degraded(reason, format string, args ...any) *outcome {
	return &outcome{reason: reason, message: fmt.Sprintf(format, args...)}
}

// apply writes the outcome into conditions as Ready/Degraded/Progressing for generation gen
// and reports whether the Ready condition changed (status, reason or message).
func (o outcome) apply(conds *[]metav1.Condition, gen int64) bool {
	status := func(b bool) metav1.ConditionStatus {
		if b {
			return metav1.ConditionTrue
		}
		return metav1.ConditionFalse
	}
	changed := meta.SetStatusCondition(conds, metav1.Condition{
		Type: common.ConditionReady, Status: status(o.ready && !o.progressing), Reason: o.reason, Message: o.message, ObservedGeneration: gen,
	})
	degradedMessage := o.message
	if o.ready {
		degradedMessage = "no problem found"
	}
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: common.ConditionDegraded, Status: status(!o.ready), Reason: o.reason, Message: degradedMessage, ObservedGeneration: gen,
	})
	progressMessage := "the workloads match the desired state"
	if o.progressing {
		progressMessage = o.message
	} else if !o.ready {
		progressMessage = "waiting for the problem to be fixed"
	}
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: common.ConditionProgressing, Status: status(o.progressing), Reason: o.reason, Message: progressMessage, ObservedGeneration: gen,
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

// statusWrite is what writeStatus persists for one object: obj itself, before (a copy of its
// status taken before this reconcile), after (obj's live status) and the conditions and
// observedGeneration inside it, and what the reconcile concluded.
type statusWrite struct {
	obj           client.Object
	before, after any
	conditions    *[]metav1.Condition
	observed      *int64
	outcome       outcome
}

// writeStatus persists what a reconcile concluded; every reconciler ends with it. The outcome
// becomes conditions for the object's generation, the status is written only when it changed,
// and a change of the Ready outcome is recorded as an Event.
func writeStatus(ctx context.Context, c client.Client, rec events.EventRecorder, w statusWrite) (ctrl.Result, error) {
	obj, o := w.obj, w.outcome
	changed := o.apply(w.conditions, obj.GetGeneration())
	*w.observed = obj.GetGeneration()
	if !equality.Semantic.DeepEqual(w.before, w.after) {
		if err := c.Status().Update(ctx, obj); err != nil {
			if apierrors.IsConflict(err) {
				// Someone changed the object since it was read; the watch event for that
				// change reconciles it again with fresh data.
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("update status of %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
		}
	}
	if changed {
		o.record(rec, obj)
		logf.FromContext(ctx).Info("evaluated", "ready", o.ready, "reason", o.reason)
	}
	return ctrl.Result{}, nil
}
