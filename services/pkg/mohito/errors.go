package mohito

import "errors"

// Sentinel errors. Every decoder of bytes that arrive from the network returns
// one of these (possibly wrapped); callers branch with errors.Is and count them.
var (
	// ErrSize: an envelope does not have the fixed size its kind and the round
	// parameters prescribe.
	ErrSize = errors.New("mohito: wrong envelope size")
	// ErrKind: unknown protocol version or an envelope of another kind.
	ErrKind = errors.New("mohito: wrong envelope version or kind")
	// ErrRound: the envelope names another round (closed, future or unknown).
	ErrRound = errors.New("mohito: wrong round")
	// ErrNonCanonical: a field element or index is out of range.
	ErrNonCanonical = errors.New("mohito: non-canonical encoding")
	// ErrDecrypt: an HPKE or AEAD layer failed to open.
	ErrDecrypt = errors.New("mohito: decryption failed")
	// ErrRateLimit: a user submitted more than q commands in a round (spec O1).
	ErrRateLimit = errors.New("mohito: more than q commands this round")
	// ErrRoundClosed: a submission or forward after the round was closed.
	ErrRoundClosed = errors.New("mohito: round closed")
	// ErrRoundOpen: an operation that needs a closed round (spec G7: no
	// shuffler output before close).
	ErrRoundOpen = errors.New("mohito: round not closed")
	// ErrPhase: a stage was called out of order.
	ErrPhase = errors.New("mohito: protocol step out of order")
	// ErrIndex: a message index is out of range or was already used.
	ErrIndex = errors.New("mohito: bad message index")
	// ErrReplay: a device saw this command id before or its timestamp is
	// outside the accepted window (spec O14).
	ErrReplay = errors.New("mohito: replayed or stale command")
	// ErrPayloadTooLarge: a payload does not fit the padded plaintext.
	ErrPayloadTooLarge = errors.New("mohito: payload too large")
	// ErrParams: invalid configuration.
	ErrParams = errors.New("mohito: invalid parameters")
	// ErrNoCommand: a device slot carried no command for this device (the
	// normal case for most slots; it is not an attack).
	ErrNoCommand = errors.New("mohito: no command in slot")
	// ErrTableShape: an OKVS from the network has the wrong value size or
	// capacity for its role.
	ErrTableShape = errors.New("mohito: OKVS table has the wrong shape")
	// ErrLateWindow: a late response or retained state for a round that is
	// outside the asynchronous window W (spec App. A, O15); the response is
	// dropped, never delivered.
	ErrLateWindow = errors.New("mohito: round outside the asynchronous window")
)
