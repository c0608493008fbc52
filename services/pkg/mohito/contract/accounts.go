package contract

import (
	"fmt"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// Account names and users of the trust domains. The integrator and every vendor are
// separate accounts; devices of vendor v connect (over MQTT) as a restricted user of vendor
// v's account.
const (
	IntegratorAccount = "INTEGRATOR"
	IntegratorUser    = "integrator"
)

// VendorAccount is the account of vendor v.
func VendorAccount(v int) string { return fmt.Sprintf("VENDOR%d", v) }

// VendorUser is the service user of vendor v (shuffler, vendor agent).
func VendorUser(v int) string { return fmt.Sprintf("vendor%d", v) }

// DeviceUser is the user devices of vendor v authenticate as.
func DeviceUser(v int) string { return fmt.Sprintf("device%d", v) }

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

// DevicePermissions restrict a vendor's device user to its own two MQTT topic families:
// devices receive commands and publish responses, nothing else (no JetStream API, no
// inbox, no other account's subjects).
var DevicePermissions = &natsx.Permissions{PublishAllow: []string{"mohito.dev.*.resp"}, SubscribeAllow: []string{"mohito.dev.*.cmd"}}

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

// VendorAccountFor is vendor v's account: its service users and its devices' users, which
// get [DevicePermissions] whatever they carried.
func VendorAccountFor(v int, users, devices []natsx.User) natsx.Account {
	a := natsx.Account{Name: VendorAccount(v), JetStream: true,
		Exports: []natsx.Export{{Subject: VendorInbox(v) + ".>", Accounts: []string{IntegratorAccount}}},
		Imports: []natsx.Import{{Account: IntegratorAccount, Subject: IntegratorInbox(v) + ".>"}}}
	a.Users = append(a.Users, users...)
	for _, d := range devices {
		d.Permissions = DevicePermissions
		a.Users = append(a.Users, d)
	}
	return a
}

// AccountsConfig renders the nats-server accounts block for one integrator and n vendors.
// password(user) gives each user's password. Only the two inbox families cross an account
// boundary; everything else stays inside its account.
func AccountsConfig(vendors int, password func(user string) string) string {
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
		accounts = append(accounts, VendorAccountFor(v, users(VendorUser(v)), users(DeviceUser(v))))
	}
	return natsx.Layout{Accounts: accounts}.Render()
}
