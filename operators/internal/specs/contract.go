package specs

import "strings"

// How the operator runs every system's services (docs/services.md, services/pkg/daemon): the
// flags' environment names, the mounted NATS password, the ports, the labels.
const (
	// KeyFile is the default Secret key (and file name) of a party's private key.
	KeyFile = "private.key"
	// NATSDir is where the party's NATS password is mounted, as the file "password".
	NATSDir = "/etc/obscura/nats"

	// MetricsPort serves /metrics and HealthPort /healthz and /readyz in every role.
	MetricsPort = 9090
	HealthPort  = 8081

	// Labels on every object the operator creates.
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelPartOf    = "app.kubernetes.io/part-of"
	ManagedBy      = "obscura-operator"
)

// EnvPrefix starts every flag's environment fallback, in every system's binaries.
const EnvPrefix = "OBSCURA_"

// Env is the environment variable a role reads for flag --name: OBSCURA_ and the name in
// upper case with dashes as underscores (--nats-url: OBSCURA_NATS_URL).
func Env(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Environment variables every role reads (Env of the daemon's common flags, and the rest of
// what the shared pod builder sets).
const (
	EnvNATSURL            = "OBSCURA_NATS_URL"
	EnvNATSUser           = "OBSCURA_NATS_USER"
	EnvNATSPasswordFile   = "OBSCURA_NATS_PASSWORD_FILE"
	EnvNATSReplicas       = "OBSCURA_NATS_REPLICAS"
	EnvMetricsAddr        = "OBSCURA_METRICS_ADDR"
	EnvHealthAddr         = "OBSCURA_HEALTH_ADDR"
	EnvRedisAddr          = "OBSCURA_REDIS_ADDR"
	EnvListen             = "OBSCURA_LISTEN"
	EnvKeyActivationDelay = "OBSCURA_KEY_ACTIVATION_DELAY"
	EnvPodName            = "POD_NAME"
	EnvVaultAddr          = "OBSCURA_VAULT_ADDR"
	EnvVaultRole          = "OBSCURA_VAULT_ROLE"
	EnvVaultMount         = "OBSCURA_VAULT_MOUNT"
	EnvVaultPath          = "OBSCURA_VAULT_PATH"
	EnvVaultField         = "OBSCURA_VAULT_FIELD"
)

// Labels are the labels every object of a system's instance carries.
func Labels(system, instance, component string) map[string]string {
	return map[string]string{
		LabelName: system, LabelInstance: instance, LabelComponent: component,
		LabelManagedBy: ManagedBy, LabelPartOf: "obscura",
	}
}

// Selector is the subset of labels that identifies a workload's pods; it never changes, so
// Deployments and StatefulSets keep their (immutable) selectors across upgrades.
func Selector(labels map[string]string) map[string]string {
	return map[string]string{LabelName: labels[LabelName], LabelInstance: labels[LabelInstance], LabelComponent: labels[LabelComponent]}
}
