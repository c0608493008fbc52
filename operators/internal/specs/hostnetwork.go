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
//     the kubelet never dials the node's InternalIP;
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
		c.LivenessProbe = execProbe(binary, "/healthz")
		c.ReadinessProbe = execProbe(binary, "/readyz")
	}
}

// execProbe runs `binary probe path` in the container (it reads EnvAddrFile).
func execProbe(binary, path string) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{binary, "probe", path}}},
		PeriodSeconds: 5, TimeoutSeconds: 3, FailureThreshold: 3,
	}
}
