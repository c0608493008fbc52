package manifests

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestChartSpreadsOverNodes (issue 20 item 3): how the chart places its pods over nodes.
// NATS nodes of a cluster on a pod network carry a hostname anti-affinity — preferred by
// default, required with nats.cluster.antiAffinity=required (values-nodes.yaml: one NATS node per
// Kubernetes node) — and none on the node's network or with a single server; the operator passes
// operator.topologySpread as --topology-spread (ScheduleAnyway by default, which never leaves a
// pod pending on one node).
func TestChartSpreadsOverNodes(t *testing.T) {
	for _, c := range []struct {
		name                string
		args                []string
		required, preferred bool
		spread              string
	}{
		{name: "defaults (one NATS server)", spread: "ScheduleAnyway"},
		{name: "nats cluster", args: []string{"--set", "nats.cluster.replicas=3", "--set", "nats.jetstream.replicas=3"}, preferred: true, spread: "ScheduleAnyway"},
		{name: "values-nodes", args: []string{"-f", "charts/obscura/values-nodes.yaml"}, required: true, spread: "ScheduleAnyway"},
		{name: "values-nodes, spread required", args: []string{"-f", "charts/obscura/values-nodes.yaml", "--set", "operator.topologySpread=DoNotSchedule"}, required: true, spread: "DoNotSchedule"},
		{name: "values-local with a nats cluster", args: []string{"-f", "charts/obscura/values-local.yaml", "--set", "nats.cluster.replicas=3", "--set", "nats.jetstream.replicas=3"}, spread: "ScheduleAnyway"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, objs := renderChart(t, chartCase{namespace: chartNamespace, args: c.args})
			var sts appsv1.StatefulSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(findObject(objs, "StatefulSet", "obscura-nats").Object, &sts); err != nil {
				t.Fatal(err)
			}
			var req []corev1.PodAffinityTerm
			var pref []corev1.WeightedPodAffinityTerm
			if a := sts.Spec.Template.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
				req, pref = a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
			}
			if (len(req) > 0) != c.required || (len(pref) > 0) != c.preferred {
				t.Errorf("NATS anti-affinity required %v preferred %v; want required %v preferred %v", req, pref, c.required, c.preferred)
			}
			terms := append([]corev1.PodAffinityTerm{}, req...)
			for _, w := range pref {
				terms = append(terms, w.PodAffinityTerm)
			}
			for _, term := range terms {
				if term.TopologyKey != corev1.LabelHostname || term.LabelSelector == nil ||
					term.LabelSelector.MatchLabels["app.kubernetes.io/component"] != "nats" {
					t.Errorf("NATS anti-affinity term %+v: want by hostname over the NATS pods", term)
				}
			}
			var op appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(findObject(objs, "Deployment", "obscura-operator").Object, &op); err != nil {
				t.Fatal(err)
			}
			if args := op.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--topology-spread="+c.spread) {
				t.Errorf("operator args %v: want --topology-spread=%s", args, c.spread)
			}
		})
	}
}
