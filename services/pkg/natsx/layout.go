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
