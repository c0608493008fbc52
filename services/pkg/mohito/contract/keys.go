package contract

// HPKE suites a deployment names (DeploymentFile.Suite).
const (
	SuiteX25519         = "X25519"
	SuiteMLKEM768X25519 = "MLKEM768X25519"
)

// PrivateKeySize is the size of a private key of suite as the roles load it (a file, a Secret
// entry or a Vault field): X25519's 32-byte scalar, or the 32-byte seed of the ML-KEM-768 +
// X25519 hybrid KEM. Every string of that size is a key (the contract test checks this against
// mohito.ParsePrivateKey), so the operator checks a key Secret by its size. "" is X25519.
func PrivateKeySize(suite string) (int, bool) {
	switch suite {
	case "", SuiteX25519:
		return 32, true
	case SuiteMLKEM768X25519:
		return 32, true
	}
	return 0, false
}
