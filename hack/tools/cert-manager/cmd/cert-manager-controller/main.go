// Command cert-manager-controller runs the cert-manager controllers that self-signed and CA
// issuance need (Issuers, ClusterIssuers, Certificates and CertificateRequests), built from the
// controller library of the github.com/cert-manager/cert-manager module (Apache-2.0) because
// cert-manager's own cmd/controller module is not served by the module proxy.
//
// It is a single replica without leader election, and it has no ACME, Vault or Venafi issuer,
// no ingress/gateway shim and no webhook: the CRDs' OpenAPI schemas still validate structure, but
// cert-manager's extra admission checks (and the requester identity the webhook fills into
// CertificateRequest.spec.username/groups) are absent.
//
//	cert-manager-controller --kubeconfig ~/.kube/config --cluster-resource-namespace cert-manager
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"

	// Controllers register themselves with controllerpkg.Known in their init functions.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	// Issuer implementations the (Cluster)Issuer controllers set up, registered in init.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// clusterIssuers is the one controller that is cluster-scoped (not run with --namespace).
const clusterIssuers = "clusterissuers"

// Controllers are the registered names of the controllers this binary runs.
var Controllers = []string{
	"issuers",
	clusterIssuers,
	"certificates-trigger",
	"certificates-issuing",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-readiness",
	"certificates-revision-manager",
	"certificaterequests-approver",
	"certificaterequests-issuer-selfsigned",
	"certificaterequests-issuer-ca",
}

// maxLogLevel caps --log-level: from 8 on client-go logs response bodies, which include the
// Secrets holding private keys.
const maxLogLevel = 6

// config is the command line.
type config struct {
	kubeconfig, namespace, clusterResourceNamespace, healthAddr string
	ownerRef                                                    bool
	workers, logLevel                                           int
}

func main() {
	cfg := parseFlags(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	// After the first signal a second one kills the process instead of waiting for shutdown.
	context.AfterFunc(ctx, stop)
	if err := run(ctx, cfg); err != nil {
		klog.ErrorS(err, "cert-manager-controller failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func parseFlags(args []string) config {
	var cfg config
	var version bool
	fs := flag.NewFlagSet("cert-manager-controller", flag.ExitOnError)
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses the in-cluster service account")
	fs.StringVar(&cfg.namespace, "namespace", "", "only watch this namespace (empty: all; the clusterissuers controller then does not run)")
	fs.StringVar(&cfg.clusterResourceNamespace, "cluster-resource-namespace", "cert-manager", "namespace of the Secrets that ClusterIssuers refer to")
	fs.BoolVar(&cfg.ownerRef, "enable-certificate-owner-ref", true, "make each Certificate the owner of its Secret, so the Secret is garbage-collected with it")
	fs.StringVar(&cfg.healthAddr, "health-addr", "127.0.0.1:9403", "address of /healthz and /readyz (ready once the informer caches have synced); empty disables it")
	fs.IntVar(&cfg.workers, "workers", 2, "workers per controller")
	fs.IntVar(&cfg.logLevel, "log-level", logf.InfoLevel, fmt.Sprintf("klog verbosity, 0-%d (2 info, 4 debug, 5 trace)", maxLogLevel))
	fs.BoolVar(&version, "version", false, "print the cert-manager version and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cert-manager-controller [flags]\n\nRuns cert-manager %s's controllers for self-signed and CA issuance:\n  %v\n\nFlags:\n", certManagerVersion(), Controllers)
		fs.PrintDefaults()
	}
	_ = fs.Parse(args) // ExitOnError
	if version {
		fmt.Printf("cert-manager-controller (cert-manager %s)\n", certManagerVersion())
		os.Exit(0)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments: %v\n", fs.Args())
		fs.Usage()
		os.Exit(2)
	}
	if cfg.workers < 1 || cfg.logLevel < 0 || cfg.logLevel > maxLogLevel {
		fmt.Fprintf(os.Stderr, "--workers must be at least 1 and --log-level within 0-%d\n", maxLogLevel)
		os.Exit(2)
	}
	return cfg
}

// certManagerVersion is the version of the cert-manager module linked in.
func certManagerVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/cert-manager/cert-manager" {
				return m.Version
			}
		}
	}
	return util.AppVersion
}

