package roles

import (
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

// FuzzBrokerCheckPublish feeds the publish ingest's decoder arbitrary subjects and bodies:
// it never panics, and what it accepts is a known device's message with one value per topic
// bound to it and whole labels.
func FuzzBrokerCheckPublish(f *testing.F) {
	devs := []*btDevice{newBTDevice(f, 0), newBTDevice(f, 1)}
	p := btPipeline("ns/sum", "sum", devs, nil, 0, time.Second, time.Second)
	set, err := compileBrokerPipelines([]contract.Pipeline{p})
	if err != nil {
		f.Fatal(err)
	}
	var seed pps.Seed
	good := btPublish(1, pps.PublishLabels(&seed, []pps.Fixed{3}))
	f.Add(contract.PubSubject(devs[0].id), good)
	f.Add(contract.PubSubject(devs[1].id), btPublish(2, pps.PublishLabels(&seed, []pps.Fixed{3, 4})))
	f.Add("pps.pub.x", good)
	f.Add(contract.PubSubject(devs[0].id), []byte(`{"v":1,"round":1,"masked":"AAAAAA=="}`))
	f.Add(contract.PubSubject(devs[0].id), []byte(`{"v":1,"round":1,"labels":"","x":1}`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		id, msg, reason, err := set.checkPublish(subject, data)
		if err != nil {
			if reason == "" {
				t.Fatalf("rejection without a reason: %v", err)
			}
			return
		}
		if msg == nil || len(set.topics[id]) == 0 || msg.Values() != len(set.topics[id]) ||
			len(msg.Labels) != msg.Values()*contract.LabelBytesPerValue || len(msg.Masked) != 0 {
			t.Fatalf("accepted %q %q", subject, data)
		}
	})
}
