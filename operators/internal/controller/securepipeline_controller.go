package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/obscura-iot/obscura/operators/api/common"
	ppsv1 "github.com/obscura-iot/obscura/operators/api/pps/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/ppsstatus"
	"github.com/obscura-iot/obscura/operators/internal/specs/pps"
)

// ConditionConfigValid is True when a SecurePipeline's spec can run as written: its trust
// domains are separate and exist, the services support its mode, and every Secret it names
// is there. It is False with the reason of the first problem found.
const ConditionConfigValid = "ConfigValid"

// Reasons a SecurePipeline reports.
const (
	// ReasonInvalidPipeline: the services would refuse the pipeline (contract.Pipeline.Validate).
	ReasonInvalidPipeline = "InvalidPipeline"
	// ReasonTLSSecretNotFound: a Secret of the broker↔garbler mTLS link is missing or lacks
	// tls.crt, tls.key or ca.crt.
	ReasonTLSSecretNotFound = "TLSSecretNotFound"
)

const pipelineNamespaceIndex = ".spec.garbler.namespace+self"

// SecurePipelineReconciler runs a PPS function: it checks that the pipeline can run (two
// separate trust domains that exist, a mode the services support, the garbler's keys and the
// link's TLS Secrets present), renders the pipelines file into both domains, runs the broker
// in the pipeline's namespace with its NATS user and its devices' users, and the garbler in
// its own namespace with no NATS credentials and only the broker let in, scales the broker's
// evaluator workers, and reports each execution from the broker's metrics in status.
type SecurePipelineReconciler struct {
	client.Client
	// APIReader reads what the cache does not hold: objects for cleanup, and the broker pods
	// (the operator keeps no informer on Pods).
	APIReader client.Reader
	Keys      KeyCheck
	Recorder  events.EventRecorder
	// Platform says where the PPS services run; without an image and a NATS URL the
	// reconciler validates only.
	Platform pps.Platform
	// Services reads what the broker reports; nil leaves the execution figures empty.
	Services ppsstatus.Source
	// MetricsPort is where the broker pods serve /metrics (0: specs.MetricsPort).
	MetricsPort int
}

// +kubebuilder:rbac:groups=pps.obscura.dev,resources=securepipelines,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=pps.obscura.dev,resources=securepipelines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=pps.obscura.dev,resources=securepipelines/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps;services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete

// Reconcile evaluates one SecurePipeline.
func (r *SecurePipelineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var p ppsv1.SecurePipeline
	if err := r.Get(ctx, req.NamespacedName, &p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !p.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &p)
	}
	runs := r.Platform.Validate() == nil
	// The garbler lives in another namespace, out of reach of owner references: the finalizer
	// is what removes it when the pipeline goes.
	if runs {
		if stop, err := addFinalizer(ctx, r.Client, &p, PipelineFinalizer); stop || err != nil {
			return ctrl.Result{}, err
		}
	}
	before := p.Status.DeepCopy()

	o, err := r.evaluate(ctx, &p)
	if err != nil {
		return ctrl.Result{}, err
	}
	setConfigValid(&p, o)
	var next time.Duration
	if o.ready && runs {
		// What the broker reports comes first: the function id it compiled is what the
		// subscribers' NATS permissions name.
		next = r.observe(ctx, &p)
		if o, err = r.applyWorkloads(ctx, &p); err != nil {
			return ctrl.Result{}, err
		}
	}
	res, err := writeStatus(ctx, r.Client, r.Recorder, statusWrite{obj: &p, before: before, after: &p.Status,
		conditions: &p.Status.Conditions, observed: &p.Status.ObservedGeneration, outcome: o})
	if err == nil && next > 0 {
		res.RequeueAfter = next
	}
	return res, err
}

// setConfigValid writes the ConfigValid condition: False with the reason of a problem found by
// evaluate, True once the checks pass.
func setConfigValid(p *ppsv1.SecurePipeline, o outcome) {
	c := metav1.Condition{Type: ConditionConfigValid, Status: metav1.ConditionTrue, Reason: common.ReasonReconciled,
		Message: "the spec can run as written", ObservedGeneration: p.Generation}
	if !o.ready {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, o.reason, o.message
	}
	meta.SetStatusCondition(&p.Status.Conditions, c)
}

// evaluate checks that the pipeline can run as written.
func (r *SecurePipelineReconciler) evaluate(ctx context.Context, p *ppsv1.SecurePipeline) (outcome, error) {
	g := p.Spec.Garbler
	// CEL cannot see metadata.namespace, so the reconciler enforces the separation.
	if g.Namespace == p.Namespace {
		return *degraded(ReasonSharedTrustDomain,
			"the garbler runs in the pipeline's own namespace %s: the broker and the garbler are separate trust domains that must never collude (spec §5.4); set spec.garbler.namespace to another namespace", p.Namespace), nil
	}
	cp := pps.Pipeline(p)
	if err := cp.Validate(); err != nil {
		return *degraded(ReasonInvalidPipeline, "%v", err), nil
	}
	var ns corev1.Namespace
	err := r.Get(ctx, client.ObjectKey{Name: g.Namespace}, &ns)
	if apierrors.IsNotFound(err) {
		return *degraded(ReasonNamespaceNotFound, "garbler namespace %s does not exist", g.Namespace), nil
	}
	if err != nil {
		return outcome{}, fmt.Errorf("get garbler namespace %s: %w", g.Namespace, err)
	}
	if o, err := r.checkSecrets(ctx, p); err != nil || o != nil {
		return deref(o), err
	}
	return ready(r.summary(p)), nil
}

