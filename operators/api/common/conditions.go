package common

// Condition types every Obscura resource reports (Kubernetes API conventions: positive polarity
// for Ready, abnormal-true for Degraded).
const (
	// ConditionReady is True when the resource's references resolve and its workloads serve.
	ConditionReady = "Ready"
	// ConditionProgressing is True while the operator is moving the resource to a new desired state.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the resource cannot do its job; the reason says why.
	ConditionDegraded = "Degraded"
)

// Reasons shared by several kinds.
const (
	// ReasonReconciled: every check passed.
	ReasonReconciled = "Reconciled"
	// ReasonKeySecretNotFound: the Secret named by keys.secretRef does not exist.
	ReasonKeySecretNotFound = "KeySecretNotFound"
	// ReasonInvalidKey: the key material has the wrong form (length, encoding).
	ReasonInvalidKey = "InvalidKey"
	// ReasonVaultNotConfigured: keys.vault is set but no Vault address is known.
	ReasonVaultNotConfigured = "VaultNotConfigured"
)
