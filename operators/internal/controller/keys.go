package controller

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/api/common"
	"github.com/obscura-iot/obscura/services/pkg/keys"
	mohitocontract "github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// X25519KeySize is the length of an X25519 private key (Mohito's sk_I and sk_V in the X25519
// suite).
const X25519KeySize = 32

// MLKEM768X25519SeedSize is the length of a Mohito private key in the MLKEM768X25519 suite: the
// 32-byte seed from which the hybrid KEM derives its ML-KEM-768 and X25519 keys (crypto/hpke), not
// an expanded ML-KEM decapsulation key. It equals X25519KeySize, which is why a check of "32 bytes"
// passed for both suites without checking either; keyFormat names each explicitly and takes its
// size from the Mohito contract (mohitocontract.PrivateKeySize), which a services test holds to
// mohito.ParsePrivateKey: every string of that size is a key of the suite.
const MLKEM768X25519SeedSize = 32

// keyFormat is what every entry of a key Secret must hold for the services that load it.
type keyFormat struct {
	name  string             // for messages: "X25519 private key"
	size  int                // bytes after keys.Decode
	parse func([]byte) error // what the services refuse beyond the size (nil error: any bytes)
}

// symmetricKey is a key format of size bytes in which any bytes are a key.
func symmetricKey(size int, name string) *keyFormat {
	return &keyFormat{name: name, size: size, parse: func([]byte) error { return nil }}
}

// mohitoSuites are the HPKE suites a Round's spec.suite names, with their private-key formats.
var mohitoSuites = map[string]struct {
	size int
	what string
}{
	mohitocontract.SuiteX25519:         {X25519KeySize, "X25519 private key"},
	mohitocontract.SuiteMLKEM768X25519: {MLKEM768X25519SeedSize, "MLKEM768X25519 private key seed"},
}

// mohitoKeyFormat is the format of Mohito private keys in suite (spec.suite of a Round; "" is the
// default X25519) as the roles load them: the contract's size, any bytes.
func mohitoKeyFormat(suite string) (*keyFormat, error) {
	if suite == "" {
		suite = "X25519"
	}
	s, ok := mohitoSuites[suite]
	if !ok {
		return nil, fmt.Errorf("suite %q has no key format (X25519 or MLKEM768X25519)", suite)
	}
	size, ok := mohitocontract.PrivateKeySize(suite)
	if !ok || size != s.size {
		return nil, fmt.Errorf("suite %q: the operator's key size %d disagrees with the contract's %d", suite, s.size, size)
	}
	// Every string of the contract's size is a key of the suite (its test holds this to the
	// services' parser); the callers check the size.
	return symmetricKey(size, s.what), nil
}

// vendorKeyFormat is the format of a vendor's private key: a Vendor can be selected by Rounds of
// either suite, so its key must load in every one.
func vendorKeyFormat() *keyFormat {
	f := &keyFormat{name: "private key of every suite (X25519, MLKEM768X25519)", size: X25519KeySize}
	f.parse = func(b []byte) error {
		for _, name := range []string{"X25519", "MLKEM768X25519"} {
			sf, _ := mohitoKeyFormat(name)
			if len(b) != sf.size {
				return fmt.Errorf("%s: want %d bytes", name, sf.size)
			}
			if err := sf.parse(b); err != nil {
				return fmt.Errorf("%s: %v", name, err)
			}
		}
		return nil
	}
	return f
}

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

