// Package ppsrun drives one execution of a PPS pipeline from the devices' side, as the cluster
// e2e and e2e/pps both need it: a publisher per topic the program reads, each publishing its
// series of the simulator's parking dataset (one round per value), and a subscriber whose
// decoded output is compared with the plaintext model over the published values.
package ppsrun

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/client"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	"github.com/obscura-iot/obscura/services/pkg/pps/sim"
)

// Publisher is one device publishing one topic's series.
type Publisher struct {
	Topic  string
	Key    ed25519.PrivateKey
	Values []pps.Fixed
}

// ID is the publisher's device id.
func (p *Publisher) ID() string { return contract.DeviceID(p.Key.Public().(ed25519.PublicKey)) }

// Fleet is a program's devices with fresh keys and the values they will publish.
type Fleet struct {
	Fn         *dsl.Function
	Publishers []Publisher
	Subscriber ed25519.PrivateKey
	// Want is the plaintext model's output over the published values, every input valid.
	Want []pps.Fixed
}

// NewFleet compiles source and binds the topics it reads, in the program's order, to the
// series of sim.Parking(seed) (nine lots × 288 five-minute counts), each with a fresh device.
func NewFleet(source string, seed uint64) (*Fleet, error) {
	fn, err := dsl.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("compile the pipeline's program: %w", err)
	}
	parking := sim.Parking(seed)
	ds := &sim.Dataset{Name: "parking"}
	f := &Fleet{Fn: fn}
	for _, s := range fn.Layout.Slots {
		if ds.Topic(s.Topic) != nil {
			continue
		}
		i := len(ds.Series)
		if i >= len(parking.Series) {
			return nil, fmt.Errorf("the program reads more than the %d topics of the parking dataset", len(parking.Series))
		}
		ds.Series = append(ds.Series, sim.Series{Topic: s.Topic, Values: parking.Series[i].Values})
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		f.Publishers = append(f.Publishers, Publisher{Topic: s.Topic, Key: key, Values: parking.Series[i].Values})
	}
	if f.Want, err = ds.Evaluate(fn); err != nil {
		return nil, err
	}
	if _, f.Subscriber, err = ed25519.GenerateKey(rand.Reader); err != nil {
		return nil, err
	}
	return f, nil
}

// SubscriberID is the subscriber's device id.
func (f *Fleet) SubscriberID() string {
	return contract.DeviceID(f.Subscriber.Public().(ed25519.PublicKey))
}

// Bind returns pipeline with the fleet's devices: each publisher on its topic, the subscriber.
func (f *Fleet) Bind(p contract.Pipeline) (contract.Pipeline, error) {
	p.Publishers = nil
	for _, pub := range f.Publishers {
		p.Publishers = append(p.Publishers, contract.PipelinePublisher{Topic: pub.Topic, DeviceID: pub.ID()})
	}
	p.Subscribers = []string{f.SubscriberID()}
	return p, p.Validate()
}

// Run subscribes, sets every publisher up and publishes its whole series, then waits for an
// output over every slot and checks it against Want. options gives a device's MQTT settings
// (its user and password file); garbler is the key the devices pin. It returns the output.
//
// schedule is the pipeline's, whose window must be as long: publishing starts just after a
// tick (ticks are the multiples of the schedule since the Unix epoch, as the broker's
// scheduler has them), so that a series published within one period lands between two ticks.
// No tick then evaluates part of a day (each such execution costs a whole consistency check),
// the next tick sees every round, and the one after sees none (⊥, which costs nothing).
func (f *Fleet) Run(ctx context.Context, garbler ed25519.PublicKey, schedule time.Duration, options func(deviceID string) client.Options) (*client.Output, error) {
	sd := client.Device{Key: f.Subscriber, Garbler: garbler}
	sub, err := client.DialSubscriber(ctx, sd, client.SubscriberOptions{Options: options(sd.ID())})
	if err != nil {
		return nil, fmt.Errorf("dial the subscriber: %w", err)
	}
	defer sub.Close()
	feed, err := sub.Subscribe(ctx, f.Fn)
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", f.Fn.ID, err)
	}

	var pubs []*client.Publisher
	defer func() {
		for _, p := range pubs {
			p.Close()
		}
	}()
	for _, p := range f.Publishers {
		pub, err := setUp(ctx, p, garbler, f.Fn.ID, options)
		if err != nil {
			return nil, err
		}
		pubs = append(pubs, pub)
	}
	now := time.Now()
	select {
	case <-time.After(now.Truncate(schedule).Add(schedule).Sub(now)):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	errs := make(chan error, len(pubs))
	for i, pub := range pubs {
		go func() { errs <- publish(ctx, pub, f.Publishers[i]) }()
	}
	for range pubs {
		if err := <-errs; err != nil {
			return nil, err
		}
	}

	// Ticks that fell while the series were still arriving miss rounds (their slots are
	// nullified); the first tick after the last round has every slot.
	slots := len(f.Fn.Layout.Slots)
	for {
		o, err := feed.Next(ctx)
		if err != nil {
			return nil, fmt.Errorf("waiting for an execution over all %d slots: %w", slots, err)
		}
		if o.Insufficient || o.Valid < slots {
			continue
		}
		if !slices.Equal(o.Values, f.Want) {
			return o, fmt.Errorf("output %v (round %d, %d valid slots), want the plaintext model's %v",
				floats(o.Values), o.Round, o.Valid, floats(f.Want))
		}
		return o, nil
	}
}

func setUp(ctx context.Context, p Publisher, garbler ed25519.PublicKey, fn string, options func(string) client.Options) (*client.Publisher, error) {
	d := client.Device{Key: p.Key, Garbler: garbler}
	pub, err := client.DialPublisher(ctx, d, client.PublisherOptions{Options: options(d.ID())})
	if err != nil {
		return nil, fmt.Errorf("dial publisher of %s: %w", p.Topic, err)
	}
	if err := pub.Setup(ctx, contract.Policy{Fns: []string{fn}}); err != nil {
		pub.Close()
		return nil, fmt.Errorf("set up publisher of %s: %w", p.Topic, err)
	}
	return pub, nil
}

func publish(ctx context.Context, pub *client.Publisher, p Publisher) error {
	for i, v := range p.Values {
		if _, err := pub.Publish(ctx, []pps.Fixed{v}); err != nil {
			return errors.Join(fmt.Errorf("publish value %d of %s", i, p.Topic), err)
		}
	}
	return nil
}

func floats(v []pps.Fixed) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x.Float64()
	}
	return out
}