// checkSecrets verifies every Secret the pipeline names: the garbler's keys, the Redis
// passwords and the link's TLS Secrets, each in its own domain. Nothing read is logged.
func (r *SecurePipelineReconciler) checkSecrets(ctx context.Context, p *ppsv1.SecurePipeline) (*outcome, error) {
	g := p.Spec.Garbler
	switch k := g.Keys; {
	case k.Vault != nil:
		if k.Vault.Address == "" && r.Keys.VaultAddress == "" {
			return degraded(common.ReasonVaultNotConfigured, "garbler keys: keys.vault has no address and the operator has no --vault-address"), nil
		}
	case k.SecretRef != nil:
		var s corev1.Secret
		err := r.Keys.Client.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: k.SecretRef.Name}, &s)
		if apierrors.IsNotFound(err) {
			return degraded(common.ReasonKeySecretNotFound, "garbler keys: Secret %s/%s not found", g.Namespace, k.SecretRef.Name), nil
		}
		if err != nil {
			return nil, fmt.Errorf("get garbler key Secret %s/%s: %w", g.Namespace, k.SecretRef.Name, err)
		}
		if o := checkKeyEntry("garbler identity key", &s, orDefaultString(k.SecretRef.IdentityKey, "identity.key"), nil); o != nil {
			return o, nil
		}
		// The sealing key is a 32-byte symmetric key (XChaCha20-Poly1305 envelope).
		if o := checkKeyEntry("garbler sealing key", &s, orDefaultString(k.SecretRef.SealKey, "seal.key"), symmetricKey(32, "XChaCha20-Poly1305 sealing key")); o != nil {
			return o, nil
		}
	default:
		return degraded(common.ReasonInvalidKey, "garbler keys: no key source set"), nil
	}
	for _, c := range []struct {
		ns, what string
		ref      *common.SecretFileReference
	}{
		{p.Namespace, "broker Redis password", p.Spec.Broker.Redis.PasswordSecret},
		{g.Namespace, "garbler Redis password", g.Redis.PasswordSecret},
	} {
		if o, err := r.Keys.checkSecretFile(ctx, c.ns, c.what, c.ref, pps.RedisPasswordKey); err != nil || o != nil {
			return o, err
		}
	}
	for _, t := range []struct{ ns, name, what string }{
		{g.Namespace, pps.GarblerTLSSecret(p), "garbler TLS (serving certificate, and the broker domain's CA as ca.crt)"},
		{p.Namespace, pps.BrokerTLSSecret(p), "broker TLS (client certificate, and the garbler domain's CA as ca.crt)"},
	} {
		for _, key := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, "ca.crt"} {
			o, err := r.Keys.checkSecretFile(ctx, t.ns, t.what, &common.SecretFileReference{Name: t.name}, key)
			if err != nil {
				return nil, err
			}
			if o != nil {
				o.reason = ReasonTLSSecretNotFound
				return o, nil
			}
		}
	}
	return nil, nil
}

func orDefaultString(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func (r *SecurePipelineReconciler) summary(p *ppsv1.SecurePipeline) string {
	return fmt.Sprintf("%s mode, %d publishers, %d subscribers, every %s with a %s window; broker %d×%d workers in %s, garbler ×%d in %s",
		orDefaultString(string(p.Spec.Mode), string(ppsv1.ModeFaithful)), len(p.Spec.Publishers), len(p.Spec.Subscribers),
		p.Spec.Schedule.Duration, p.Spec.Window.Duration, max(p.Spec.Broker.Replicas, 1), pps.Workers(p), p.Namespace,
		max(p.Spec.Garbler.Replicas, 1), p.Spec.Garbler.Namespace)
}

// SetupWithManager registers the reconciler and its watches. The garbler's Secrets and
// Namespace, and the broker's Secrets, map back to the pipelines through one index.
func (r *SecurePipelineReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &ppsv1.SecurePipeline{}, pipelineNamespaceIndex, func(o client.Object) []string {
		p := o.(*ppsv1.SecurePipeline)
		return []string{p.Namespace, p.Spec.Garbler.Namespace}
	}); err != nil {
		return fmt.Errorf("index secure pipelines by trust-domain namespace: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&ppsv1.SecurePipeline{}).
		// The garbler is in another namespace: no owner references, so map the workloads back
		// by their labels.
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(pipelineOfWorkload)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.pipelinesIn(ctx, o.GetName())
		})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.pipelinesIn(ctx, o.GetNamespace())
		})).
		Named("securepipeline").
		Complete(r)
}

func (r *SecurePipelineReconciler) pipelinesIn(ctx context.Context, namespace string) []reconcile.Request {
	var list ppsv1.SecurePipelineList
	if err := r.List(ctx, &list, client.MatchingFields{pipelineNamespaceIndex: namespace}); err != nil {
		logf.FromContext(ctx).Error(err, "list secure pipelines by trust domain")
		return nil
	}
	return requestsFor(list.Items, "")
}

// pipelineOfWorkload maps a workload in either trust domain back to its pipeline.
func pipelineOfWorkload(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	name, ns := l[pps.LabelPipeline], l[pps.LabelPipelineNamespace]
	if name == "" || ns == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}}
}
