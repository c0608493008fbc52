package specs

// How the operator runs the services (docs/services.md): mount points, ports, labels; the
// names the services share with it are in the systems' contract packages.
const (
	// ConfigDir is where the deployment ConfigMap is mounted.
	ConfigDir = "/etc/obscura"
	// KeysDir is where the party's key Secret is mounted; the key file is private.key.
	KeysDir = "/etc/obscura/keys"
	// KeyFile is the Secret key (and file name) of a party's X25519 private key.
	KeyFile = "private.key"
	// NATSDir is where the party's NATS password is mounted.
	NATSDir = "/etc/obscura/nats"
	// TokensDir and TokensFile: the gateway's user tokens.
	TokensDir  = "/etc/obscura/tokens"
	TokensFile = "tokens.json"
	// DevicesDir and DevicesFile: the vendor agent's device registry.
	DevicesDir  = "/etc/obscura/devices"
	DevicesFile = "devices.json"

	MetricsPort = 9090
	HealthPort  = 8081
	GatewayPort = 7443

	// Labels on every object the operator creates.
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelPartOf    = "app.kubernetes.io/part-of"
	ManagedBy      = "obscura-operator"

	// ConfigHashAnnotation on a pod template carries the hash of what the pods read at start,
	// so a parameter change rolls them.
	ConfigHashAnnotation = "mohito.obscura.dev/config-hash"
)

// Environment variable names of the contract.
const (
	EnvDeployment         = "OBSCURA_DEPLOYMENT"
	EnvNATSURL            = "OBSCURA_NATS_URL"
	EnvNATSUser           = "OBSCURA_NATS_USER"
	EnvNATSPasswordFile   = "OBSCURA_NATS_PASSWORD_FILE"
	EnvRedisAddr          = "OBSCURA_REDIS_ADDR"
	EnvKeyFile            = "OBSCURA_KEY_FILE"
	EnvKeyActivationDelay = "OBSCURA_KEY_ACTIVATION_DELAY"
	EnvVendorIndex        = "OBSCURA_VENDOR_INDEX"
	EnvPartition          = "OBSCURA_PARTITION"
	EnvMetricsAddr        = "OBSCURA_METRICS_ADDR"
	EnvHealthAddr         = "OBSCURA_HEALTH_ADDR"
	EnvListen             = "OBSCURA_LISTEN"
	EnvPodName            = "POD_NAME"
	EnvTokensFile         = "OBSCURA_TOKENS_FILE"
	EnvVaultAddr          = "OBSCURA_VAULT_ADDR"
	EnvVaultRole          = "OBSCURA_VAULT_ROLE"
	EnvVaultMount         = "OBSCURA_VAULT_MOUNT"
	EnvVaultPath          = "OBSCURA_VAULT_PATH"
	EnvVaultField         = "OBSCURA_VAULT_FIELD"
	EnvDevicesFile        = "OBSCURA_DEVICES_FILE"
)
