package sddr

import (
	"time"

	"github.com/obscura-iot/obscura/services/pkg/sddr/bloom"
)

// Frame geometry of the "SDDR-v1" byte-aligned beacon (spec §3.11) for the x25519 profile.
const (
	FrameSize     = 240                                    // BT2.1 EIR payload, always exactly this long
	headerSize    = 4                                      // eir_len, eir_type, version/flags, count
	PublicKeySize = 32                                     // X25519 u-coordinate
	FilterBytes   = FrameSize - headerSize - PublicKeySize // 204
	FilterBits    = 8 * FilterBytes                        // M = 1632

	eirLen  = 0xEF // 239: covers type + data
	eirType = 0xFF // manufacturer-specific
	Version = 1    // high nibble of byte 2

	// FlagInfrastructure marks a fixed infrastructure node (bit 0 of byte 2).
	FlagInfrastructure = 0x01
)

// Protocol sizes ([REC] defaults, §4).
const (
	LinkValueSize    = 32
	KeySize          = 32
	EncounterIDSize  = 16
	NonceSize        = 16
	BloomK           = 4
	MaxAdvertised    = 256 // Bloom padding target N
	MaxNewPerInquiry = 255 // BT2.1 inquiry bound (§7 item 20)
)

// BloomParams is the filter geometry of the x25519 frame: M = 1632, K = 4, N = 256, single
// beacon P_fp = 0.04722 (§3.6).
var BloomParams = bloom.Params{M: FilterBits, K: BloomK, N: MaxAdvertised}

// Timing defaults ([REC] §4).
const (
	DefaultEpoch       = 15 * time.Minute
	DefaultEpochJitter = 60 * time.Second
	DefaultInterval    = 60 * time.Second
)
