package contract

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// Account names and users of the trust domains. The integrator and every vendor are
// separate accounts; every device of vendor v connects (over MQTT) as its own restricted user
// of vendor v's account (DeviceUser).
const (
	IntegratorAccount = "INTEGRATOR"
	IntegratorUser    = "integrator"
)

// VendorAccount is the account of vendor v.
func VendorAccount(v int) string { return fmt.Sprintf("VENDOR%d", v) }

// VendorUser is the service user of vendor v (shuffler, vendor agent).
func VendorUser(v int) string { return fmt.Sprintf("vendor%d", v) }

// DeviceUser is device id's own user on vendor v's account. Every device has its own
// credential, issued with the vendor's device registry: a device holding it reaches only its
// own two subjects (DevicePermissions), and revoking the device removes its user and nothing
// else. No login is shared between devices.
func DeviceUser(v int, id string) string { return fmt.Sprintf("device%d.%s", v, id) }

// DeviceOfUser is the device id of vendor v's DeviceUser name, ok false for any other name.
func DeviceOfUser(v int, user string) (id string, ok bool) {
	id, ok = strings.CutPrefix(user, fmt.Sprintf("device%d.", v))
	return id, ok && ValidDeviceID(id) == nil
}

var deviceID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidDeviceID checks a device id of a vendor's registry: 1 to 128 of [A-Za-z0-9_-], so it
// is one subject token and one MQTT topic level (no '.', '/', wildcard or space). The error
// does not repeat the id: device ids stay out of logs and conditions.
func ValidDeviceID(id string) error {
	if !deviceID.MatchString(id) {
		return errors.New("a device id is 1 to 128 of [A-Za-z0-9_-]")
	}
	return nil
}

// Subjects crossing the boundaries. Every cross-account subject names the vendor, so the
// receiving party knows who sent it and a vendor can reach only its own slice.
//
//	mohito.v{v}.in.>        vendor v's inbox (exported by v as a service to the integrator)
//	mohito.i.in.v{v}.>      the integrator's inbox for vendor v (exported to v only)
//	mohito.r.>              integrator-internal work subjects (never exported)
//	mohito.dev.{id}.cmd     vendor → device (MQTT topic mohito/dev/{id}/cmd)
//	mohito.dev.{id}.resp    device → vendor (MQTT topic mohito/dev/{id}/resp)
func VendorInbox(v int) string { return fmt.Sprintf("mohito.v%d.in", v) }

// IntegratorInbox is the integrator's inbox prefix for messages from vendor v.
func IntegratorInbox(v int) string { return fmt.Sprintf("mohito.i.in.v%d", v) }

// DeviceCommandSubject and DeviceResponseSubject are a device's two subjects (MQTT topics
// mohito/dev/{id}/cmd and mohito/dev/{id}/resp).
func DeviceCommandSubject(id string) string  { return "mohito.dev." + id + ".cmd" }
func DeviceResponseSubject(id string) string { return "mohito.dev." + id + ".resp" }

// DeviceOfResponse is the device id of a DeviceResponseSubject, "" for any other subject.
func DeviceOfResponse(subject string) string {
	const pre, suf = "mohito.dev.", ".resp"
	if len(subject) <= len(pre)+len(suf) || subject[:len(pre)] != pre || subject[len(subject)-len(suf):] != suf {
		return ""
	}
	return subject[len(pre) : len(subject)-len(suf)]
}

// DevicePermissions restrict device id's user to its own two subjects: it receives its
// commands and publishes its responses, nothing else — not a sibling's command subject (it
// would see when a sibling is addressed), not a sibling's response subject (it could flood
// or forge in a sibling's name), no JetStream API, no inbox, no other account's subjects.
func DevicePermissions(id string) *natsx.Permissions {
	return &natsx.Permissions{PublishAllow: []string{DeviceResponseSubject(id)}, SubscribeAllow: []string{DeviceCommandSubject(id)}}
}

// IntegratorAccountFor is the integrator's account serving the vendors with the given
// indices: it exports to vendor v only v's slice of its inbox and imports v's inbox.
func IntegratorAccountFor(vendors []int, users []natsx.User) natsx.Account {
	a := natsx.Account{Name: IntegratorAccount, JetStream: true, Users: users}
	for _, v := range vendors {
		a.Exports = append(a.Exports, natsx.Export{Subject: IntegratorInbox(v) + ".>", Accounts: []string{VendorAccount(v)}})
	}
	for _, v := range vendors {
		a.Imports = append(a.Imports, natsx.Import{Account: VendorAccount(v), Subject: VendorInbox(v) + ".>"})
	}
	return a
}

// VendorAccountFor is vendor v's account: its service users and its devices' users. A device
// user gets the [DevicePermissions] of the device its name ([DeviceUser]) names, whatever it
// carried; one whose name names no device of v is left out.
func VendorAccountFor(v int, users, devices []natsx.User) natsx.Account {
	a := natsx.Account{Name: VendorAccount(v), JetStream: true,
		Exports: []natsx.Export{{Subject: VendorInbox(v) + ".>", Accounts: []string{IntegratorAccount}}},
		Imports: []natsx.Import{{Account: IntegratorAccount, Subject: IntegratorInbox(v) + ".>"}}}
	a.Users = append(a.Users, users...)
	for _, d := range devices {
		id, ok := DeviceOfUser(v, d.Name)
		if !ok {
			continue
		}
		d.Permissions = DevicePermissions(id)
		a.Users = append(a.Users, d)
	}
	return a
}

// AccountsConfig renders the nats-server accounts block for one integrator and
// len(devices) vendors, vendor v with one user per device id in devices[v] (DeviceUser).
// password(user) gives each user's password. Only the two inbox families cross an account
// boundary; everything else stays inside its account.
func AccountsConfig(devices [][]string, password func(user string) string) string {
	return AccountsLayout(devices, password).Render()
}

// AccountsLayout is the layout AccountsConfig renders, for a caller that adds accounts of its
// own (another system's) before rendering: a configuration holds one accounts block.
func AccountsLayout(devices [][]string, password func(user string) string) natsx.Layout {
	vendors := len(devices)
	users := func(names ...string) []natsx.User {
		us := make([]natsx.User, len(names))
		for i, n := range names {
			us[i] = natsx.User{Name: n, Password: password(n)}
		}
		return us
	}
	idx := make([]int, vendors)
	accounts := make([]natsx.Account, 0, vendors+1)
	for v := range vendors {
		idx[v] = v
	}
	accounts = append(accounts, IntegratorAccountFor(idx, users(IntegratorUser)))
	for v := range vendors {
		ds := make([]string, len(devices[v]))
		for i, id := range devices[v] {
			ds[i] = DeviceUser(v, id)
		}
		accounts = append(accounts, VendorAccountFor(v, users(VendorUser(v)), users(ds...)))
	}
	return natsx.Layout{Accounts: accounts}
}
