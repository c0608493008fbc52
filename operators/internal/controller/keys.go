package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/api/common"
	"github.com/obscura-iot/obscura/services/pkg/keys"
)

// X25519KeySize is the length of an X25519 private key (Mohito's sk_I and sk_V).
const X25519KeySize = 32

// secretKeyIndex indexes objects by the Secrets their key references name, so that creating or
// fixing a Secret re-reconciles the objects waiting for it.
const secretKeyIndex = ".spec.keys.secretRef.name"

// KeyCheck verifies key references without ever reading key material into logs or status.
type KeyCheck struct {
	Client client.Reader
	// VaultAddress is the operator's default Vault address; a vault reference without its own
	// address needs it.
	VaultAddress string
}

// check verifies that ref resolves in namespace ns. wantLen > 0 also checks the key's length.
// It returns nil when the reference is usable, a degraded outcome when it is not, and an error
// only when the API server could not answer.
func (k KeyCheck) check(ctx context.Context, ns, what string, ref common.KeyReference, wantLen int) (*outcome, error) {
	switch {
	case ref.Vault != nil:
		if ref.Vault.Address == "" && k.VaultAddress == "" {
			return degraded(common.ReasonVaultNotConfigured,
				"%s: keys.vault has no address and the operator has no --vault-address", what), nil
		}
		// Vault itself is contacted by the workloads (Kubernetes auth, read once at start).
		return nil, nil
	case ref.SecretRef != nil:
		var s corev1.Secret
		err := k.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.SecretRef.Name}, &s)
		if apierrors.IsNotFound(err) {
			return degraded(common.ReasonKeySecretNotFound, "%s: Secret %s/%s not found", what, ns, ref.SecretRef.Name), nil
		}
		if err != nil {
			return nil, fmt.Errorf("get key Secret %s/%s: %w", ns, ref.SecretRef.Name, err)
		}
		key := ref.SecretRef.Key
		if key == "" {
			key = "private.key"
		}
		v, ok := s.Data[key]
		switch {
		case !ok:
			return degraded(common.ReasonInvalidKey, "%s: Secret %s/%s has no key %q", what, ns, s.Name, key), nil
		case len(v) == 0:
			return degraded(common.ReasonInvalidKey, "%s: Secret %s/%s key %q is empty", what, ns, s.Name, key), nil
		}
		if wantLen > 0 {
			// What the services accept (services/pkg/keys): raw, hex or base64 text.
			k, err := keys.Decode(v)
			if err == nil && len(k) != wantLen {
				err = fmt.Errorf("decodes to %d bytes", len(k))
			}
			clear(k)
			if err != nil {
				return degraded(common.ReasonInvalidKey, "%s: Secret %s/%s key %q holds %d bytes: want a %d-byte private key (raw, hex or base64): %v",
					what, ns, s.Name, key, len(v), wantLen, err), nil
			}
		}
		return nil, nil
	default:
		// CEL rejects this; kept so a schema change cannot turn it into a silent pass.
		return degraded(common.ReasonInvalidKey, "%s: no key source set", what), nil
	}
}

// secretName returns the Secret a key reference names, or "".
func secretName(ref common.KeyReference) string {
	if ref.SecretRef == nil {
		return ""
	}
	return ref.SecretRef.Name
}

// ReasonSecretNotFound: a Secret a workload reads as a file (user tokens, device registry) is
// missing or lacks its key.
const ReasonSecretNotFound = "SecretNotFound"

// checkSecretFile verifies that ref names an existing Secret holding the key (or, without one,
// def). A nil ref is fine: the file is optional.
func (k KeyCheck) checkSecretFile(ctx context.Context, ns, what string, ref *common.SecretFileReference, def string) (*outcome, error) {
	if ref == nil {
		return nil, nil
	}
	key := ref.Key
	if key == "" {
		key = def
	}
	var s corev1.Secret
	err := k.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &s)
	if apierrors.IsNotFound(err) {
		return degraded(ReasonSecretNotFound, "%s: Secret %s/%s not found", what, ns, ref.Name), nil
	}
	if err != nil {
		return nil, fmt.Errorf("get Secret %s/%s: %w", ns, ref.Name, err)
	}
	if _, ok := s.Data[key]; !ok {
		return degraded(ReasonSecretNotFound, "%s: Secret %s/%s has no key %q", what, ns, ref.Name, key), nil
	}
	return nil, nil
}
