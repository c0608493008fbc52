package specs_test

import (
	"testing"

	"github.com/obscura-iot/obscura/operators/internal/specs"
)

// TestEnvNamesFollowTheRule: every variable the shared pod builder sets for a flag is that
// flag's OBSCURA_<FLAG> (services/pkg/daemon), so no system keeps a prefix of its own.
func TestEnvNamesFollowTheRule(t *testing.T) {
	for flag, env := range map[string]string{
		"nats-url": specs.EnvNATSURL, "nats-user": specs.EnvNATSUser, "nats-password-file": specs.EnvNATSPasswordFile, "nats-replicas": specs.EnvNATSReplicas,
		"metrics-addr": specs.EnvMetricsAddr, "health-addr": specs.EnvHealthAddr, "redis-addr": specs.EnvRedisAddr,
		"listen": specs.EnvListen, "key-activation-delay": specs.EnvKeyActivationDelay, "addr-file": specs.EnvAddrFile,
		"reuse-port": specs.EnvReusePort, "vault-addr": specs.EnvVaultAddr, "vault-role": specs.EnvVaultRole,
		"vault-mount": specs.EnvVaultMount, "vault-path": specs.EnvVaultPath, "vault-field": specs.EnvVaultField,
	} {
		if got := specs.Env(flag); got != env {
			t.Errorf("--%s: %s, want %s", flag, env, got)
		}
	}
}
