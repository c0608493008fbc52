package natsx

import (
	"fmt"
	"strings"
)

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

// AccountsConfig renders the nats-server accounts block for one integrator
// and n vendors. password(user) gives each user's password. Only the two
// inbox families cross an account boundary; everything else stays inside its
// account.
func AccountsConfig(vendors int, password func(user string) string) string {
	var b strings.Builder
	b.WriteString("accounts {\n")
	fmt.Fprintf(&b, "  %s: {\n    jetstream: enabled\n    users: [{user: %q, password: %q}]\n", IntegratorAccount, IntegratorUser, password(IntegratorUser))
	b.WriteString("    exports: [\n")
	for v := range vendors {
		fmt.Fprintf(&b, "      {service: %q, accounts: [%s]}\n", IntegratorInbox(v)+".>", VendorAccount(v))
	}
	b.WriteString("    ]\n    imports: [\n")
	for v := range vendors {
		fmt.Fprintf(&b, "      {service: {account: %s, subject: %q}}\n", VendorAccount(v), VendorInbox(v)+".>")
	}
	b.WriteString("    ]\n  }\n")
	for v := range vendors {
		fmt.Fprintf(&b, "  %s: {\n    jetstream: enabled\n", VendorAccount(v))
		fmt.Fprintf(&b, "    users: [\n      {user: %q, password: %q}\n", VendorUser(v), password(VendorUser(v)))
		fmt.Fprintf(&b, "      {user: %q, password: %q, permissions: {publish: {allow: [\"mohito.dev.*.resp\"]}, subscribe: {allow: [\"mohito.dev.*.cmd\"]}}}\n    ]\n",
			DeviceUser(v), password(DeviceUser(v)))
		fmt.Fprintf(&b, "    exports: [{service: %q, accounts: [%s]}]\n", VendorInbox(v)+".>", IntegratorAccount)
		fmt.Fprintf(&b, "    imports: [{service: {account: %s, subject: %q}}]\n  }\n", IntegratorAccount, IntegratorInbox(v)+".>")
	}
	b.WriteString("}\n")
	return b.String()
}
