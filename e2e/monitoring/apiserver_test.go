package monitoring

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/services/testenv"
)

// The PodMonitors and PrometheusRules the chart renders are valid objects of the Prometheus
// operator's API: a real kube-apiserver with its CRDs (testdata/crds, v0.85.0) accepts each in a
// server-side dry run, its structural schemas checking every field.
func TestMonitoringObjectsAcceptedByAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver")
	}
	objs := render(t, "--api-versions", monitoringAPI, "--set-json", `monitoring.workloads.namespaces=["integrator"]`)
	crds, err := filepath.Abs("testdata/crds")
	if err != nil {
		t.Fatal(err)
	}
	api := testenv.StartAPIServerT(t, testenv.APIServerOptions{CRDDirs: []string{crds}})
	k8s := api.ClientT(t)
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "obscura-system"}}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range objs {
		if o.GetAPIVersion() != monitoringAPI {
			continue
		}
		n++
		if err := k8s.Create(ctx, o, client.DryRunAll); err != nil {
			t.Errorf("API server rejects %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if n < 4 {
		t.Fatalf("only %d monitoring.coreos.com objects rendered", n)
	}
}
