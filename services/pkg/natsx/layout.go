package natsx

import (
	"fmt"
	"strings"
)

// A Layout is the whole accounts section of a nats-server configuration: the
// accounts, their users and the service exports and imports between them. The
// operator renders it from the parties' credentials Secrets (with bcrypt hashes
// as passwords) and the tests render it with plain passwords: both go through
// [Layout.Render], so the tests exercise the production layout.
type Layout struct {
	Accounts []Account
	// System names the system account (nats-server's system_account), "" for
	// the server's default.
	System string
}

// Account is one trust domain.
type Account struct {
	Name      string
	JetStream bool
	Users     []User
	Exports   []Export
	Imports   []Import
}

// User is one user of an account. Password is what nats-server compares the
// client's password with: a bcrypt hash ("$2a$…") or, in tests, the password.
type User struct {
	Name, Password string
	// Permissions narrow what the user may do inside its account; nil allows
	// everything the account can reach.
	Permissions *Permissions
}

// Permissions are a user's allowed publish and subscribe subjects.
type Permissions struct {
	PublishAllow, SubscribeAllow []string
}

// Export is a service export: requests on Subject from the listed accounts
// reach this account, and their replies go back.
type Export struct {
	Subject  string
	Accounts []string
}

// Import is a service import of Subject exported by Account.
type Import struct {
	Account, Subject string
}

// IntegratorAccountFor is the integrator's account serving the vendors with
// the given indices: it exports to vendor v only v's slice of its inbox and
// imports v's inbox.
func IntegratorAccountFor(vendors []int, users []User) Account {
	a := Account{Name: IntegratorAccount, JetStream: true, Users: users}
	for _, v := range vendors {
		a.Exports = append(a.Exports, Export{Subject: IntegratorInbox(v) + ".>", Accounts: []string{VendorAccount(v)}})
	}
	for _, v := range vendors {
		a.Imports = append(a.Imports, Import{Account: VendorAccount(v), Subject: VendorInbox(v) + ".>"})
	}
	return a
}

// VendorAccountFor is vendor v's account: its service users and its devices'
// users, which get [DevicePermissions] whatever they carried.
func VendorAccountFor(v int, users, devices []User) Account {
	a := Account{Name: VendorAccount(v), JetStream: true,
		Exports: []Export{{Subject: VendorInbox(v) + ".>", Accounts: []string{IntegratorAccount}}},
		Imports: []Import{{Account: IntegratorAccount, Subject: IntegratorInbox(v) + ".>"}}}
	a.Users = append(a.Users, users...)
	for _, d := range devices {
		d.Permissions = DevicePermissions
		a.Users = append(a.Users, d)
	}
	return a
}

// The PDA trust domains (spec §4.2, services/pkg/pdasvc): the proxy domain and
// the DB domain. Only three subject families cross between them, each as a
// service so a JetStream publish-ack comes back to the publisher:
//
//	pda.v1.ingest.<w>             proxy mixer → DB ingest stream (exported by PDA_DB)
//	pda.v1.reveal.req.<w>         DB shard → proxy oracle stream (exported by PDA_PROXY)
//	pda.v1.reveal.resp.<w>.<s>    proxy oracle → DB shard s (exported by PDA_DB)
const (
	PDAProxyAccount = "PDA_PROXY"
	PDADBAccount    = "PDA_DB"
)

// PDAAccountsFor are the two PDA accounts with their users.
func PDAAccountsFor(proxy, db []User) []Account {
	return []Account{
		{Name: PDAProxyAccount, JetStream: true, Users: proxy,
			Exports: []Export{{Subject: "pda.v1.reveal.req.>", Accounts: []string{PDADBAccount}}},
			Imports: []Import{{Account: PDADBAccount, Subject: "pda.v1.ingest.>"}, {Account: PDADBAccount, Subject: "pda.v1.reveal.resp.>"}}},
		{Name: PDADBAccount, JetStream: true, Users: db,
			Exports: []Export{{Subject: "pda.v1.ingest.>", Accounts: []string{PDAProxyAccount}}, {Subject: "pda.v1.reveal.resp.>", Accounts: []string{PDAProxyAccount}}},
			Imports: []Import{{Account: PDAProxyAccount, Subject: "pda.v1.reveal.req.>"}}},
	}
}

// Render writes the layout in nats-server configuration syntax, in the order
// given: the same layout always renders to the same bytes. Every string is
// quoted, so a name or hash can never be read as a variable or a keyword.
func (l Layout) Render() string {
	var b strings.Builder
	if l.System != "" {
		fmt.Fprintf(&b, "system_account: %q\n", l.System)
	}
	b.WriteString("accounts {\n")
	for _, a := range l.Accounts {
		fmt.Fprintf(&b, "  %q: {\n", a.Name)
		if a.JetStream {
			b.WriteString("    jetstream: enabled\n")
		}
		if len(a.Users) > 0 {
			b.WriteString("    users: [\n")
			for _, u := range a.Users {
				fmt.Fprintf(&b, "      {user: %q, password: %q", u.Name, u.Password)
				if p := u.Permissions; p != nil {
					fmt.Fprintf(&b, ", permissions: {publish: {allow: %s}, subscribe: {allow: %s}}", quoteList(p.PublishAllow), quoteList(p.SubscribeAllow))
				}
				b.WriteString("}\n")
			}
			b.WriteString("    ]\n")
		}
		if len(a.Exports) > 0 {
			b.WriteString("    exports: [\n")
			for _, e := range a.Exports {
				fmt.Fprintf(&b, "      {service: %q, accounts: %s}\n", e.Subject, quoteList(e.Accounts))
			}
			b.WriteString("    ]\n")
		}
		if len(a.Imports) > 0 {
			b.WriteString("    imports: [\n")
			for _, i := range a.Imports {
				fmt.Fprintf(&b, "      {service: {account: %q, subject: %q}}\n", i.Account, i.Subject)
			}
			b.WriteString("    ]\n")
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return b.String()
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