// setupLogging points klog (which cert-manager logs through) at stderr with the given verbosity.
func setupLogging(level int) error {
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	if err := fs.Set("v", strconv.Itoa(level)); err != nil {
		return err
	}
	klog.EnableContextualLogging(true)
	return nil
}

func run(ctx context.Context, cfg config) error {
	if err := setupLogging(cfg.logLevel); err != nil {
		return err
	}
	// The user agent ("cert-manager-<controller>/<version> ...") and events carry this.
	if util.AppVersion == "canary" {
		util.AppVersion = certManagerVersion()
	}
	log := logf.Log.WithName("cert-manager-controller")
	ctx, cancel := context.WithCancel(logf.NewContext(ctx, log))
	defer cancel()

	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         cfg.kubeconfig,
		KubernetesAPIQPS:   20, // cert-manager's defaults; unused when the server has API priority and fairness
		KubernetesAPIBurst: 50,
		Namespace:          cfg.namespace,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace: cfg.clusterResourceNamespace,
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			EnableOwnerRef:                           cfg.ownerRef,
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}

	// Construct every controller first: that registers the informers they need, which the
	// factories below then start.
	type named struct {
		name string
		ctrl controllerpkg.Interface
	}
	var ctrls []named
	known := controllerpkg.Known()
	for _, name := range Controllers {
		if cfg.namespace != "" && name == clusterIssuers {
			log.Info("not starting controller: scoped to one namespace", "controller", name)
			continue
		}
		newCtrl, ok := known[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered by the cert-manager library", name)
		}
		c, err := newCtrl(factory)
		if err != nil {
			return fmt.Errorf("constructing controller %q: %w", name, err)
		}
		ctrls = append(ctrls, named{name, c})
	}
	// The informer factories are shared by every Context the ContextFactory builds; this one is
	// only for reaching them.
	cmctx, err := factory.Build()
	if err != nil {
		return err
	}

	var ready atomic.Bool // /readyz: the informer caches have synced
	var srv *http.Server
	if cfg.healthAddr != "" {
		if srv, err = serveHealth(cfg.healthAddr, &ready); err != nil {
			return err
		}
		log.Info("serving /healthz and /readyz", "address", cfg.healthAddr)
	}

	errs := make(chan error, len(ctrls))
	var wg sync.WaitGroup
	for _, c := range ctrls {
		wg.Go(func() {
			log.Info("starting controller", "controller", c.name)
			if err := c.ctrl.Run(cfg.workers, ctx); err != nil {
				errs <- fmt.Errorf("controller %q: %w", c.name, err)
				cancel()
			}
		})
	}
	cmctx.KubeSharedInformerFactory.Start(ctx.Done())
	cmctx.SharedInformerFactory.Start(ctx.Done())
	cmctx.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	cmctx.GWShared.Start(ctx.Done())
	wg.Go(func() {
		if waitForSync(ctx, cmctx) {
			ready.Store(true)
			log.Info("informer caches synced", "controllers", len(ctrls))
		}
	})

	<-ctx.Done()
	log.Info("shutting down")
	ready.Store(false)
	wg.Wait()
	cmctx.KubeSharedInformerFactory.Shutdown()
	cmctx.SharedInformerFactory.Shutdown()
	cmctx.HTTP01ResourceMetadataInformersFactory.Shutdown()
	cmctx.GWShared.Shutdown()
	if srv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	}
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// waitForSync reports whether every informer the controllers use has synced.
func waitForSync(ctx context.Context, c *controllerpkg.Context) bool {
	ok := true
	for _, synced := range c.KubeSharedInformerFactory.WaitForCacheSync(ctx.Done()) {
		ok = ok && synced
	}
	for _, synced := range c.SharedInformerFactory.WaitForCacheSync(ctx.Done()) {
		ok = ok && synced
	}
	for _, synced := range c.HTTP01ResourceMetadataInformersFactory.WaitForCacheSync(ctx.Done()) {
		ok = ok && synced
	}
	for _, synced := range c.GWShared.WaitForCacheSync(ctx.Done()) {
		ok = ok && synced
	}
	return ok && ctx.Err() == nil
}

// serveHealth serves /healthz (the process is up) and /readyz (the caches have synced).
func serveHealth(addr string, ready *atomic.Bool) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health address: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "informer caches not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "health server stopped")
		}
	}()
	return srv, nil
}
