// Package podsd is the file-based service discovery for Obscura on the host network (finding H-1,
// docs/metrics.md "Scraping"): it turns the pods on one node into a Prometheus file_sd targets
// file.
//
// With platform.hostNetwork every operator-run role listens for /metrics on 127.0.0.1:0 and
// writes the bound address to its address file (OBSCURA_ADDR_FILE, a "run" emptyDir;
// operators/internal/specs/hostnetwork.go). Fixed per-role ports cannot replace that: replicas of
// one role (gateways, decrypt workers, encoder shards) share the node's port space and one pod
// template, so the operator cannot give each replica its own port, and one port shared with
// SO_REUSEPORT would answer a scrape from a random replica. The address is therefore found where
// the role published it: in the pod's emptyDir under the kubelet's root directory, which a
// process on the node can read. The pods' labels come from the API server. A pod the chart runs
// on a fixed port (operator, NATS reloader, Envoy edge) is found by its prometheus.io/*
// annotations instead.
//
// A Prometheus scraping these targets must run on the node too (every listener is on the node's
// 127.0.0.1); it reads the file with file_sd_configs, re-read on every change.
package podsd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// Group is one file_sd entry: its targets and the labels Prometheus attaches to their series.
type Group struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// The labels the chart's PodMonitors add (charts/obscura/templates/monitoring.yaml), so the
// alerts and dashboards group the same way with either discovery.
const (
	LabelSystem   = "obscura_system"
	LabelRole     = "obscura_role"
	LabelInstance = "obscura_instance"
)

// Targets lists the running pods of node (every node when "") in namespaces (every namespace when
// empty) and returns one group per scrapeable pod: an operator-run pod
// (app.kubernetes.io/managed-by=obscura-operator) at the metrics address in its address file under
// kubeletRoot, a pod with prometheus.io/scrape=true at 127.0.0.1:<prometheus.io/port>. A pod whose
// address file is not (yet) written is left out: the next call finds it.
func Targets(ctx context.Context, k client.Reader, kubeletRoot, node string, namespaces ...string) ([]Group, error) {
	var pods []corev1.Pod
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	for _, ns := range namespaces {
		var l corev1.PodList
		if err := k.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		pods = append(pods, l.Items...)
	}
	var out []Group
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || (node != "" && p.Spec.NodeName != node) {
			continue
		}
		g := Group{Labels: map[string]string{
			"namespace": p.Namespace,
			"pod":       p.Name,
			LabelRole:   p.Labels["app.kubernetes.io/component"],
		}}
		switch {
		case p.Labels["app.kubernetes.io/managed-by"] == "obscura-operator":
			addr, err := telemetry.ReadAddr(filepath.Join(kubeletRoot, "pods", string(p.UID), "volumes/kubernetes.io~empty-dir/run/addr"), telemetry.AddrMetrics)
			if errors.Is(err, telemetry.ErrNoAddr) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
			}
			g.Targets = []string{addr}
			g.Labels[LabelSystem] = p.Labels["app.kubernetes.io/name"]
			g.Labels[LabelInstance] = p.Labels["app.kubernetes.io/instance"]
			g.Labels["__metrics_path__"] = "/metrics"
		case p.Annotations["prometheus.io/scrape"] == "true" && p.Annotations["prometheus.io/port"] != "":
			g.Targets = []string{"127.0.0.1:" + p.Annotations["prometheus.io/port"]}
			g.Labels[LabelSystem] = p.Labels["app.kubernetes.io/component"]
			g.Labels[LabelInstance] = p.Labels["app.kubernetes.io/instance"]
			if path := p.Annotations["prometheus.io/path"]; path != "" {
				g.Labels["__metrics_path__"] = path
			}
		default:
			continue
		}
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b Group) int {
		return strings.Compare(a.Labels["namespace"]+"/"+a.Labels["pod"], b.Labels["namespace"]+"/"+b.Labels["pod"])
	})
	return out, nil
}

// Write replaces the targets file at path atomically (a temporary file renamed over it), so
// Prometheus never reads half a file.
func Write(path string, groups []Group) error {
	if groups == nil {
		groups = []Group{}
	}
	b, err := json.MarshalIndent(groups, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
