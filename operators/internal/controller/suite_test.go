package controller

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/obscura-iot/obscura/operators/api/common"
	"github.com/obscura-iot/obscura/operators/internal/loisstatus"
	"github.com/obscura-iot/obscura/operators/internal/mohitostatus"
	"github.com/obscura-iot/obscura/operators/internal/pdastatus"
	"github.com/obscura-iot/obscura/operators/internal/ppsstatus"
	"github.com/obscura-iot/obscura/operators/internal/scheme"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/services/testenv"
)

// One real kube-apiserver + etcd and one manager running the production wiring (SetupAll)
// serve every test of this package; each test works in its own namespace.
var k8s client.Client

// natsServer is a real embedded NATS JetStream server: the reconcilers read the services'
// figures from its KV and the workers' backlog from its consumer, as in production.
var natsServer *testenv.NATS

// testRuntime makes the reconcilers run workloads (with an image per system). envtest runs no
// kube-controller-manager, so no pod ever starts: tests play its part with markAvailable.
// The operator's default spread (--topology-spread ScheduleAnyway): the API server takes every
// scalable stage's constraint.
var testRuntime = specs.Runtime{ImagePullPolicy: corev1.PullNever, NATSURL: "nats://127.0.0.1:4222", TopologySpread: corev1.ScheduleAnyway}

// pdaServices is the AggregationJob reconciler's connection to the PDA services' KV on
// natsServer (one account for both domains here).
var pdaServices *pdastatus.Client

// apiConfig reaches the suite's API server (requests the typed client cannot make: tables).
var apiConfig *rest.Config

// brokerMetrics plays the PPS broker pods' metrics listener on 127.0.0.1: the SecurePipeline
// reconciler scrapes it as it would a broker pod (tests create the pod objects with that IP).
var brokerMetrics *fakeBroker

// testAccountsSecret is where the suite's operator renders the NATS accounts, with its own
// user testOperatorUsers.
var (
	testAccountsSecret = client.ObjectKey{Namespace: "obscura-system", Name: "nats-accounts"}
	testOperatorUsers  = []specs.NATSUser{{Account: "INTEGRATOR", Name: "operator", Password: "operator-password", Source: "flag --nats-user"}}
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	api, err := testenv.StartAPIServer(testenv.APIServerOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start API server:", err)
		return 1
	}
	defer func() {
		if err := api.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop API server:", err)
		}
	}()
	natsDir, err := os.MkdirTemp("", "operator-nats-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(natsDir)
	if natsServer, err = testenv.StartNATSServer(natsDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer natsServer.Stop()
	services, err := mohitostatus.Connect(mohitostatus.Config{URL: natsServer.URL()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer services.Close()
	if pdaServices, err = pdastatus.Connect(pdastatus.Config{URL: natsServer.URL()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pdaServices.Close()
	apiConfig = api.Config
	if brokerMetrics, err = startFakeBroker(); err != nil {
		fmt.Fprintln(os.Stderr, "start the fake broker metrics:", err)
		return 1
	}
	defer brokerMetrics.Close()
	if k8s, err = api.Client(scheme.New()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testAccountsSecret.Namespace}}); err != nil {
		fmt.Fprintln(os.Stderr, "create the operator's namespace:", err)
		return 1
	}
	operatorConfig, err := asOperator(context.Background(), api.Config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "the operator's service account:", err)
		return 1
	}
	mgr, err := ctrl.NewManager(operatorConfig, ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "create manager:", err)
		return 1
	}
	if err := SetupAll(mgr, Options{Runtime: testRuntime,
		Mohito:       MohitoOptions{Image: "obscura/mohito:test", IntegratorRedis: "127.0.0.1:6379", Services: services},
		PDA:          PDAOptions{Image: "obscura/pda:test", Services: pdaServices},
		PPS:          PPSOptions{Image: "obscura/pps:test", Services: ppsstatus.Metrics{}, MetricsPort: brokerMetrics.Port()},
		LOIS:         LOISOptions{Image: "obscura/lois:test", Services: loisstatus.Metrics{}, RecordKeyStageDelay: testRecordKeyStageDelay, RecordKeyRetention: testRecordKeyRetention},
		SDDR:         SDDROptions{Image: "obscura/sddr:test"},
		NATSAccounts: NATSAccountsOptions{Secret: testAccountsSecret, OperatorUsers: testOperatorUsers}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		return 1
	}
	return code
}

// zapLevel keeps the manager quiet unless OBSCURA_TEST_VERBOSE is set.
func zapLevel() zapcore.Level {
	if os.Getenv("OBSCURA_TEST_VERBOSE") != "" {
		return -1
	}
	return 2
}

// namespace creates a fresh namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	create(t, ns)
	return ns.Name
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// keySecret creates a Secret holding an n-byte private key under "private.key".
func keySecret(t *testing.T, ns, name string, n int) *corev1.Secret {
	t.Helper()
	key := make([]byte, n)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"private.key": key}}
	create(t, s)
	return s
}

