package sim

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
)

// PipelineOptions shape the contract.Pipeline that NewPipeline builds.
type PipelineOptions struct {
	// Name is the pipeline's name; empty means "<dataset>-<fnid prefix>".
	Name string
	// Mode is contract.ModeFaithful (the default) or contract.ModeHardened.
	Mode string
	// Window and Schedule are the function's t and interval (D15); zero means 5 s and 1 min.
	Window, Schedule time.Duration
	// Subscribers are the device ids allowed to subscribe.
	Subscribers []string
	// Rand draws the publishers' Ed25519 keys; nil means crypto/rand.
	Rand io.Reader
}

// Publisher is one simulated publisher: its device key, the program topic it feeds and the
// values it publishes, oldest first, one per round.
type Publisher struct {
	Topic  string
	Key    ed25519.PrivateKey
	Values []pps.Fixed
}

// ID is the publisher's device id.
func (p *Publisher) ID() string { return contract.DeviceID(p.Key.Public().(ed25519.PublicKey)) }

// Pipeline is a dataset wired to a program: the contract.Pipeline the broker and the
// garbler read, the compiled function, and one publisher per topic the program reads.
type Pipeline struct {
	Contract   contract.Pipeline
	Function   *dsl.Function
	Publishers []Publisher
	// Want is the function's output once every publisher has published its series: the
	// plaintext model's result the subscribers must unmask.
	Want []pps.Fixed
}

// NewPipeline compiles program and builds the pipeline over ds: a fresh device identity per
// topic the program reads (in the order of the program's inputs), each publishing that
// topic's series.
func NewPipeline(ds *Dataset, program string, o PipelineOptions) (*Pipeline, error) {
	f, err := dsl.Compile(program)
	if err != nil {
		return nil, fmt.Errorf("compile the %s program: %w", ds.Name, err)
	}
	want, err := ds.Evaluate(f)
	if err != nil {
		return nil, err
	}
	rnd := o.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	p := &Pipeline{Function: f, Want: want, Contract: contract.Pipeline{
		Name: o.Name, Source: f.Source, Mode: o.Mode,
		Window:      contract.Duration{Duration: o.Window},
		Schedule:    contract.Duration{Duration: o.Schedule},
		Subscribers: slices.Clone(o.Subscribers),
	}}
	if p.Contract.Name == "" {
		p.Contract.Name = ds.Name + "-" + f.ID[:8]
	}
	if p.Contract.Mode == "" {
		p.Contract.Mode = contract.ModeFaithful
	}
	if p.Contract.Window.Duration == 0 {
		p.Contract.Window.Duration = 5 * time.Second
	}
	if p.Contract.Schedule.Duration == 0 {
		p.Contract.Schedule.Duration = time.Minute
	}
	seen := map[string]bool{}
	for _, s := range f.Layout.Slots {
		if seen[s.Topic] {
			continue
		}
		seen[s.Topic] = true
		_, key, err := ed25519.GenerateKey(rnd)
		if err != nil {
			return nil, fmt.Errorf("publisher key for %s: %w", s.Topic, err)
		}
		pub := Publisher{Topic: s.Topic, Key: key, Values: ds.Topic(s.Topic).Values}
		p.Publishers = append(p.Publishers, pub)
		p.Contract.Publishers = append(p.Contract.Publishers, contract.PipelinePublisher{Topic: s.Topic, DeviceID: pub.ID()})
	}
	if err := p.Contract.Validate(); err != nil {
		return nil, errors.Join(errors.New("sim pipeline"), err)
	}
	return p, nil
}
