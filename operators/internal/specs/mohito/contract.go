package mohito

// How the operator runs the Mohito services (docs/services.md): mount points, ports and the
// variables only Mohito's roles read; the names the services share with the operator are in
// services/pkg/mohito/contract, what every system shares in package specs.
const (
	// Binary is the image's entrypoint (hack/images), used by exec probes.
	Binary = "/usr/local/bin/mohito"

	// ConfigDir is where the deployment ConfigMap is mounted.
	ConfigDir = "/etc/obscura"
	// KeysDir is where the party's key Secret is mounted; the key file is specs.KeyFile.
	KeysDir = "/etc/obscura/keys"
	// TokensDir and TokensFile: the gateway's user tokens.
	TokensDir  = "/etc/obscura/tokens"
	TokensFile = "tokens.json"
	// DevicesDir and DevicesFile: the vendor agent's device registry.
	DevicesDir  = "/etc/obscura/devices"
	DevicesFile = "devices.json"

	GatewayPort = 7443

	// ConfigHashAnnotation on a pod template carries the hash of what the pods read at start,
	// so a parameter change rolls them.
	ConfigHashAnnotation = "mohito.obscura.dev/config-hash"
)

// Environment variables only Mohito's roles read.
const (
	EnvDeployment  = "OBSCURA_DEPLOYMENT"
	EnvKeyFile     = "OBSCURA_KEY_FILE"
	EnvVendorIndex = "OBSCURA_VENDOR_INDEX"
	EnvPartition   = "OBSCURA_PARTITION"
	EnvTokensFile  = "OBSCURA_TOKENS_FILE"
	EnvDevicesFile = "OBSCURA_DEVICES_FILE"
	EnvMaxRounds   = "OBSCURA_MAX_ROUNDS"
)
