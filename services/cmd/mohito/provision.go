package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/loadgen"
)

// Files `mohito provision` writes into --out (docs/services.md).
const (
	ProvisionIntegratorKey = "integrator.key"          // sk_I, base64
	ProvisionDevices       = "devices.json"            // the driver's full device secrets
	ProvisionTokens        = "tokens.json"             // the gateway's tokens file
	ProvisionDeviceLogins  = "device-credentials.json" // each device's own MQTT login (the driver's)
	ProvisionNATSPasswords = "nats-passwords.json"     // every NATS user's password
	ProvisionNATSAccounts  = "nats-accounts.conf"      // nats-server accounts block with those passwords
	ProvisionPublicKeys    = "public-keys.json"        // pk_I and pk_V (public)
)

// ProvisionVendorKey and ProvisionRegistry name vendor v's files.
func ProvisionVendorKey(v int) string { return fmt.Sprintf("vendor-%d.key", v) }
func ProvisionRegistry(v int) string  { return fmt.Sprintf("devices-%d.json", v) }

// ProvisionConfig configures `mohito provision`.
type ProvisionConfig struct {
	Vendors, DevicesPerVendor, Users int
	Suite                            string
	Out                              string
	Force                            bool

	suite mohito.Suite
}

func parseProvision(args []string) (*ProvisionConfig, error) {
	f := envflag.New("provision", "MOHITO_")
	var c ProvisionConfig
	f.Int(&c.Vendors, "vendors", 3, "number of vendors")
	f.Int(&c.DevicesPerVendor, "devices-per-vendor", 4, "devices of each vendor")
	f.Int(&c.Users, "users", 4, "users (one access token each)")
	f.String(&c.Suite, "suite", "X25519", "HPKE suite of the keys: X25519 or MLKEM768X25519 (the deployment's suite)")
	f.String(&c.Out, "out", "", "directory to write into (created; required)")
	f.Bool(&c.Force, "force", false, "overwrite files of an earlier provision")
	if err := parseFlags(f, args); err != nil {
		return nil, err
	}
	var bad []error
	if c.Vendors < 1 || c.Vendors > 64 {
		bad = append(bad, errors.New("--vendors must be in [1, 64]"))
	}
	if c.DevicesPerVendor < 1 || c.Users < 1 {
		bad = append(bad, errors.New("--devices-per-vendor and --users must be ≥ 1"))
	}
	switch c.Suite {
	case "X25519":
		c.suite = mohito.SuiteX25519
	case "MLKEM768X25519":
		c.suite = mohito.SuiteMLKEM768X25519
	default:
		bad = append(bad, fmt.Errorf("--suite %q must be X25519 or MLKEM768X25519", c.Suite))
	}
	if c.Out == "" {
		bad = append(bad, errors.New("--out is required"))
	}
	return &c, joinConfig(bad)
}

// runProvision is `mohito provision`: it generates what a cluster and the
// external driver need — keys, device registries, device secrets, tokens and
// NATS passwords — into --out, and prints only counts, file names and public
// keys.
func runProvision(args []string, out io.Writer) error {
	c, err := parseProvision(args)
	if err != nil {
		return err
	}
	files, summary, err := provision(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Out, 0o700); err != nil {
		return fmt.Errorf("create --out: %w", err)
	}
	if !c.Force {
		for name := range files {
			if _, err := os.Stat(filepath.Join(c.Out, name)); err == nil {
				return fmt.Errorf("%s already exists in %s (--force overwrites, and replaces every key)", name, c.Out)
			}
		}
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(c.Out, name), b, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	b, _ := json.MarshalIndent(summary, "", "  ")
	fmt.Fprintf(out, "%s\n", b)
	return nil
}

// provisionSummary is what provision prints: nothing secret.
type provisionSummary struct {
	Out              string            `json:"out"`
	Suite            string            `json:"suite"`
	Vendors          int               `json:"vendors"`
	DevicesPerVendor int               `json:"devices_per_vendor"`
	Users            int               `json:"users"`
	IntegratorKey    string            `json:"pk_integrator"`
	VendorKeys       map[string]string `json:"pk_vendors"`
	Files            []string          `json:"files"`
}

// provision builds every file's content in memory.
func provision(c *ProvisionConfig) (map[string][]byte, *provisionSummary, error) {
	files := map[string][]byte{}
	s := &provisionSummary{Out: c.Out, Suite: c.Suite, Vendors: c.Vendors, DevicesPerVendor: c.DevicesPerVendor, Users: c.Users, VendorKeys: map[string]string{}}
	key := func(name string) (string, error) {
		k, err := mohito.GenerateKey(c.suite)
		if err != nil {
			return "", err
		}
		b, err := k.Bytes()
		if err != nil {
			return "", err
		}
		files[name] = []byte(base64.StdEncoding.EncodeToString(b) + "\n")
		clear(b)
		return base64.StdEncoding.EncodeToString(k.PublicKey().Bytes()), nil
	}
	var err error
	if s.IntegratorKey, err = key(ProvisionIntegratorKey); err != nil {
		return nil, nil, err
	}
	var all []loadgen.ProvisionedDevice
	var devices [][]string // by vendor: the ids of its registry, each issued its own NATS login
	for v := range c.Vendors {
		if s.VendorKeys[strconv.Itoa(v)], err = key(ProvisionVendorKey(v)); err != nil {
			return nil, nil, err
		}
		var reg []deviceEntry
		ids := make([]string, c.DevicesPerVendor)
		for i := range c.DevicesPerVendor {
			sec, err := mohito.NewDeviceSecret(rand.Reader)
			if err != nil {
				return nil, nil, err
			}
			id := fmt.Sprintf("v%dd%d", v, i)
			ids[i] = id
			k := sec.Keys()
			reg = append(reg, deviceEntry{ID: id, PRF: k.PRF[:]})
			all = append(all, loadgen.ProvisionedDevice{ID: id, Vendor: v, Secret: sec[:]})
		}
		files[ProvisionRegistry(v)], _ = json.MarshalIndent(reg, "", "  ")
		devices = append(devices, ids)
	}
	files[ProvisionDevices], _ = json.MarshalIndent(all, "", "  ")

	tokens := map[string]string{}
	for u := range c.Users {
		tokens[randomText(24)] = fmt.Sprintf("user%d", u)
	}
	files[ProvisionTokens], _ = json.MarshalIndent(tokens, "", "  ")

	passwords := map[string]string{contract.IntegratorUser: randomText(24)}
	logins := map[string]loadgen.DeviceLogin{}
	for v := range c.Vendors {
		passwords[contract.VendorUser(v)] = randomText(24)
		for _, id := range devices[v] {
			u := contract.DeviceUser(v, id)
			passwords[u] = randomText(24)
			logins[id] = loadgen.DeviceLogin{User: u, Password: passwords[u]}
		}
	}
	files[ProvisionNATSPasswords], _ = json.MarshalIndent(passwords, "", "  ")
	files[ProvisionDeviceLogins], _ = json.MarshalIndent(logins, "", "  ")
	files[ProvisionNATSAccounts] = []byte(contract.AccountsConfig(devices, func(u string) string { return passwords[u] }))
	files[ProvisionPublicKeys], _ = json.MarshalIndent(map[string]any{"integrator": s.IntegratorKey, "vendors": s.VendorKeys}, "", "  ")
	for name := range files {
		s.Files = append(s.Files, name)
	}
	slices.Sort(s.Files)
	return files, s, nil
}

// randomText is n random bytes, base64url without padding: tokens and passwords.
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
