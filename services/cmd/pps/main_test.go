package main

import (
	"testing"

	"github.com/obscura-iot/obscura/services/testenv"
)

// ppsBin is the pps binary built once for this package's tests.
var ppsBin string

func TestMain(m *testing.M) {
	testenv.RunWithBinary(m, "github.com/obscura-iot/obscura/services/cmd/pps", &ppsBin)
}
