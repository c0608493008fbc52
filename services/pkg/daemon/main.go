package daemon

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
)

// A Command is one subcommand of a binary.
type Command struct {
	Name string
	Run  func(args []string) error
}

// Main dispatches os.Args[1] to its command and exits: 0 on success or -h, 2 on a
// configuration error or an unknown command, 1 on any other error.
func Main(binary string, cmds []Command) {
	usage := func() {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name
		}
		fmt.Fprintf(os.Stderr, "usage: %s %s [flags]   (%s <cmd> -h for flags)\n", binary, strings.Join(names, "|"), binary)
	}
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	i := slices.IndexFunc(cmds, func(c Command) bool { return c.Name == os.Args[1] })
	if i < 0 {
		usage()
		os.Exit(2)
	}
	err := cmds[i].Run(os.Args[2:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", binary, os.Args[1], err)
		if errors.Is(err, ErrConfig) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
