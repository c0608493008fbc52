package main

import (
	"errors"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
)

func init() {
	register("simulate", runSimulate, "one shard of an encounter simulation (result: one JSON object)")
}

// runSimulate is `sddr simulate`.
func runSimulate(args []string) error {
	f := daemon.NewFlags("simulate")
	if err := daemon.ParseFlags(f, args); err != nil {
		return err
	}
	return errors.New("sddr simulate: not implemented yet")
}