// check verifies that ref resolves in namespace ns and returns the key epochs of a Secret
// reference (epoch 0 for a single key; nil for Vault, which the operator does not read). A
// non-nil format also checks that every key decodes and parses as the services load it. It
// returns a degraded outcome when the reference is not usable, and an error only when the API
// server could not answer.
func (k KeyCheck) check(ctx context.Context, ns, what string, ref common.KeyReference, format *keyFormat) ([]int32, *outcome, error) {
	switch {
	case ref.Vault != nil:
		if ref.Vault.Address == "" && k.VaultAddress == "" {
			return nil, degraded(common.ReasonVaultNotConfigured,
				"%s: keys.vault has no address and the operator has no --vault-address", what), nil
		}
		// Vault itself is contacted by the workloads (Kubernetes auth).
		return nil, nil, nil
	case ref.SecretRef != nil:
		var s corev1.Secret
		err := k.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.SecretRef.Name}, &s)
		if apierrors.IsNotFound(err) {
			return nil, degraded(common.ReasonKeySecretNotFound, "%s: Secret %s/%s not found", what, ns, ref.SecretRef.Name), nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("get key Secret %s/%s: %w", ns, ref.SecretRef.Name, err)
		}
		if ref.SecretRef.Epochs {
			return checkEpochs(what, &s, format)
		}
		key := ref.SecretRef.Key
		if key == "" {
			key = "private.key"
		}
		if o := checkKeyEntry(what, &s, key, format); o != nil {
			return nil, o, nil
		}
		return []int32{0}, nil, nil
	default:
		// CEL rejects this; kept so a schema change cannot turn it into a silent pass.
		return nil, degraded(common.ReasonInvalidKey, "%s: no key source set", what), nil
	}
}

// checkEpochs lists the epoch-<n>.key entries of a key ring Secret, ascending, and checks each.
func checkEpochs(what string, s *corev1.Secret, format *keyFormat) ([]int32, *outcome, error) {
	var epochs []int32
	for name := range s.Data {
		n, ok := keys.ParseEpochFileName(name)
		if !ok {
			continue
		}
		if o := checkKeyEntry(what, s, name, format); o != nil {
			return nil, o, nil
		}
		epochs = append(epochs, int32(n))
	}
	if len(epochs) == 0 {
		return nil, degraded(common.ReasonInvalidKey,
			"%s: Secret %s/%s has no epoch-<n>.key entry (keys.secretRef.epochs is set)", what, s.Namespace, s.Name), nil
	}
	slices.Sort(epochs)
	return epochs, nil, nil
}

// checkKeyEntry checks one entry of a key Secret: present, non-empty and, with a format, a key
// of that format in an encoding the services accept. Messages never show the content.
func checkKeyEntry(what string, s *corev1.Secret, key string, format *keyFormat) *outcome {
	v, ok := s.Data[key]
	switch {
	case !ok:
		return degraded(common.ReasonInvalidKey, "%s: Secret %s/%s has no key %q", what, s.Namespace, s.Name, key)
	case len(v) == 0:
		return degraded(common.ReasonInvalidKey, "%s: Secret %s/%s key %q is empty", what, s.Namespace, s.Name, key)
	}
	if format != nil {
		// What the services accept (services/pkg/keys): raw, hex or base64 text.
		k, err := keys.Decode(v)
		if err == nil && len(k) != format.size {
			err = fmt.Errorf("decodes to %d bytes", len(k))
		}
		if err == nil {
			err = format.parse(k)
		}
		clear(k)
		if err != nil {
			return degraded(common.ReasonInvalidKey, "%s: Secret %s/%s key %q holds %d bytes: want a %d-byte %s (raw, hex or base64): %v",
				what, s.Namespace, s.Name, key, len(v), format.size, format.name, err)
		}
	}
	return nil
}

// ReasonKeyEpochRotated is the Event recorded when a key Secret gains a higher epoch.
const ReasonKeyEpochRotated = "KeyEpochRotated"

// setKeyEpochs stores the key epochs now in *status, recording a KeyEpochRotated Event when the
// highest epoch rises above the one status held.
func setKeyEpochs(rec events.EventRecorder, obj runtime.Object, what string, status *[]int32, now []int32, activationDelay string) {
	if old := *status; len(old) > 0 && len(now) > 0 && now[len(now)-1] > old[len(old)-1] {
		rec.Eventf(obj, nil, corev1.EventTypeNormal, ReasonKeyEpochRotated, "RotateKey",
			"%s: epoch %d added (epochs %v, previously current %d); the workloads stage it within their reload interval and name it after their activation delay (%s), without a restart",
			what, now[len(now)-1], now, old[len(old)-1], activationDelay)
	}
	*status = now
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
