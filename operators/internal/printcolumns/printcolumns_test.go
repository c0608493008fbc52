package printcolumns

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mohitov1 "github.com/obscura-iot/obscura/operators/api/mohito/v1alpha1"
	pdav1 "github.com/obscura-iot/obscura/operators/api/pda/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/scheme"
	"github.com/obscura-iot/obscura/services/testenv"
)

// sample decodes config/samples/<file> into obj, in namespace ns.
func sample(t *testing.T, file, ns string, obj client.Object) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := utilyaml.NewYAMLOrJSONDecoder(f, 4096).Decode(obj); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	obj.SetNamespace(ns)
}

// row reads obj as `kubectl get` does — the API server's Table rendering of the CRD's printer
// columns — and returns every column (priority 0 and, after them, the -o wide ones with
// priority 1) by name with obj's cell.
func row(t *testing.T, cfg *rest.Config, resourcePath string) (names, wide []string, cells map[string]any) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+resourcePath, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var tab metav1.Table
	if err := json.Unmarshal(body, &tab); err != nil || len(tab.Rows) != 1 {
		t.Fatalf("GET %s as Table: %s (%v)", resourcePath, body, err)
	}
	cells = map[string]any{}
	for i, c := range tab.ColumnDefinitions {
		if c.Priority == 0 {
			names = append(names, c.Name)
		} else {
			wide = append(wide, c.Name)
		}
		cells[c.Name] = tab.Rows[0].Cells[i]
	}
	return names, wide, cells
}

func ready(reason string) []metav1.Condition {
	return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: reason, Message: "test", LastTransitionTime: metav1.Now()}}
}

// TestPrinterColumnsRender (issue 19 item 4): on a real kube-apiserver with the generated CRDs,
// `kubectl get rounds,vendors,shufflers,aggregationjobs` (and -o wide) show the figures an
// operator looks at first: for a Round its round, last round time beside the period, workers,
// and in -o wide encoders, completed, aborted and burst rounds; a Vendor's devices and
// shufflers (served and shuffler duty wide); a Shuffler's weight, rounds shuffled and last
// result; an AggregationJob's phase, window, submissions and revealed keys. Each column is
// checked by name and by the cell of an object whose status was written through the status
// subresource.
func TestPrinterColumnsRender(t *testing.T) {
	api, err := testenv.StartAPIServer(testenv.APIServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := api.Stop(); err != nil {
			t.Error(err)
		}
	}()
	k8s, err := api.Client(scheme.New())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "columns"
	create := func(obj client.Object, setStatus func()) {
		t.Helper()
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatalf("create %T: %v", obj, err)
		}
		setStatus()
		if err := k8s.Status().Update(ctx, obj); err != nil {
			t.Fatalf("status of %T: %v", obj, err)
		}
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	rd := &mohitov1.Round{}
	sample(t, "mohito_v1alpha1_round.yaml", ns, rd)
	create(rd, func() {
		rd.Status.CurrentRound = ptr.To[int64](42)
		rd.Status.LastRoundSeconds = ptr.To(resource.MustParse("1.250")) // as the operator writes it
		rd.Status.LastRoundWork = &metav1.Duration{Duration: 125 * time.Millisecond}
		rd.Status.WorkerReplicas = 3
		rd.Status.CompletedRounds, rd.Status.AbortedRounds, rd.Status.Bursts = 40, 1, 2
		rd.Status.Conditions = ready("Running")
	})
	v := &mohitov1.Vendor{}
	sample(t, "mohito_v1alpha1_vendor.yaml", ns, v)
	create(v, func() {
		v.Status.Shufflers, v.Status.RoundsServed, v.Status.ShufflerDuty = 2, 40, 13
		v.Status.Conditions = ready("Running")
	})
	s := &mohitov1.Shuffler{}
	sample(t, "mohito_v1alpha1_shuffler.yaml", ns, s)
	create(s, func() {
		s.Status.EffectiveWeight, s.Status.RoundsShuffled = 1, 13
		s.Status.LastRound, s.Status.LastResult = ptr.To[int64](41), "Completed"
		s.Status.Conditions = ready("Running")
	})
	aj := &pdav1.AggregationJob{}
	sample(t, "pda_v1alpha1_aggregationjob.yaml", ns, aj)
	create(aj, func() {
		aj.Status.Phase = pdav1.Phase("Collecting")
		aj.Status.Window = ptr.To[int64](7)
		aj.Status.Submissions, aj.Status.RevealedKeys = 1200, 35
		aj.Status.WindowEnd = &metav1.Time{Time: metav1.Now().Add(3600e9)}
		aj.Status.Conditions = ready("Collecting")
	})

	for _, c := range []struct {
		path        string
		names, wide []string
		cells       map[string]any
	}{
		{
			path:  "/apis/mohito.obscura.dev/v1alpha1/namespaces/" + ns + "/rounds/" + rd.Name,
			names: []string{"Name", "Period", "Q", "Vendors", "Shufflers", "Round", "Last(s)", "Workers", "Ready", "Age"},
			wide:  []string{"Work", "Encoders", "Deadline", "Capacity%", "Completed", "Aborted", "Bursts", "Reason"},
			cells: map[string]any{"Round": 42.0, "Last(s)": "1.250", "Work": "125ms", "Period": "2s", "Workers": 3.0, "Completed": 40.0, "Aborted": 1.0, "Bursts": 2.0, "Ready": "True"},
		},
		{
			path:  "/apis/mohito.obscura.dev/v1alpha1/namespaces/" + ns + "/vendors/" + v.Name,
			names: []string{"Name", "Index", "Devices", "K_v", "Shufflers", "Ready", "Age"},
			wide:  []string{"Served", "Duty", "Reason"},
			cells: map[string]any{"Shufflers": 2.0, "Served": 40.0, "Duty": 13.0, "Ready": "True"},
		},
		{
			path:  "/apis/mohito.obscura.dev/v1alpha1/namespaces/" + ns + "/shufflers/" + s.Name,
			names: []string{"Name", "Vendor", "Replicas", "Weight", "Shuffled", "Result", "Ready", "Age"},
			wide:  []string{"Last", "Reason"},
			cells: map[string]any{"Vendor": "acme", "Weight": 1.0, "Shuffled": 13.0, "Last": 41.0, "Result": "Completed"},
		},
		{
			path:  "/apis/pda.obscura.dev/v1alpha1/namespaces/" + ns + "/aggregationjobs/" + aj.Name,
			names: []string{"Name", "Key", "Tau", "Shards", "Phase", "Window", "Submissions", "Revealed", "Ready", "Age"},
			wide:  []string{"Window end", "Reason"},
			cells: map[string]any{"Phase": "Collecting", "Window": 7.0, "Submissions": 1200.0, "Revealed": 35.0, "Ready": "True"},
		},
	} {
		names, wide, cells := row(t, api.Config, c.path)
		if !slices.Equal(names, c.names) {
			t.Errorf("%s: columns %v, want %v", c.path, names, c.names)
		}
		if !slices.Equal(wide, c.wide) {
			t.Errorf("%s: -o wide columns %v, want %v", c.path, wide, c.wide)
		}
		for name, want := range c.cells {
			if got := cells[name]; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: column %s = %v (%T), want %v", c.path, name, got, got, want)
			}
		}
	}
}
