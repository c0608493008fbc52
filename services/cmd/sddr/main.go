// Command sddr runs the SDDR secure-encounter tools and services
// (shared/specs/sddr.md). Its subcommands live one per file and register themselves in
// init() with register(name, run, summary):
//
//	sddr simulate   one shard of an encounter simulation (simulate.go)
//
// Every flag --x-y falls back to OBSCURA_X_Y (package daemon); secrets come from files only,
// never from flags or variables. A configuration error (a bad flag, a malformed environment
// value, an invalid setting, an unreadable secret file) exits with status 2; any other
// failure exits with status 1.
package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
)

// subcommand is one registered subcommand.
type subcommand struct {
	name, summary string
	run           func(args []string) error
}

var registry = map[string]subcommand{}

// register adds a subcommand; each subcommand's file calls it from init(). A duplicate name
// is a programming error and panics at start.
func register(name string, run func(args []string) error, summary string) {
	if _, dup := registry[name]; dup {
		panic("sddr: subcommand " + name + " registered twice")
	}
	registry[name] = subcommand{name: name, summary: summary, run: run}
}

// commands lists the registered subcommands in name order.
func commands() []subcommand {
	out := make([]subcommand, 0, len(registry))
	for _, c := range registry {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func main() {
	cmds := commands()
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Fprintln(os.Stderr, "usage: sddr <command> [flags]   (sddr <command> -h for flags)")
		for _, c := range cmds {
			fmt.Fprintf(os.Stderr, "  %-12s %s\n", c.name, c.summary)
		}
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		os.Exit(0)
	}
	dc := make([]daemon.Command, len(cmds))
	for i, c := range cmds {
		dc[i] = daemon.Command{Name: c.name, Run: c.run}
	}
	daemon.Main("sddr", dc)
}
