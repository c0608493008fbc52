package natsx

import "fmt"

// Account names and users of the trust domains. The integrator and every
// vendor are separate accounts (spec §10); devices of vendor v connect (over
// MQTT) as a restricted user of vendor v's account.
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

// Subjects crossing the boundaries. Every cross-account subject names the
// vendor, so the receiving party knows who sent it and a vendor can reach
// only its own slice.
//
//	mohito.v{v}.in.>        vendor v's inbox (exported by v as a service to the integrator)
//	mohito.i.in.v{v}.>      the integrator's inbox for vendor v (exported to v only)
//	mohito.r.>              integrator-internal work subjects (never exported)
//	mohito.dev.{id}.cmd     vendor → device (MQTT topic mohito/dev/{id}/cmd)
//	mohito.dev.{id}.resp    device → vendor (MQTT topic mohito/dev/{id}/resp)
func VendorInbox(v int) string { return fmt.Sprintf("mohito.v%d.in", v) }

// IntegratorInbox is the integrator's inbox prefix for messages from vendor v.
func IntegratorInbox(v int) string { return fmt.Sprintf("mohito.i.in.v%d", v) }

// DevicePermissions restrict a vendor's device user to its own two MQTT
// topic families: devices receive commands and publish responses, nothing else
// (no JetStream API, no inbox, no other account's subjects).
var DevicePermissions = &Permissions{PublishAllow: []string{"mohito.dev.*.resp"}, SubscribeAllow: []string{"mohito.dev.*.cmd"}}

// AccountsConfig renders the nats-server accounts block for one integrator
// and n vendors. password(user) gives each user's password. Only the two
// inbox families cross an account boundary; everything else stays inside its
// account.
func AccountsConfig(vendors int, password func(user string) string) string {
	users := func(names ...string) []User {
		us := make([]User, len(names))
		for i, n := range names {
			us[i] = User{Name: n, Password: password(n)}
		}
		return us
	}
	idx := make([]int, vendors)
	accounts := make([]Account, 0, vendors+1)
	for v := range vendors {
		idx[v] = v
	}
	accounts = append(accounts, IntegratorAccountFor(idx, users(IntegratorUser)))
	for v := range vendors {
		accounts = append(accounts, VendorAccountFor(v, users(VendorUser(v)), users(DeviceUser(v))))
	}
	return Layout{Accounts: accounts}.Render()
}
