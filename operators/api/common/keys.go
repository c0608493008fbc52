package common

// KeyReference says where a party's long-term private key lives. Exactly one source is set.
// Keys are read at start and held in memory (DESIGN.md: never one Vault call per message); the
// workloads re-read the source every 15 s to pick up a new key epoch (docs/services.md, Live
// rotation): a Secret with epochs: true, or a Vault path ending in '/'.
//
// +kubebuilder:validation:XValidation:rule="has(self.vault) != has(self.secretRef)",message="set exactly one of keys.vault or keys.secretRef"
type KeyReference struct {
	// Vault reads the key from a Vault KV v2 secret through the Kubernetes auth method.
	// +optional
	Vault *VaultKeyReference `json:"vault,omitempty"`

	// SecretRef reads the key from a Secret in the resource's own namespace.
	// +optional
	SecretRef *SecretKeyReference `json:"secretRef,omitempty"`
}

// VaultKeyReference names a key in Vault's KV v2 engine.
type VaultKeyReference struct {
	// Address of the Vault server; empty uses the operator's configured address.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://')",message="vault.address must be an http:// or https:// URL"
	Address string `json:"address,omitempty"`

	// Role is the Kubernetes auth role the workload logs in with.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Role string `json:"role"`

	// Mount is the KV v2 mount point.
	// +optional
	// +kubebuilder:default=secret
	// +kubebuilder:validation:MaxLength=128
	Mount string `json:"mount,omitempty"`

	// Path of the secret under the mount, e.g. "mohito/vendors/acme/key". A path ending in '/',
	// e.g. "mohito/vendors/acme/", is a folder of key epochs: every secret epoch-<n> in it is
	// epoch n, and adding epoch-<n+1> rotates the key without a restart.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.contains('..')",message="vault.path must be relative to the mount and must not contain '..'"
	Path string `json:"path"`

	// Field of the secret that holds the key material.
	// +optional
	// +kubebuilder:default=private_key
	// +kubebuilder:validation:MaxLength=128
	Field string `json:"field,omitempty"`
}

// SecretKeyReference names a key in a Secret of the same namespace.
//
// +kubebuilder:validation:XValidation:rule="!has(self.epochs) || !self.epochs || !has(self.key) || self.key == 'private.key'",message="keys.secretRef.key does not apply with epochs: every epoch-<n>.key entry of the Secret is a key"
type SecretKeyReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Key within the Secret's data.
	// +optional
	// +kubebuilder:default=private.key
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`

	// Epochs says the Secret holds a key ring: every entry epoch-<n>.key is the key of epoch n
	// (spec O16). The Secret is mounted whole, so adding epoch-<n+1>.key rotates the key without
	// a restart or an aborted round; remove an old epoch once it has been retired. Without it,
	// the one entry named by key is epoch 0, and replacing it needs a restart.
	// +optional
	Epochs bool `json:"epochs,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// Name of the referenced object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// SecretFileReference names one key of a Secret in the same namespace that a workload reads as
// a file.
type SecretFileReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Key within the Secret's data; empty uses the file name the workload expects.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}
