// Package keys loads a party's long-term private key once at start, either from a file or from
// Vault's KV v2 engine (DESIGN.md: keys are read once and held in memory — never one Vault call
// per message). It is the one helper for "load key from Vault or file" (STYLE.md).
//
// A binary binds the flags with [Source.Bind], checks them with [Source.Validate] and loads the
// key with [Source.Load] (32 bytes: raw, hex or base64) or [Source.LoadBytes] (the secret as
// stored, for keys that are documents). Errors name the source (path, Vault address, mount, path
// and field) but never the key material.
package keys

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/envflag"
)

// Size is the length of a decoded private key (X25519 and the suites of docs/services.md).
const Size = 32

// Defaults of the Vault settings (operators/api/common.VaultKeyReference uses the same).
const (
	DefaultMount    = "secret"
	DefaultField    = "private_key"
	DefaultAuthPath = "kubernetes"
	DefaultJWTFile  = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	DefaultTimeout  = 30 * time.Second
)

// Environment variables of the Vault flags (the same for every binary).
const (
	EnvVaultAddr     = "OBSCURA_VAULT_ADDR"
	EnvVaultRole     = "OBSCURA_VAULT_ROLE"
	EnvVaultMount    = "OBSCURA_VAULT_MOUNT"
	EnvVaultPath     = "OBSCURA_VAULT_PATH"
	EnvVaultField    = "OBSCURA_VAULT_FIELD"
	EnvVaultAuthPath = "OBSCURA_VAULT_AUTH_PATH"
	EnvVaultJWTFile  = "OBSCURA_VAULT_JWT_FILE"
	// EnvVaultTokenFile names the file holding a Vault token for token auth (development and
	// tests). The token itself is never a flag or an environment variable: it would show in
	// the process list and in `kubectl describe`; an ambient $VAULT_TOKEN is never used.
	EnvVaultTokenFile = "OBSCURA_VAULT_TOKEN_FILE"
)

// ErrConfig marks an invalid source configuration (the binaries exit with status 2).
var ErrConfig = errors.New("invalid key source")

// Vault names a key in Vault's KV v2 engine: field Field of the secret at Mount/data/Path.
type Vault struct {
	// Addr is the server's URL, e.g. https://vault.vault.svc:8200.
	Addr string
	// Role is the Kubernetes auth role to log in with. Empty means token auth with Token.
	Role string
	// Mount is the KV v2 mount point (default "secret").
	Mount string
	// Path is the secret's path under the mount, e.g. "mohito/vendors/acme/epoch-3".
	Path string
	// Field is the secret's field holding the key (default "private_key").
	Field string
	// AuthPath is where the Kubernetes auth method is mounted (default "kubernetes").
	AuthPath string
	// JWTFile is the service account token presented to Vault (default DefaultJWTFile).
	JWTFile string
	// TokenFile holds the token used when Role is empty (token auth), read at each login.
	TokenFile string
	// Token is the token itself, for programs that hold it in memory (tests); TokenFile is read
	// when it is empty. Never printed: Vault and Source format as their String.
	Token string `json:"-"`
	// Timeout bounds each call (login, read); default 30s.
	Timeout time.Duration
}

// configured reports whether any setting that selects Vault is present.
func (v *Vault) configured() bool { return v.Addr != "" || v.Role != "" || v.Path != "" }