// eventually waits for f to return nil. The deadline is generous: the machines are shared and
// slow; it bounds a hang, it does not measure speed.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, 45*time.Second, what, f)
}

// waitReady waits until obj's Ready condition has the given status and reason, for the
// object's current generation, and Degraded is its opposite.
func waitReady(t *testing.T, obj client.Object, conds func() []metav1.Condition, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%T %s Ready=%s/%s", obj, obj.GetName(), status, reason), func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		c := meta.FindStatusCondition(conds(), common.ConditionReady)
		if c == nil {
			return fmt.Errorf("no Ready condition yet")
		}
		if c.Status != status || c.Reason != reason || c.ObservedGeneration != obj.GetGeneration() {
			return fmt.Errorf("Ready=%s reason %s gen %d (object gen %d): %s", c.Status, c.Reason, c.ObservedGeneration, obj.GetGeneration(), c.Message)
		}
		d := meta.FindStatusCondition(conds(), common.ConditionDegraded)
		wantDegraded := metav1.ConditionTrue
		if status == metav1.ConditionTrue {
			wantDegraded = metav1.ConditionFalse
		}
		if d == nil || d.Status != wantDegraded {
			return fmt.Errorf("Degraded condition %v, want status %s", d, wantDegraded)
		}
		return nil
	})
}

// waitEvent waits for an Event about obj with the given reason and type.
func waitEvent(t *testing.T, obj client.Object, eventType, reason string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s event %s for %s", eventType, reason, obj.GetName()), func() error {
		var list eventsv1.EventList
		if err := k8s.List(context.Background(), &list, client.InNamespace(obj.GetNamespace())); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == obj.GetName() && e.Reason == reason && e.Type == eventType {
				return nil
			}
		}
		return fmt.Errorf("not among %d events", len(list.Items))
	})
}

// markAvailable plays the Deployment and StatefulSet controllers: it reports every workload in
// ns as rolled out and available, as they would once the pods run.
func markAvailable(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	var ds appsv1.DeploymentList
	if err := k8s.List(ctx, &ds, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range ds.Items {
		d := &ds.Items[i]
		n := *d.Spec.Replicas
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
		if err := k8s.Status().Update(ctx, d); err != nil {
			t.Fatalf("mark %s available: %v", d.Name, err)
		}
	}
	var ss appsv1.StatefulSetList
	if err := k8s.List(ctx, &ss, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range ss.Items {
		s := &ss.Items[i]
		n := *s.Spec.Replicas
		s.Status = appsv1.StatefulSetStatus{ObservedGeneration: s.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n, CurrentReplicas: n}
		if err := k8s.Status().Update(ctx, s); err != nil {
			t.Fatalf("mark %s available: %v", s.Name, err)
		}
	}
}

// waitRollingOut waits until obj reports its workloads rolling out: not Ready, not Degraded,
// Progressing.
func waitRollingOut(t *testing.T, obj client.Object, conds func() []metav1.Condition) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s rolling out", obj.GetName()), func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		p := meta.FindStatusCondition(conds(), common.ConditionProgressing)
		d := meta.FindStatusCondition(conds(), common.ConditionDegraded)
		if p == nil || p.Status != metav1.ConditionTrue || d == nil || d.Status != metav1.ConditionFalse || p.ObservedGeneration != obj.GetGeneration() {
			return fmt.Errorf("Progressing %v, Degraded %v", p, d)
		}
		return nil
	})
}
