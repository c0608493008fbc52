package roles

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// ErrDeployment wraps every error of ParseDeployment and LoadDeployment.
var ErrDeployment = errors.New("invalid deployment file")

var seriesName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,63}$`)

// LoadDeployment reads and parses the deployment JSON at path.
func LoadDeployment(path string) (Deployment, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Deployment{}, fmt.Errorf("%w: %w", ErrDeployment, err)
	}
	d, err := ParseDeployment(b)
	if err != nil {
		return Deployment{}, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// ParseDeployment decodes the deployment JSON strictly (unknown fields and
// trailing data are errors), validates it and maps it to a Deployment.
func ParseDeployment(b []byte) (Deployment, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f contract.DeploymentFile
	if err := dec.Decode(&f); err != nil {
		return Deployment{}, fmt.Errorf("%w: decode: %w", ErrDeployment, err)
	}
	if dec.More() {
		return Deployment{}, fmt.Errorf("%w: trailing data after the JSON object", ErrDeployment)
	}
	d, err := deploymentFrom(&f)
	if err != nil {
		return Deployment{}, fmt.Errorf("%w: %w", ErrDeployment, err)
	}
	return d, nil
}

// Deployment validates f and maps it to the services' Deployment.
func deploymentFrom(f *contract.DeploymentFile) (Deployment, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !seriesName.MatchString(f.Series) {
		bad("series %q must be 1–63 letters, digits, '-' or '_'", f.Series)
	}
	p := mohito.Params{Vendors: len(f.Vendors), Q: f.CommandsPerUser, CommandSize: f.CommandSize, ResponseSize: f.ResponseSize}
	switch f.Mode {
	case "", "Hardened":
		p.ResponseMode = mohito.ResponseHardened
	case "PaperLiteral":
		bad("mode PaperLiteral is a benchmark-only response path that leaks the real per-vendor counts (spec G1); the services do not serve it (use the mohito package benchmarks)")
	default:
		bad("mode %q must be Hardened or PaperLiteral", f.Mode)
	}
	switch f.Suite {
	case "", "X25519":
		p.Suite = mohito.SuiteX25519
	case "MLKEM768X25519":
		p.Suite = mohito.SuiteMLKEM768X25519
	default:
		bad("suite %q must be X25519 or MLKEM768X25519", f.Suite)
	}
	if p.Q == 0 {
		p.Q = 1
	}
	if f.AsyncWindow != 0 {
		bad("asyncWindow %d: asynchronous responses (spec App. A) are not served by the round services yet; use 0", f.AsyncWindow)
	}
	fixed := false
	switch f.CapacityDraw {
	case "", "Random":
	case "Fixed":
		fixed = true
	default:
		bad("capacityDraw %q must be Random or Fixed", f.CapacityDraw)
	}
	dur := func(name, s string) time.Duration {
		v, err := time.ParseDuration(s)
		if err != nil || v <= 0 {
			bad("%s %q must be a positive Go duration such as \"2s\" or \"1500ms\"", name, s)
		}
		return v
	}
	d := Deployment{
		Series:           f.Series,
		Params:           p,
		Delta:            f.Delta,
		Quantum:          f.ResponseQuantum,
		OutBatch:         f.OutBatch,
		Encoders:         f.Encoders,
		Round:            dur("period", f.Period),
		ShufflerTimeout:  dur("shufflerTimeout", f.ShufflerTimeout),
		ResponseDeadline: dur("responseDeadline", f.ResponseDeadline),
	}
	if f.DeviceAnswerAfter != "" {
		d.DeviceAnswerAfter = dur("deviceAnswerAfter", f.DeviceAnswerAfter)
	}
	maxPercent := 100
	if c := f.CapacityClasses; c != nil {
		if err := c.Validate(d.Round); err != nil {
			errs = append(errs, err)
		} else {
			hold, _ := c.HoldDuration()
			d.Classes = &CapacityClasses{Percent: c.Percent, Hold: hold, BurstRate: c.BurstRate, LowerFakeRatio: c.LowerFakeRatio}
			maxPercent = c.MaxPercent()
		}
	}
	if len(f.Vendors) == 0 {
		bad("vendors must list at least one vendor")
	}
	for i, v := range f.Vendors {
		if v.Index != i {
			bad("vendors must be sorted by index with indices 0..%d contiguous: entry %d has index %d", len(f.Vendors)-1, i, v.Index)
			continue
		}
		if v.Devices < 0 {
			bad("vendor %d: devices %d is negative", i, v.Devices)
		}
		width := v.Jitter
		if fixed {
			width = 0
		}
		// K_v must cover the largest C_v the draw can produce, in the largest capacity class
		// (G3b: the table size then never depends on C_v or the class).
		if maxC := contract.ScaledBase(v.Base, maxPercent) + f.Delta + width; v.PaddedEntries < 1 || uint64(v.PaddedEntries) < maxC {
			bad("vendor %d: paddedEntries %d must be ≥ base × %d%% + delta + jitter = %d", i, v.PaddedEntries, maxPercent, maxC)
		}
		if v.ResponsePaddedEntries < 0 {
			bad("vendor %d: responsePaddedEntries %d is negative", i, v.ResponsePaddedEntries)
		}
		d.Policy = append(d.Policy, mohito.TargetPolicy{Base: v.Base, Width: width})
		d.Capacity = append(d.Capacity, v.PaddedEntries)
		w := v.Devices
		if v.ShufflerWeight != nil {
			if w = *v.ShufflerWeight; w < 0 {
				bad("vendor %d: shufflerWeight %d is negative", i, w)
			}
		}
		d.Weights = append(d.Weights, w)
		d.VendorNames = append(d.VendorNames, v.Name)
		d.ResponseCapacity = append(d.ResponseCapacity, v.ResponsePaddedEntries)
	}
	if len(errs) == 0 {
		if err := d.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return Deployment{}, errors.Join(errs...)
	}
	return d, nil
}
