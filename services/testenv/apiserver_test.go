package testenv

import (
	"context"
	"net/url"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestAPIServer(t *testing.T) {
	t.Parallel()
	checkAPIServer(t, sharedAPIServer(t))
}

func checkAPIServer(t *testing.T, api *APIServer) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	u, err := url.Parse(api.Config.Host)
	if err != nil || u.Scheme != "https" || u.Hostname() != Host {
		t.Fatalf("Config.Host = %q; want https://%s:<port>", api.Config.Host, Host)
	}
	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("version", func(t *testing.T) {
		v, err := cs.Discovery().ServerVersion()
		if err != nil || v.GitVersion != "v1.37.0" {
			t.Fatalf("/version = %+v, %v; want gitVersion v1.37.0", v, err)
		}
	})

	t.Run("namespace round trip", func(t *testing.T) {
		c, err := api.Client(clientgoscheme.Scheme)
		if err != nil {
			t.Fatal(err)
		}
		// The API server is shared: generated names keep runs (-count=N) apart.
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			GenerateName: "vendor-acme-", Labels: map[string]string{"obscura.dev/trust-domain": "vendor-acme"},
		}}
		if err := c.Create(ctx, ns); err != nil {
			t.Fatalf("create namespace: %v", err)
		}
		var got corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: ns.Name}, &got); err != nil {
			t.Fatalf("get namespace: %v", err)
		}
		if got.UID == "" || got.UID != ns.UID || got.Labels["obscura.dev/trust-domain"] != "vendor-acme" {
			t.Fatalf("namespace read back = uid %q labels %v; want uid %q with the trust-domain label",
				got.UID, got.Labels, ns.UID)
		}
	})

	t.Run("mohito CRDs discoverable", func(t *testing.T) {
		if len(api.CRDs) == 0 {
			t.Skip("<root>/crds holds no CRDs yet")
		}
		groups, err := cs.Discovery().ServerGroups()
		if err != nil {
			t.Fatal(err)
		}
		found := slices.ContainsFunc(groups.Groups, func(g metav1.APIGroup) bool { return g.Name == "mohito.obscura.dev" })
		if !found {
			t.Fatalf("group mohito.obscura.dev not served; installed CRDs: %d", len(api.CRDs))
		}
		resources, err := cs.Discovery().ServerResourcesForGroupVersion("mohito.obscura.dev/v1alpha1")
		if err != nil || len(resources.APIResources) == 0 {
			t.Fatalf("resources of mohito.obscura.dev/v1alpha1 = %v, %v; want at least one", resources, err)
		}
	})
}
