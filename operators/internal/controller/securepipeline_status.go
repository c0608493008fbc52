package controller

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	ppsv1 "github.com/obscura-iot/obscura/operators/api/pps/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/ppsstatus"
	"github.com/obscura-iot/obscura/operators/internal/specs/pps"
	ppscontract "github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

// Events about executions and the compiled function.
const (
	// ReasonExecuted (Event): the broker finished one or more executions since the last look.
	ReasonExecuted = "Executed"
	// ReasonFunctionCompiled (Event): the broker reports the function's id and circuit; the
	// subscribers' NATS users may now read its output.
	ReasonFunctionCompiled = "FunctionCompiled"
)

// maxPoll bounds how long the operator goes without reading the broker's figures.
const maxPoll = 30 * time.Second

// observe reads what the broker replicas report about the pipeline into status and returns
// when to look again. It never fails the reconcile: a broker that is starting, or briefly
// unreachable, leaves the figures where they were.
func (r *SecurePipelineReconciler) observe(ctx context.Context, p *ppsv1.SecurePipeline) time.Duration {
	if r.Services == nil {
		return 0
	}
	next := min(max(p.Spec.Schedule.Duration/4, time.Second), maxPoll)
	log := logf.FromContext(ctx)
	eps, err := r.brokerEndpoints(ctx, p)
	if err != nil {
		log.Info("broker pods unavailable", "err", err.Error())
		return next
	}
	if r.Platform.HostNetwork && len(eps) > 0 {
		// On the host network the broker's metrics listen on the pipeline's own loopback
		// port (pps.HostPorts), the only address of a pod the operator may dial.
		_, port := pps.HostPorts(p)
		eps = []string{ppsstatus.Endpoint("127.0.0.1", port)}
	}
	if len(eps) == 0 {
		return next
	}
	rep, err := r.Services.Pipeline(ctx, pps.PipelineName(p), eps)
	switch {
	case errors.Is(err, ppsstatus.ErrNotReported):
		return next
	case err != nil:
		log.Info("broker figures unavailable", "err", err.Error())
		return next
	}
	r.apply(p, rep)
	return next
}

// apply writes a broker report into status, recording an Event for a newly compiled function
// and for each batch of new executions.
func (r *SecurePipelineReconciler) apply(p *ppsv1.SecurePipeline, rep *ppsstatus.Report) {
	s := &p.Status
	if rep.FnID != "" && (rep.FnID != s.FnID || rep.CircuitHash != s.CircuitHash) {
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, ReasonFunctionCompiled, "Compile",
			"function %s, circuit %.16s…: %d AND gates, %d bytes per garbled circuit", rep.FnID, rep.CircuitHash, rep.ANDGates, rep.CircuitBytes)
		s.FnID, s.CircuitHash = rep.FnID, rep.CircuitHash
	}
	s.AndGates, s.CircuitBytes = rep.ANDGates, rep.CircuitBytes
	if rep.Last == nil {
		s.Executions = max(s.Executions, rep.Executions)
		return
	}

	// Status times have a resolution of a second (metav1.Time); comparing at that resolution
	// keeps an execution from looking new on every look.
	last := &ppsv1.Execution{Time: metav1.NewTime(rep.Last.Time.Truncate(time.Second)), Round: rep.Last.Round,
		ValidInputs: rep.Last.ValidInputs, Status: rep.Last.Status}
	// A restarted broker counts from zero again; the resource's count never goes back.
	s.Executions = max(s.Executions, rep.Executions)
	if old := s.LastExecution; old != nil && !last.Time.After(old.Time.Time) && last.Round == old.Round {
		return
	}
	s.LastExecution = last
	s.LastLatency = pps.Latency(rep.Last.Latency)
	kind := corev1.EventTypeNormal
	if last.Status != ppscontract.StatusOK {
		kind = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(p, nil, kind, ReasonExecuted, "Execute",
		"round %d: %s with %d valid inputs in %s (%d executions)", last.Round, last.Status, last.ValidInputs, s.LastLatency.Duration, s.Executions)
}
