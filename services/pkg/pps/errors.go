package pps

import "errors"

// ErrMalformed: bytes from the network that do not have the shape the protocol fixes (a
// wrong length, a bad count, set padding bits). Callers count and drop such input.
var ErrMalformed = errors.New("pps: malformed message")
