package sim

import (
	"fmt"
	"math/rand/v2"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
)

// Series is one topic's values, oldest first: its publisher's round k carries Values[k].
type Series struct {
	Topic  string
	Values []pps.Fixed
}

// Dataset is a set of topics' series.
type Dataset struct {
	Name   string
	Series []Series
}

// Topic returns the series of topic, or nil.
func (d *Dataset) Topic(topic string) *Series {
	for i := range d.Series {
		if d.Series[i].Topic == topic {
			return &d.Series[i]
		}
	}
	return nil
}

// Inputs are the values of f's input slots once every series has been published in full
// (spec D9): `val` and `static` take a topic's latest value, `(window t N)` slot i the value
// i rounds before the latest. It fails if f reads a topic the dataset lacks or a window
// longer than its series.
func (d *Dataset) Inputs(f *dsl.Function) ([]pps.Fixed, error) {
	out := make([]pps.Fixed, len(f.Layout.Slots))
	for i, s := range f.Layout.Slots {
		series := d.Topic(s.Topic)
		if series == nil {
			return nil, fmt.Errorf("program reads topic %q, which dataset %s does not have", s.Topic, d.Name)
		}
		lag := 0
		if s.Source == pps.Window {
			lag = s.Lag
		}
		if lag >= len(series.Values) {
			return nil, fmt.Errorf("topic %q has %d values, the program reads %d rounds back", s.Topic, len(series.Values), lag)
		}
		out[i] = series.Values[len(series.Values)-1-lag]
	}
	return out, nil
}

// Evaluate is the plaintext model of f over the dataset with every input valid: the result
// the subscribers must unmask (dsl.Function.Model), decoded per f's output schema.
func (d *Dataset) Evaluate(f *dsl.Function) ([]pps.Fixed, error) {
	in, err := d.Inputs(f)
	if err != nil {
		return nil, err
	}
	valid := make([]bool, len(in))
	for i := range valid {
		valid[i] = true
	}
	o, err := f.Model(in, valid)
	if err != nil {
		return nil, err
	}
	return f.Decode(o)
}

// rng is a generator's seeded source: the same seed always gives the same dataset.
func rng(seed uint64, dataset string) *rand.Rand {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(dataset); i++ {
		h = (h ^ uint64(dataset[i])) * 1099511628211
	}
	return rand.New(rand.NewPCG(seed, h))
}
