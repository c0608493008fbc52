package controller

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/internal/mohitostatus"
	"github.com/obscura-iot/obscura/operators/internal/pdastatus"
	"github.com/obscura-iot/obscura/operators/internal/specs"
)

// Options configures the reconcilers.
type Options struct {
	// Platform says where Mohito workloads run; the zero value only validates resources. Its
	// Runtime's VaultAddress is also the default address the key checks accept.
	Platform specs.Platform
	// Services connects the reconcilers to the services' KV figures, the workers' backlog and
	// the vendor registry; nil leaves status figures empty and scaling to the scale subresource.
	Services *mohitostatus.Client
	// PDAPlatform says where the PDA services run; the zero value only validates jobs.
	PDAPlatform specs.PDAPlatform
	// PDAServices reads the PDA services' progress and writes the shard ring; nil without NATS.
	PDAServices *pdastatus.Client
	// NATSAccountsSecret, when named, is where the NATS server's accounts are rendered, with
	// NATSOperatorUsers (the operator's own users) besides every credentials Secret's.
	NATSAccountsSecret client.ObjectKey
	NATSOperatorUsers  []specs.NATSUser
	// NATSAccountsOwner is the operator's Deployment, owner of the accounts Secret ("" for none).
	NATSAccountsOwner string
}

// SetupAll registers every reconciler of the operator with mgr. The manager binary and the
// tests both call it, so the tests run exactly the production wiring.
func SetupAll(mgr ctrl.Manager, opts Options) error {
	keys := KeyCheck{Client: mgr.GetClient(), VaultAddress: opts.Platform.VaultAddress}
	reconcilers := []struct {
		name  string
		setup func(ctrl.Manager) error
	}{
		{"vendor", (&VendorReconciler{Client: mgr.GetClient(), Keys: keys, Recorder: mgr.GetEventRecorder("vendor-controller"), Platform: opts.Platform, Services: opts.Services}).SetupWithManager},
		{"shuffler", (&ShufflerReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("shuffler-controller"), Platform: opts.Platform, Services: opts.Services}).SetupWithManager},
		{"round", (&RoundReconciler{Client: mgr.GetClient(), Keys: keys, Recorder: mgr.GetEventRecorder("round-controller"), Platform: opts.Platform, Services: opts.Services}).SetupWithManager},
		{"aggregationjob", (&AggregationJobReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Keys: keys, Recorder: mgr.GetEventRecorder("aggregationjob-controller"),
			Platform: opts.PDAPlatform, Services: opts.PDAServices}).SetupWithManager},
	}
	if opts.NATSAccountsSecret.Name != "" {
		reconcilers = append(reconcilers, struct {
			name  string
			setup func(ctrl.Manager) error
		}{"nats-accounts", (&NATSAccountsReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("nats-accounts-controller"),
			Secret: opts.NATSAccountsSecret, Operator: opts.NATSOperatorUsers, Owner: opts.NATSAccountsOwner}).SetupWithManager})
	}
	for _, r := range reconcilers {
		if err := r.setup(mgr); err != nil {
			return fmt.Errorf("set up %s controller: %w", r.name, err)
		}
	}
	return nil
}
