package manifests

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func findObject(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// TestNATSStoreSizedFromMaxFile (issue 19 item 6): without persistence, the JetStream store's
// emptyDir is limited to nats.jetstream.maxFile (a NATS size: binary units) and the nats
// container requests that much ephemeral storage, limited to 5/4 of it; the StatefulSet's
// serviceName is a headless Service selecting its pods, and the pod mounts no token. With
// persistence: a PVC and a small request for /tmp and the logs.
func TestNATSStoreSizedFromMaxFile(t *testing.T) {
	for _, c := range []struct {
		name, maxFile         string
		persistent            bool
		sizeLimit, req, limit string
	}{
		{name: "default", maxFile: "2G", sizeLimit: "2Gi", req: "2Gi", limit: "2560Mi"},
		{name: "512MB", maxFile: "512MB", sizeLimit: "512Mi", req: "512Mi", limit: "640Mi"},
		{name: "persistent", maxFile: "2G", persistent: true, req: "32Mi", limit: "64Mi"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"--set", "nats.jetstream.maxFile=" + c.maxFile}
			if c.persistent {
				args = append(args, "--set", "nats.jetstream.persistence.enabled=true")
			}
			_, objs := renderChart(t, chartCase{namespace: chartNamespace, args: args})
			u := findObject(objs, "StatefulSet", "obscura-nats")
			if u == nil {
				t.Fatal("StatefulSet/obscura-nats not rendered")
			}
			var sts appsv1.StatefulSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &sts); err != nil {
				t.Fatal(err)
			}
			spec := sts.Spec.Template.Spec
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Error("the NATS pod mounts a service-account token it never uses")
			}
			var data *corev1.Volume
			for i := range spec.Volumes {
				if spec.Volumes[i].Name == "data" {
					data = &spec.Volumes[i]
				}
			}
			switch {
			case c.persistent && (data != nil || len(sts.Spec.VolumeClaimTemplates) != 1):
				t.Errorf("persistence: data volume %v, %d claim templates; want a PVC", data, len(sts.Spec.VolumeClaimTemplates))
			case !c.persistent && (data == nil || data.EmptyDir == nil || data.EmptyDir.SizeLimit == nil ||
				!data.EmptyDir.SizeLimit.Equal(resource.MustParse(c.sizeLimit))):
				t.Errorf("data volume %+v, want an emptyDir of %s", data, c.sizeLimit)
			}
			checkEphemeral(t, "nats", spec.Containers[0].Resources, c.req, c.limit)
			svc := findObject(objs, "Service", sts.Spec.ServiceName)
			if svc == nil {
				t.Fatalf("serviceName %q: no such Service", sts.Spec.ServiceName)
			}
			if ip, _, _ := unstructured.NestedString(svc.Object, "spec", "clusterIP"); ip != "None" {
				t.Errorf("Service/%s clusterIP %q, want a headless Service", svc.GetName(), ip)
			}
			sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
			for k, v := range sel {
				if sts.Spec.Template.Labels[k] != v {
					t.Errorf("Service/%s selects %s=%s, which the NATS pods do not carry", svc.GetName(), k, v)
				}
			}
		})
	}
}

// TestEdgeDisruptionBudget: with more than one replica (the default, 2) the edge has a
// PodDisruptionBudget keeping one serving and a preferred anti-affinity by node; the local
// cluster's single host-network replica has neither (a budget would block every drain).
func TestEdgeDisruptionBudget(t *testing.T) {
	_, objs := renderChart(t, chartCase{namespace: chartNamespace})
	pdb := findObject(objs, "PodDisruptionBudget", "obscura-edge")
	if pdb == nil {
		t.Fatal("no PodDisruptionBudget for the edge by default")
	}
	if v, _, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "minAvailable"); fmt.Sprint(v) != "1" {
		t.Errorf("edge PodDisruptionBudget minAvailable %v, want 1", v)
	}
	sel, _, _ := unstructured.NestedStringMap(pdb.Object, "spec", "selector", "matchLabels")
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(findObject(objs, "Deployment", "obscura-edge").Object, &d); err != nil {
		t.Fatal(err)
	}
	for k, v := range sel {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the budget selects %s=%s, which the edge pods do not carry", k, v)
		}
	}
	if *d.Spec.Replicas < 2 || d.Spec.Template.Spec.Affinity == nil || d.Spec.Template.Spec.Affinity.PodAntiAffinity == nil {
		t.Errorf("edge: %d replicas, affinity %v; want 2 spread by node", *d.Spec.Replicas, d.Spec.Template.Spec.Affinity)
	}
	_, local := renderChart(t, chartCase{namespace: chartNamespace, args: []string{"-f", "charts/obscura/values-local.yaml"}})
	if findObject(local, "PodDisruptionBudget", "obscura-edge") != nil {
		t.Error("values-local.yaml (one host-network replica) renders an edge PodDisruptionBudget")
	}
}
