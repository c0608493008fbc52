package specs

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
	pdacontract "github.com/obscura-iot/obscura/services/pkg/pda/contract"
	ppscontract "github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

// The NATS credentials contract. Every credentials Secret the operator generates carries the
// label LabelNATSCredentials and names its account in AnnotationNATSAccount; its keys user and
// password are what the pods connect with, and a vendor's also holds one user per device of its
// registry, entries <id>DeviceUserSuffix and <id>DevicePasswordSuffix: each device's own
// restricted login over MQTT (no login is shared between devices). The accounts
// reconciler renders every such Secret into the server's accounts block (NATSAccounts) and
// writes it, with bcrypt hashes in place of the passwords, to NATSAccountsKey of one Secret
// the nats-server mounts and reloads.
const (
	LabelNATSCredentials       = "obscura.dev/nats-credentials"
	AnnotationNATSAccount      = "obscura.dev/nats-account"
	AnnotationNATSAccountsHash = "obscura.dev/nats-accounts-hash"

	NATSUserKey     = "user"
	NATSPasswordKey = "password"
	NATSAccountsKey = "accounts.conf"

	// DeviceUserSuffix and DevicePasswordSuffix name one device's entries, <id>.user and
	// <id>.password, in a vendor's (contract.DeviceUser, contract.DevicePermissions) or a
	// pipeline's credentials Secret. Removing them revokes the device alone.
	DeviceUserSuffix     = ".user"
	DevicePasswordSuffix = ".password"

	// NATSSystemAccount is the server's system account; no party has a user in it.
	NATSSystemAccount = "SYS"

	// A SecurePipeline's credentials Secret names its own account, PPSAccountPrefix and the
	// pipeline's namespace and name; besides the broker's user it holds one user per device,
	// entries <id>PPSDeviceUserSuffix and <id>PPSDevicePasswordSuffix, each rendered with
	// pps/contract.DevicePermissions. AnnotationPPSSubscribers lists (JSON) the devices that
	// may read the function's output, and AnnotationPPSFn names the function once the broker
	// has compiled it: until then a subscriber may not subscribe to any output.
	PPSAccountPrefix         = "PPS_"
	PPSDeviceUserSuffix      = DeviceUserSuffix
	PPSDevicePasswordSuffix  = DevicePasswordSuffix
	AnnotationPPSSubscribers = "pps.obscura.dev/subscribers"
	AnnotationPPSFn          = "pps.obscura.dev/fn"

	// An EncounterSimulation's credentials Secret names its own account, SDDRSimAccountPrefix
	// and the simulation's namespace and name, with the one user its shards share.
	SDDRSimAccountPrefix = "SDDR_SIM_"

	// A HeaderGateway on the operator's NATS gets its own account, LOISAccountPrefix and the
	// gateway's namespace and name, with the one user its cloud interfaces and registrar share.
	LOISAccountPrefix = "LOIS_"
)

// NATSSecret is a party's NATS credentials, user in account with password, marked for the
// accounts reconciler; the operator creates it with a random password. labels are the
// owner's and get LabelNATSCredentials added.
func NATSSecret(namespace, name, account, user string, password []byte, labels map[string]string) *corev1.Secret {
	labels[LabelNATSCredentials] = "true"
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels,
			Annotations: map[string]string{AnnotationNATSAccount: account}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{NATSUserKey: []byte(user), NATSPasswordKey: password},
	}
}

// NATSUser is one user of the rendered accounts. Password is the plain password; only its
// hash is rendered.
type NATSUser struct {
	Account, Name, Password string
	// Device users get the contract.DevicePermissions of the device their name names.
	Device bool
	// Permissions, when set, are the user's own (a PPS device's, by its device id).
	Permissions *natsx.Permissions
	// Source says where the user comes from in problems: a Secret's namespace/name or a flag.
	Source string
}

