package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// Mode names of a function's input mode (the SecurePipeline's spec.mode).
const (
	ModeFaithful = "faithful" // the paper's protocol: labels per bit, identity gates, consistency check
	ModeHardened = "hardened" // H1 (D21): masked values, OT extension, no identity gates
)

// Consistency checks of a faithful function (the SecurePipeline's spec.check, the broker's
// --check default): the KKRT batched OPRF over a base-OT session (D16b, the default) or the
// OPRF-PSI on circl (D16a), 300–400× slower.
const (
	CheckKKRT = "kkrt"
	CheckOPRF = "oprf"
)

// PipelinesFile is the file both the broker and the garbler read their functions from (the
// operator renders it into a ConfigMap from the SecurePipeline resources; `obscura demo` and
// the tests write it directly). Each party takes what it needs: the garbler never learns a
// subscriber's or a publisher's network address, only device ids.
type PipelinesFile struct {
	Pipelines []Pipeline `json:"pipelines"`
}

// Pipeline is one SecurePipeline: one function, its publishers and subscribers.
type Pipeline struct {
	// Name is the SecurePipeline's namespace/name, for logs, metrics and status.
	Name string `json:"name"`
	// Source is the function's DSL program (D10). Its fnid is dsl.Function.ID.
	Source string `json:"source"`
	// Mode is ModeFaithful or ModeHardened.
	Mode string `json:"mode"`
	// Check is the consistency check of a faithful function: CheckKKRT, CheckOPRF, or empty
	// for the broker's default. A hardened function has none (it must be empty).
	Check string `json:"check,omitempty"`
	// Publishers maps every topic the program reads ((val "<topic>"), (window ...),
	// (static ...)) to the device id of its publisher.
	Publishers []PipelinePublisher `json:"publishers"`
	// Subscribers are the device ids allowed to subscribe to the output (the broker's ACL,
	// D14); removing one revokes it (new key epoch).
	Subscribers []string `json:"subscribers"`
	// Window is t: how long after the schedule tick inputs are collected (D15).
	Window Duration `json:"window"`
	// Schedule is the interval between executions (D15).
	Schedule Duration `json:"schedule"`
	// SeedTTL bounds how long the garbler retains round seeds for this function (D8); zero
	// means 26 h.
	SeedTTL Duration `json:"seedTTL,omitempty"`
}

// PipelinePublisher binds a program topic to a publisher.
type PipelinePublisher struct {
	Topic    string `json:"topic"`
	DeviceID string `json:"deviceID"`
}

// Duration is a time.Duration written as a Go duration string ("5s", "24h").
type Duration struct{ time.Duration }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// Validate checks the pipeline's shape (the program itself is compiled by the roles).
func (p *Pipeline) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("pipeline %q: "+format, append([]any{p.Name}, a...)...))
	}
	if p.Name == "" {
		bad("no name")
	}
	if p.Source == "" {
		bad("no source")
	}
	if p.Mode != ModeFaithful && p.Mode != ModeHardened {
		bad("mode %q, want %q or %q", p.Mode, ModeFaithful, ModeHardened)
	}
	switch {
	case p.Check != "" && p.Check != CheckKKRT && p.Check != CheckOPRF:
		bad("check %q, want %q, %q or empty", p.Check, CheckKKRT, CheckOPRF)
	case p.Check != "" && p.Mode == ModeHardened:
		bad("check %q: a hardened function has no consistency check (D21)", p.Check)
	}
	if p.Window.Duration <= 0 || p.Schedule.Duration <= 0 {
		bad("window %s and schedule %s must be positive", p.Window, p.Schedule)
	}
	if p.SeedTTL.Duration < 0 {
		bad("seedTTL %s is negative", p.SeedTTL)
	}
	topics := map[string]bool{}
	for _, pub := range p.Publishers {
		if pub.Topic == "" || topics[pub.Topic] {
			bad("publisher topic %q is empty or repeated", pub.Topic)
		}
		topics[pub.Topic] = true
		if err := ValidDeviceID(pub.DeviceID); err != nil {
			bad("topic %q: %v", pub.Topic, err)
		}
	}
	subs := map[string]bool{}
	for _, s := range p.Subscribers {
		if err := ValidDeviceID(s); err != nil {
			bad("subscriber: %v", err)
		}
		if subs[s] {
			bad("subscriber %s listed twice", s)
		}
		subs[s] = true
	}
	return errors.Join(errs...)
}

// ReadPipelines reads and validates a pipelines file.
func ReadPipelines(path string) (*PipelinesFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f PipelinesFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	names := map[string]bool{}
	var errs []error
	for i := range f.Pipelines {
		p := &f.Pipelines[i]
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("pipeline %q listed twice", p.Name))
		}
		names[p.Name] = true
		errs = append(errs, p.Validate())
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}