func (v *Vault) withDefaults() Vault {
	c := *v
	if c.Mount == "" {
		c.Mount = DefaultMount
	}
	if c.Field == "" {
		c.Field = DefaultField
	}
	if c.AuthPath == "" {
		c.AuthPath = DefaultAuthPath
	}
	if c.JWTFile == "" {
		c.JWTFile = DefaultJWTFile
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	c.Mount = strings.Trim(c.Mount, "/")
	c.AuthPath = strings.Trim(c.AuthPath, "/")
	return c
}

// String names the secret for messages: "vault <addr> secret/data/<path> field <field>".
func (v Vault) String() string {
	c := v.withDefaults()
	return fmt.Sprintf("vault %s %s/data/%s field %s", c.Addr, c.Mount, c.Path, c.Field)
}

// Source is where a key comes from: File, or Vault. Exactly one must be configured.
type Source struct {
	// File holds the key (32 raw bytes, or hex or base64 text).
	File string
	// Vault names the key in Vault.
	Vault Vault

	// defaultFile is File's flag default: a File equal to it that was not given explicitly
	// yields to a configured Vault.
	defaultFile  string
	fileExplicit func() bool
	fileFlag     string // set by BindAs; messages name it
}

// fileOption is the file flag as messages name it.
func (s *Source) fileOption() string {
	if s.fileFlag == "" {
		return "--key-file"
	}
	return "--" + s.fileFlag
}

// Bind binds --key-file (default defaultFile, env f.EnvName("key-file")) and the --vault-*
// flags (env OBSCURA_VAULT_*) to s; whose completes the usage text ("sk_V", …).
func (s *Source) Bind(f *envflag.Set, defaultFile, whose string) {
	s.BindAs(f, "key-file", defaultFile, "private key "+whose+" (32 raw bytes, hex or base64), read once at start; or use --vault-*")
}

// BindAs is [Source.Bind] with the file flag named fileFlag (env f.EnvName(fileFlag)) and its
// usage text: for binaries whose key file has another name or holds a document (pda -keys,
// read with [Source.LoadBytes]). The --vault-* flags are the same.
func (s *Source) BindAs(f *envflag.Set, fileFlag, defaultFile, usage string) {
	s.defaultFile, s.fileFlag = defaultFile, fileFlag
	f.String(&s.File, fileFlag, defaultFile, usage)
	envName := f.EnvName(fileFlag)
	s.fileExplicit = func() bool {
		set := false
		f.FlagSet().Visit(func(fl *flag.Flag) { set = set || fl.Name == fileFlag })
		if envName != "" {
			if _, ok := os.LookupEnv(envName); ok {
				set = true
			}
		}
		return set
	}
	v := &s.Vault
	f.String(&v.Addr, "vault-addr", "", "Vault URL; selects Vault as the key source", EnvVaultAddr)
	f.String(&v.Role, "vault-role", "", "Vault Kubernetes auth role (empty: token auth with --vault-token-file)", EnvVaultRole)
	f.String(&v.Mount, "vault-mount", DefaultMount, "Vault KV v2 mount", EnvVaultMount)
	f.String(&v.Path, "vault-path", "", "secret path under the mount (read from <mount>/data/<path>)", EnvVaultPath)
	f.String(&v.Field, "vault-field", DefaultField, "secret field holding the key", EnvVaultField)
	f.String(&v.AuthPath, "vault-auth-path", DefaultAuthPath, "mount path of Vault's Kubernetes auth method", EnvVaultAuthPath)
	f.String(&v.JWTFile, "vault-jwt-file", DefaultJWTFile, "service account token for the Kubernetes auth login", EnvVaultJWTFile)
	f.String(&v.TokenFile, "vault-token-file", "", "file holding a Vault token, for token auth when --vault-role is empty", EnvVaultTokenFile)
}

// useVault reports which source is configured, or an error if none or both are.
func (s *Source) useVault() (bool, error) {
	vault := s.Vault.configured()
	file := s.File != ""
	if file && vault && s.File == s.defaultFile && (s.fileExplicit == nil || !s.fileExplicit()) {
		file = false // the default path yields to an explicit Vault setting
	}
	switch {
	case file && vault:
		return false, fmt.Errorf("%w: set either %s or the --vault-* flags, not both", ErrConfig, s.fileOption())
	case !file && !vault:
		return false, fmt.Errorf("%w: no key source: set %s or --vault-addr with --vault-path", ErrConfig, s.fileOption())
	}
	return vault, nil
}

// Validate checks that exactly one source is configured, and completely. It reads nothing.
func (s *Source) Validate() error {
	vault, err := s.useVault()
	if err != nil || !vault {
		return err
	}
	v := s.Vault.withDefaults()
	var errs []error
	if !strings.HasPrefix(v.Addr, "http://") && !strings.HasPrefix(v.Addr, "https://") {
		errs = append(errs, errors.New("--vault-addr must be an http:// or https:// URL"))
	}
	if v.Path == "" || strings.HasPrefix(v.Path, "/") || strings.Contains(v.Path, "..") {
		errs = append(errs, errors.New("--vault-path is required, relative to the mount, without '..'"))
	}
	if v.Mount == "" || v.Field == "" {
		errs = append(errs, errors.New("--vault-mount and --vault-field must not be empty"))
	}
	switch {
	case v.Role == "" && v.Token == "" && v.TokenFile == "":
		errs = append(errs, errors.New("Vault needs --vault-role (Kubernetes auth) or --vault-token-file (token auth)"))
	case v.Role != "" && v.TokenFile != "":
		errs = append(errs, errors.New("set either --vault-role (Kubernetes auth) or --vault-token-file (token auth), not both"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

// String names the configured source for logs (never the key).
func (s Source) String() string {
	if vault, err := s.useVault(); err == nil && vault {
		return s.Vault.String()
	}
	return "file " + s.File
}

// LoadBytes returns the secret as stored: the file's content or the Vault field's string.
// The caller owns (and should clear) the returned slice.
func (s *Source) LoadBytes(ctx context.Context) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if vault, _ := s.useVault(); vault {
		return s.Vault.read(ctx)
	}
	b, err := os.ReadFile(s.File)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.fileOption(), err)
	}
	return b, nil
}

// Load returns the 32-byte key from the configured source. The stored value may be the raw
// 32 bytes, or 64 hex digits, or base64 (standard or URL alphabet, padded or not), with
// surrounding whitespace ignored for the text forms.
func (s *Source) Load(ctx context.Context) ([]byte, error) {
	b, err := s.LoadBytes(ctx)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	k, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	return k, nil
}

// Epoch is one key of a party's key ring (spec O16) with its epoch number.
type Epoch struct {
	N   uint32
	Key []byte
}

// parseEpochName accepts "epoch-<n>" and "epoch-<n>.key" with a canonical
// decimal n (no sign, no leading zeros) below 2^31.
func parseEpochName(name string) (uint32, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(name, ".key"), "epoch-")
	if !ok || rest == "" || len(rest) > 10 || (len(rest) > 1 && rest[0] == '0') {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 31)
	if err != nil || strconv.FormatUint(n, 10) != rest {
		return 0, false
	}
	return uint32(n), true
}

// EpochFileName is the file (Secret key) holding epoch n of a ring directory.
func EpochFileName(n uint32) string { return "epoch-" + strconv.FormatUint(uint64(n), 10) + ".key" }

// ParseEpochFileName returns n for a ring directory's file (Secret key) "epoch-<n>.key"; ok is
// false for any other name (the operator lists a Secret's epochs with it).
func ParseEpochFileName(name string) (n uint32, ok bool) {
	if !strings.HasSuffix(name, ".key") {
		return 0, false
	}
	return parseEpochName(name)
}

func sortEpochs(es []Epoch) []Epoch {
	slices.SortFunc(es, func(a, b Epoch) int { return int(int64(a.N) - int64(b.N)) })
	return es
}

func clearEpochs(es []Epoch) {
	for _, e := range es {
		clear(e.Key)
	}
}

// LoadRing returns every key epoch of the source, ascending by epoch:
//
//   - --key-file naming a directory (a Secret mounted whole): every file
//     epoch-<n>.key in it; other files are ignored, at least one must exist;
//   - --key-file naming a file: that key as epoch 0 (one-key deployments);
//   - --vault-path ending in '/': the field of every secret epoch-<n> in that
//     KV v2 folder (one login, one list, one read per epoch);
//   - another --vault-path: that secret's key as epoch 0.
//
// The caller owns (and should clear) the keys.
func (s *Source) LoadRing(ctx context.Context) ([]Epoch, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	vault, _ := s.useVault()
	switch {
	case vault && strings.HasSuffix(s.Vault.Path, "/"):
		return s.Vault.readRing(ctx)
	case !vault:
		st, err := os.Stat(s.File)
		if err != nil {
			return nil, fmt.Errorf("--key-file: %w", err)
		}
		if st.IsDir() {
			return s.readDirRing()
		}
	}
	k, err := s.Load(ctx)
	if err != nil {
		return nil, err
	}
	return []Epoch{{N: 0, Key: k}}, nil
}

// readDirRing reads every epoch-<n>.key file of the directory s.File.
func (s *Source) readDirRing() ([]Epoch, error) {
	ents, err := os.ReadDir(s.File)
	if err != nil {
		return nil, fmt.Errorf("--key-file: %w", err)
	}
	var out []Epoch
	for _, e := range ents {
		n, ok := ParseEpochFileName(e.Name())
		if !ok {
			continue
		}
		path := filepath.Join(s.File, e.Name())
		b, err := os.ReadFile(path) // follows the symlinks of a mounted Secret
		if err != nil {
			clearEpochs(out)
			return nil, fmt.Errorf("--key-file: %w", err)
		}
		k, err := Decode(b)
		clear(b)
		if err != nil {
			clearEpochs(out)
			return nil, fmt.Errorf("file %s: %w", path, err)
		}
		out = append(out, Epoch{N: n, Key: k})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--key-file: directory %s holds no epoch-<n>.key file", s.File)
	}
	return sortEpochs(out), nil
}

// Decode turns a stored key into its Size bytes: raw, hex or base64. Exactly Size bytes are
// always taken as the raw key (so a 32-character text is not decoded); 64 hex digits and base64
// text are decoded. The error gives only the length of the input, never its content.
func Decode(b []byte) ([]byte, error) {
	if len(b) == Size {
		return bytes.Clone(b), nil
	}
	t := bytes.TrimSpace(b)
	if len(t) == 2*Size {
		k := make([]byte, Size)
		if _, err := hex.Decode(k, t); err == nil {
			return k, nil
		}
		clear(k)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		k := make([]byte, enc.DecodedLen(len(t)))
		n, err := enc.Decode(k, t)
		if err == nil && n == Size {
			return k[:n], nil
		}
		clear(k)
	}
	return nil, fmt.Errorf("not a %d-byte private key (raw, hex or base64); got %d bytes", Size, len(b))
}