// NATSAccountsResult is a rendered layout and what it holds.
type NATSAccountsResult struct {
	Config string
	// Users counts the users per account (for metrics and Events).
	Users map[string]int
	// Problems are credentials left out, each with its reason; they hold no password or hash.
	Problems []string
}

var natsUserName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)

// natsAccountRank orders the accounts: INTEGRATOR, VENDOR<v> by index, PDA_PROXY, PDA_DB,
// then every pipeline's PPS_<namespace>_<name> and every simulation's
// SDDR_SIM_<namespace>_<name> and every gateway's LOIS_<namespace>_<name> (by name); ok is false for an account the operator does not
// render.
func natsAccountRank(account string) (rank int, ok bool) {
	switch account {
	case contract.IntegratorAccount:
		return -1, true
	case pdacontract.ProxyAccount:
		return 1 << 17, true
	case pdacontract.DBAccount:
		return 1<<17 + 1, true
	}
	if rest, found := strings.CutPrefix(account, PPSAccountPrefix); found {
		return 1<<17 + 2, natsUserName.MatchString(rest)
	}
	if rest, found := strings.CutPrefix(account, SDDRSimAccountPrefix); found {
		return 1<<17 + 3, natsUserName.MatchString(rest)
	}
	if rest, found := strings.CutPrefix(account, LOISAccountPrefix); found {
		return 1<<17 + 4, natsUserName.MatchString(rest)
	}
	s, found := strings.CutPrefix(account, "VENDOR")
	v, err := strconv.Atoi(s)
	if !found || err != nil || v < 0 || v > 65535 || strconv.Itoa(v) != s {
		return 0, false
	}
	return v, true
}

// NATSSecretUsers are the users a labelled credentials Secret holds.
func NATSSecretUsers(s *corev1.Secret) ([]NATSUser, error) {
	src := s.Namespace + "/" + s.Name
	account := s.Annotations[AnnotationNATSAccount]
	if _, ok := natsAccountRank(account); !ok {
		return nil, fmt.Errorf("credentials Secret %s: annotation %s %q names no account the operator renders", src, AnnotationNATSAccount, account)
	}
	users := []NATSUser{{Account: account, Name: string(s.Data[NATSUserKey]), Password: string(s.Data[NATSPasswordKey]), Source: src}}
	if strings.HasPrefix(account, PPSAccountPrefix) {
		devices, err := ppsDeviceUsers(s, account, src)
		return append(users, devices...), err
	}
	ids := deviceIDs(s, contract.ValidDeviceID)
	if len(ids) == 0 {
		return users, nil
	}
	v, _ := natsAccountRank(account)
	if !strings.HasPrefix(account, "VENDOR") {
		return nil, fmt.Errorf("credentials Secret %s: only a vendor's or a pipeline's credentials hold device users", src)
	}
	for _, id := range ids {
		// The name is the device's: a Secret cannot hand one device's subjects to another.
		name := contract.DeviceUser(v, id)
		if u := string(s.Data[id+DeviceUserSuffix]); u != name {
			return nil, fmt.Errorf("credentials Secret %s: a device's user is not device<index>.<its id> (%s)", src, "contract.DeviceUser")
		}
		users = append(users, NATSUser{Account: account, Name: name, Password: string(s.Data[id+DevicePasswordSuffix]),
			Device: true, Permissions: contract.DevicePermissions(id), Source: src})
	}
	return users, nil
}

