package ot

import "errors"

var (
	// ErrMalformed: bytes from the network that do not have the shape a message fixes (a
	// wrong length, type or version, a bad count, a point that does not decode). Callers
	// count and drop such input.
	ErrMalformed = errors.New("ot: malformed message")
	// ErrSession: a message of another session.
	ErrSession = errors.New("ot: message of another session")
	// ErrOutOfOrder: an extension batch whose offset is not the next one of the session
	// (a replay, a lost batch or batches reordered). Batches of a session run in order.
	ErrOutOfOrder = errors.New("ot: batch out of order")
	// ErrBatchUsed: a batch's outputs were already taken. A batch's OTs are used once.
	ErrBatchUsed = errors.New("ot: batch already used")
)
