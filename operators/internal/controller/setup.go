package controller

import (
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/internal/loisstatus"
	"github.com/obscura-iot/obscura/operators/internal/mohitostatus"
	"github.com/obscura-iot/obscura/operators/internal/pdastatus"
	"github.com/obscura-iot/obscura/operators/internal/ppsstatus"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/lois"
	"github.com/obscura-iot/obscura/operators/internal/specs/mohito"
	"github.com/obscura-iot/obscura/operators/internal/specs/pda"
	"github.com/obscura-iot/obscura/operators/internal/specs/pps"
	"github.com/obscura-iot/obscura/operators/internal/specs/sddr"
)

// Options configures the reconcilers: what every system's workloads share, then one struct
// per system.
type Options struct {
	// Runtime is where and how every system's workloads run; its VaultAddress is also the
	// default address the key checks accept.
	Runtime specs.Runtime
	Mohito  MohitoOptions
	PDA     PDAOptions
	PPS     PPSOptions
	LOIS    LOISOptions
	SDDR    SDDROptions
	// NATSAccounts renders the NATS server's accounts; its zero value renders none.
	NATSAccounts NATSAccountsOptions
}

// MohitoOptions configures the Vendor, Shuffler and Round reconcilers.
type MohitoOptions struct {
	// Image runs every Mohito role; without it (or without Runtime.NATSURL) resources are
	// only validated.
	Image string
	// IntegratorRedis is the integrator's Redis (round state, mailboxes).
	IntegratorRedis string
	// Services connects the reconcilers to the services' KV figures, the workers' backlog and
	// the vendor registry; nil leaves status figures empty and scaling to the scale subresource.
	Services *mohitostatus.Client
}

// PDAOptions configures the AggregationJob reconciler.
type PDAOptions struct {
	// Image runs every PDA role; without it (or without Runtime.NATSURL) jobs are only
	// validated and follow the clock.
	Image string
	// Services reads the PDA services' progress and writes the shard ring; nil without NATS.
	Services *pdastatus.Client
	// ProxyPort is the proxy ingress's port (0: pda.ProxyPort).
	ProxyPort int
}

// PPSOptions configures the SecurePipeline reconciler.
type PPSOptions struct {
	// Image runs both PPS parties (`pps broker`, `pps garbler`); without it (or without
	// Runtime.NATSURL) pipelines are only validated.
	Image string
	// Services reads what the broker reports; nil leaves the execution figures empty.
	Services ppsstatus.Source
	// MetricsPort is where the broker pods serve /metrics (0: the shared MetricsPort).
	MetricsPort int
}

// LOISOptions configures the HeaderGateway reconciler.
type LOISOptions struct {
	// Image runs the LOIS cloud interfaces (`lois ci`); without it (or without
	// Runtime.NATSURL) gateways are only validated.
	Image string
	// Services reads what the cloud interfaces report; nil leaves the figures empty.
	Services loisstatus.Source
	// RecordKeyStageDelay and RecordKeyRetention time the record key rotation
	// (HeaderGatewayReconciler); zero values are its defaults.
	RecordKeyStageDelay, RecordKeyRetention time.Duration
}

// SDDROptions configures the SDDR reconcilers.
type SDDROptions struct {
	// Image runs `sddr` (the EncounterMailbox's `sddr mailbox`, the EncounterSimulation's
	// `sddr simulate`); without it mailboxes and simulations are only validated.
	Image string
}

// NATSAccountsOptions: when Secret is named, the server's accounts are rendered there, with
// OperatorUsers (the operator's own users) besides every credentials Secret's.
type NATSAccountsOptions struct {
	Secret        client.ObjectKey
	OperatorUsers []specs.NATSUser
	// Owner is the operator's Deployment, owner of the accounts Secret ("" for none).
	Owner string
}

// mohitoPlatform is where the Mohito workloads run.
func (o Options) mohitoPlatform() mohito.Platform {
	return mohito.Platform{Image: o.Mohito.Image, IntegratorRedis: o.Mohito.IntegratorRedis, Runtime: o.Runtime}
}

// pdaPlatform is where the PDA workloads run.
func (o Options) pdaPlatform() pda.Platform {
	return pda.Platform{Image: o.PDA.Image, ProxyPort: o.PDA.ProxyPort, Runtime: o.Runtime}
}

// ppsPlatform is where the PPS workloads run.
func (o Options) ppsPlatform() pps.Platform {
	return pps.Platform{Image: o.PPS.Image, Runtime: o.Runtime}
}

// SetupAll registers every reconciler of the operator with mgr. The manager binary and the
// tests both call it, so the tests run exactly the production wiring.
func SetupAll(mgr ctrl.Manager, opts Options) error {
	keys := KeyCheck{Client: mgr.GetClient(), VaultAddress: opts.Runtime.VaultAddress}
	mp, m := opts.mohitoPlatform(), opts.Mohito
	reconcilers := []struct {
		name  string
		setup func(ctrl.Manager) error
	}{
		{"vendor", (&VendorReconciler{Client: mgr.GetClient(), Keys: keys, Recorder: mgr.GetEventRecorder("vendor-controller"), Platform: mp, Services: m.Services}).SetupWithManager},
		{"shuffler", (&ShufflerReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("shuffler-controller"), Platform: mp, Services: m.Services}).SetupWithManager},
		{"round", (&RoundReconciler{Client: mgr.GetClient(), Keys: keys, Recorder: mgr.GetEventRecorder("round-controller"), Platform: mp, Services: m.Services}).SetupWithManager},
		{"aggregationjob", (&AggregationJobReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Keys: keys, Recorder: mgr.GetEventRecorder("aggregationjob-controller"),
			Platform: opts.pdaPlatform(), Services: opts.PDA.Services}).SetupWithManager},
		{"securepipeline", (&SecurePipelineReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Keys: keys, Recorder: mgr.GetEventRecorder("securepipeline-controller"),
			Platform: opts.ppsPlatform(), Services: opts.PPS.Services, MetricsPort: opts.PPS.MetricsPort}).SetupWithManager},
		{"headergateway", (&HeaderGatewayReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("headergateway-controller"),
			Platform: lois.Platform{Image: opts.LOIS.Image, Runtime: opts.Runtime}, Services: opts.LOIS.Services,
			RecordKeyStageDelay: opts.LOIS.RecordKeyStageDelay, RecordKeyRetention: opts.LOIS.RecordKeyRetention}).SetupWithManager},
		{"encountermailbox", (&EncounterMailboxReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("encountermailbox-controller"),
			Platform: sddr.Platform{Image: opts.SDDR.Image, Runtime: opts.Runtime}}).SetupWithManager},
		{"encountersimulation", (&EncounterSimulationReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("encountersimulation-controller"),
			Platform: sddr.Platform{Image: opts.SDDR.Image, Runtime: opts.Runtime}}).SetupWithManager},
	}
	if a := opts.NATSAccounts; a.Secret.Name != "" {
		reconcilers = append(reconcilers, struct {
			name  string
			setup func(ctrl.Manager) error
		}{"nats-accounts", (&NATSAccountsReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("nats-accounts-controller"),
			Secret: a.Secret, Operator: a.OperatorUsers, Owner: a.Owner}).SetupWithManager})
	}
	for _, r := range reconcilers {
		if err := r.setup(mgr); err != nil {
			return fmt.Errorf("set up %s controller: %w", r.name, err)
		}
	}
	return nil
}