// deviceIDs are the device ids of a credentials Secret's <id>DevicePasswordSuffix entries that
// valid accepts, sorted.
func deviceIDs(s *corev1.Secret, valid func(string) error) []string {
	ids := make([]string, 0, len(s.Data))
	for k := range s.Data {
		if id, ok := strings.CutSuffix(k, DevicePasswordSuffix); ok && valid(id) == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// ppsDeviceUsers are a pipeline's device users: each may publish only to its own setup inbox
// and publishing subject and, if it subscribes, read only the function's output.
func ppsDeviceUsers(s *corev1.Secret, account, src string) ([]NATSUser, error) {
	var subs []string
	if a := s.Annotations[AnnotationPPSSubscribers]; a != "" {
		if err := json.Unmarshal([]byte(a), &subs); err != nil {
			return nil, fmt.Errorf("credentials Secret %s: annotation %s: %v", src, AnnotationPPSSubscribers, err)
		}
	}
	var fns []string
	if fn := s.Annotations[AnnotationPPSFn]; fn != "" {
		if err := ppscontract.ValidFnID(fn); err != nil {
			return nil, fmt.Errorf("credentials Secret %s: annotation %s: %v", src, AnnotationPPSFn, err)
		}
		fns = []string{fn}
	}
	ids := deviceIDs(s, ppscontract.ValidDeviceID)
	users := make([]NATSUser, 0, len(ids))
	for _, id := range ids {
		var pub, sub []string
		if slices.Contains(subs, id) {
			pub, sub = ppscontract.DevicePermissions(id, fns)
		} else {
			pub, sub = ppscontract.DevicePermissions(id, nil)
		}
		users = append(users, NATSUser{Account: account, Name: string(s.Data[id+PPSDeviceUserSuffix]),
			Password: string(s.Data[id+PPSDevicePasswordSuffix]), Source: src,
			Permissions: &natsx.Permissions{PublishAllow: pub, SubscribeAllow: sub}})
	}
	return users, nil
}

// NATSAccounts lays out the server's accounts from the operator's own users (first, in the
// order given) and the credentials Secrets (by namespace/name), and renders it. hash turns a
// password into what the server stores (a bcrypt hash). nats-server user names are global, so
// a name seen before is left out and reported, as is a Secret that names no known account or
// has an invalid user: one bad Secret never keeps every other party off the server.
//
// INTEGRATOR and SYS are always rendered (every vendor imports from the integrator, and the
// server needs its system account); a vendor account when it has a user; the two PDA accounts
// together (they import from each other) when either has one. Users are ordered by name
// within their account, so the same credentials always render to the same bytes.
func NATSAccounts(operator []NATSUser, secrets []corev1.Secret, hash func(user, password string) (string, error)) NATSAccountsResult {
	res := NATSAccountsResult{Users: map[string]int{}}
	all := slices.Clone(operator)
	secrets = slices.Clone(secrets)
	slices.SortFunc(secrets, func(a, b corev1.Secret) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for i := range secrets {
		us, err := NATSSecretUsers(&secrets[i])
		if err != nil {
			res.Problems = append(res.Problems, err.Error())
			continue
		}
		all = append(all, us...)
	}

	type account struct{ users, devices []natsx.User }
	accounts := map[string]*account{contract.IntegratorAccount: {}}
	seen := map[string]string{} // user name → source
	for _, u := range all {
		switch prev, dup := seen[u.Name]; {
		case !natsUserName.MatchString(u.Name):
			res.Problems = append(res.Problems, fmt.Sprintf("%s: user name %q is not a valid NATS user name", u.Source, u.Name))
			continue
		case u.Password == "":
			res.Problems = append(res.Problems, fmt.Sprintf("%s: user %s has an empty password", u.Source, u.Name))
			continue
		case dup:
			res.Problems = append(res.Problems, fmt.Sprintf("%s: user %s is already defined by %s", u.Source, u.Name, prev))
			continue
		}
		if _, ok := natsAccountRank(u.Account); !ok {
			res.Problems = append(res.Problems, fmt.Sprintf("%s: user %s: unknown account %q", u.Source, u.Name, u.Account))
			continue
		}
		h, err := hash(u.Name, u.Password)
		if err != nil {
			res.Problems = append(res.Problems, fmt.Sprintf("%s: user %s: hash password: %v", u.Source, u.Name, err))
			continue
		}
		seen[u.Name] = u.Source
		a := accounts[u.Account]
		if a == nil {
			a = &account{}
			accounts[u.Account] = a
		}
		nu := natsx.User{Name: u.Name, Password: h, Permissions: u.Permissions}
		if u.Device {
			a.devices = append(a.devices, nu)
		} else {
			a.users = append(a.users, nu)
		}
	}
	if accounts[pdacontract.ProxyAccount] != nil || accounts[pdacontract.DBAccount] != nil {
		for _, n := range []string{pdacontract.ProxyAccount, pdacontract.DBAccount} {
			if accounts[n] == nil {
				accounts[n] = &account{}
			}
		}
	}
	names := make([]string, 0, len(accounts))
	var vendors []int
	for n, a := range accounts {
		names = append(names, n)
		byName := func(x, y natsx.User) int { return cmp.Compare(x.Name, y.Name) }
		slices.SortFunc(a.users, byName)
		slices.SortFunc(a.devices, byName)
		res.Users[n] = len(a.users) + len(a.devices)
		if r, _ := natsAccountRank(n); strings.HasPrefix(n, "VENDOR") {
			vendors = append(vendors, r)
		}
	}
	slices.SortFunc(names, func(x, y string) int {
		rx, _ := natsAccountRank(x)
		ry, _ := natsAccountRank(y)
		return cmp.Or(cmp.Compare(rx, ry), cmp.Compare(x, y))
	})
	slices.Sort(vendors)

	layout := natsx.Layout{System: NATSSystemAccount}
	for _, n := range names {
		a := accounts[n]
		switch {
		case n == contract.IntegratorAccount:
			layout.Accounts = append(layout.Accounts, contract.IntegratorAccountFor(vendors, a.users))
		case n == pdacontract.ProxyAccount:
			layout.Accounts = append(layout.Accounts, pdacontract.AccountsFor(a.users, accounts[pdacontract.DBAccount].users)...)
		case n == pdacontract.DBAccount:
		case strings.HasPrefix(n, PPSAccountPrefix):
			// A pipeline's account stands alone: no export or import, so nothing of it
			// crosses to another party's account. JetStream carries the streams and the MQTT
			// sessions of its devices.
			layout.Accounts = append(layout.Accounts, natsx.Account{Name: n, JetStream: true, Users: append(a.users, a.devices...)})
		case strings.HasPrefix(n, SDDRSimAccountPrefix):
			// A simulation's account stands alone too: its shards exchange adverts with each
			// other on core NATS (no JetStream) and reach nothing else.
			layout.Accounts = append(layout.Accounts, natsx.Account{Name: n, Users: a.users})
		case strings.HasPrefix(n, LOISAccountPrefix):
			// A LOIS cloud's account stands alone, with JetStream: its session stream and
			// the registrar's store.
			layout.Accounts = append(layout.Accounts, natsx.Account{Name: n, JetStream: true, Users: a.users})
		default:
			v, _ := natsAccountRank(n)
			layout.Accounts = append(layout.Accounts, contract.VendorAccountFor(v, a.users, a.devices))
		}
	}
	layout.Accounts = append(layout.Accounts, natsx.Account{Name: NATSSystemAccount})
	res.Users[NATSSystemAccount] = 0
	res.Config = "# Rendered by the Obscura operator from the NATS credentials Secrets\n" +
		"# (label " + LabelNATSCredentials + "); edits are overwritten.\n" + layout.Render()
	return res
}

// NATSAccountsHash identifies a rendered configuration (the Secret's annotation, the
// reloader's logs).
func NATSAccountsHash(config string) string {
	sum := sha256.Sum256([]byte(config))
	return hex.EncodeToString(sum[:])
}

// NATSAccountsSecret is the Secret the nats-server mounts and includes: the rendered accounts
// under NATSAccountsKey and their hash as an annotation.
func NATSAccountsSecret(namespace, name, config string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels:      map[string]string{LabelName: "nats", LabelComponent: "nats-accounts", LabelManagedBy: ManagedBy, LabelPartOf: "obscura"},
			Annotations: map[string]string{AnnotationNATSAccountsHash: NATSAccountsHash(config)}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{NATSAccountsKey: []byte(config)},
	}
}
