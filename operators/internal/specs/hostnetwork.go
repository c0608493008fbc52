package specs

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Host-network mode is for a node without a pod network (the local cluster of docs/cluster.md):
// every pod shares the node's network namespace and only 127.0.0.1 may be used. Several replicas
// of one role then share one port space, so the mode rewrites a pod the builders made:
//
//   - the metrics/health listeners bind 127.0.0.1:0 and the role writes the bound addresses to
//     EnvAddrFile; the probes are exec probes (`<binary> probe /readyz`) that read that file, so
//     the kubelet never dials the node's InternalIP. An exec probe costs a runc exec (≈ 40 ms of
//     node CPU in containerd-shim, runc and the probe), so they run sparsely (see execProbes);
//   - a fixed listener (the gateway's gRPC port, the PDA proxy's HTTPS port) binds 127.0.0.1 with
//     SO_REUSEPORT (EnvReusePort), so replicas and a rolling update's new pod share it;
//   - no container port is declared: on the host network every declared port becomes a host
//     port, and the scheduler would refuse a second replica on the node.
const (
	// EnvAddrFile names the file a role writes its bound health and metrics addresses to.
	EnvAddrFile = "OBSCURA_ADDR_FILE"
	// EnvReusePort makes a role's fixed listener use SO_REUSEPORT.
	EnvReusePort = "OBSCURA_REUSE_PORT"
	// RunDir is an emptyDir for files a role writes at run time (the root file system is read-only).
	RunDir = "/run/obscura"
)

// onHostNetwork adapts spec, built for a pod network, to host-network mode. binary is the
// container's entrypoint, whose `probe` subcommand checks the role's health endpoint.
func onHostNetwork(spec *corev1.PodSpec, binary string) {
	dynamic, fixed := []string{EnvMetricsAddr, EnvHealthAddr}, []string{EnvListen}
	spec.HostNetwork = true
	spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.Ports = nil
		reuse := false
		for j := range c.Env {
			e := &c.Env[j]
			switch {
			case slices.Contains(dynamic, e.Name):
				e.Value = "127.0.0.1:0"
			case slices.Contains(fixed, e.Name) && strings.HasPrefix(e.Value, ":"):
				e.Value = "127.0.0.1" + e.Value
				reuse = true
			}
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: EnvAddrFile, Value: RunDir + "/addr"})
		if reuse {
			c.Env = append(c.Env, corev1.EnvVar{Name: EnvReusePort, Value: "true"})
		}
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "run", MountPath: RunDir})
		c.StartupProbe, c.LivenessProbe, c.ReadinessProbe = execProbes(binary)
	}
}

// execProbes returns the startup, liveness and readiness probes of a host-network container: each
// runs `binary probe <path>` (which reads EnvAddrFile). Every exec is a runc exec; with a 5 s
// period on both probes, 20 pods cost a node ≈ 0.8 of a core (measured on the local cluster's
// 2-core node during the load phases, 197 new tasks/s), which is the capacity the autoscaler is
// meant to measure. So the startup probe polls quickly until the role serves /healthz (the kubelet
// then runs the first readiness probe at once), and afterwards readiness is checked every 10 s
// and liveness every 30 s: 0.13 execs/s per container instead of 0.4.
func execProbes(binary string) (startup, liveness, readiness *corev1.Probe) {
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{binary, "probe", path}}},
			PeriodSeconds: period, TimeoutSeconds: 3, FailureThreshold: failures,
		}
	}
	return probe("/healthz", 2, 150), probe("/healthz", 30, 3), probe("/readyz", 10, 3)
}
