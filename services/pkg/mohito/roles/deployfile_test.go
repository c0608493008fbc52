package roles

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
)

func TestLoadDeploymentGolden(t *testing.T) {
	d, err := LoadDeployment("testdata/deployment.json")
	if err != nil {
		t.Fatal(err)
	}
	want := Deployment{
		Series:           "home",
		Params:           mohito.Params{Vendors: 1, Q: 1, CommandSize: 1024, ResponseSize: 1024, Suite: mohito.SuiteX25519},
		Policy:           []mohito.TargetPolicy{{Base: 147, Width: 32}},
		Delta:            100,
		Capacity:         []int{320},
		Quantum:          256,
		Weights:          []int{1000},
		OutBatch:         256,
		Encoders:         2,
		Round:            2 * time.Second,
		ShufflerTimeout:  1500 * time.Millisecond,
		ResponseDeadline: 2 * time.Second,
		VendorNames:      []string{"acme"},
		ResponseCapacity: []int{1024},
	}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("deployment\n got %+v\nwant %+v", d, want)
	}
}

func TestParseDeploymentErrors(t *testing.T) {
	const good = `{"series":"home","mode":"Hardened","suite":"X25519","commandsPerUser":1,"delta":2,"commandSize":256,"responseSize":128,
 "period":"500ms","shufflerTimeout":"2s","responseDeadline":"1s","asyncWindow":0,"encoders":2,"outBatch":32,"responseQuantum":16,
 "capacityDraw":"%DRAW%","vendors":[%V%]}`
	v0 := `{"index":0,"name":"a","devices":4,"base":2,"jitter":2,"paddedEntries":8,"responsePaddedEntries":16}`
	v1 := `{"index":1,"name":"b","devices":4,"base":2,"jitter":2,"paddedEntries":8,"responsePaddedEntries":16}`
	doc := func(draw, vendors string) string {
		return strings.NewReplacer("%DRAW%", draw, "%V%", vendors).Replace(good)
	}
	if d, err := ParseDeployment([]byte(doc("Random", v0+","+v1))); err != nil || d.Params.Vendors != 2 || d.Policy[1].Width != 2 {
		t.Fatalf("good document: %v %+v", err, d.Policy)
	}
	if d, err := ParseDeployment([]byte(doc("Fixed", v0))); err != nil || d.Policy[0].Width != 0 {
		t.Fatalf("Fixed draw must have width 0: %v %+v", err, d.Policy)
	}
	answer := func(after string) string {
		return strings.Replace(doc("Random", v0), `"responseDeadline":"1s"`, `"responseDeadline":"1s","deviceAnswerAfter":"`+after+`"`, 1)
	}
	if d, err := ParseDeployment([]byte(doc("Random", v0))); err != nil || d.AnswerAfter() != 250*time.Millisecond {
		t.Fatalf("default device answer offset: %v %v, want a quarter of the 1s deadline", err, d.AnswerAfter())
	}
	if d, err := ParseDeployment([]byte(answer("400ms"))); err != nil || d.AnswerAfter() != 400*time.Millisecond {
		t.Fatalf("deviceAnswerAfter 400ms: %v %v", err, d.AnswerAfter())
	}
	weighted := func(w0, w1 string) string {
		return doc("Random", strings.Replace(v0, `"responsePaddedEntries":16`, `"responsePaddedEntries":16`+w0, 1)+","+
			strings.Replace(v1, `"responsePaddedEntries":16`, `"responsePaddedEntries":16`+w1, 1))
	}
	if d, err := ParseDeployment([]byte(weighted(`,"shufflerWeight":0`, `,"shufflerWeight":9`))); err != nil || d.Weights[0] != 0 || d.Weights[1] != 9 {
		t.Fatalf("shufflerWeight 0 and 9: %v %v", err, d.Weights)
	}
	if d, err := ParseDeployment([]byte(weighted("", `,"shufflerWeight":9`))); err != nil || d.Weights[0] != 4 {
		t.Fatalf("no shufflerWeight weighs by devices: %v %v", err, d.Weights)
	}
	cases := []struct{ name, doc, want string }{
		{"negative shuffler weight", weighted(`,"shufflerWeight":-1`, ""), "shufflerWeight -1"},
		{"nobody shuffles", weighted(`,"shufflerWeight":0`, `,"shufflerWeight":0`), "positive shuffler weight"},
		{"answer offset past half the deadline", answer("600ms"), "response-deadline/2"},
		{"answer offset not a duration", answer("soon"), "deviceAnswerAfter"},
		{"unknown field", strings.Replace(doc("Random", v0), `"series"`, `"bogus":1,"series"`, 1), "unknown field"},
		{"unsorted vendors", doc("Random", v1+","+v0), "sorted by index"},
		{"gap in indices", doc("Random", v1), "contiguous"},
		{"no vendors", doc("Random", ""), "at least one vendor"},
		{"paper mode", strings.Replace(doc("Random", v0), "Hardened", "PaperLiteral", 1), "PaperLiteral"},
		{"bad duration", strings.Replace(doc("Random", v0), `"500ms"`, `"soon"`, 1), "period"},
		{"bad draw", doc("Sometimes", v0), "capacityDraw"},
		{"capacity too small", strings.Replace(doc("Random", v0), `"paddedEntries":8`, `"paddedEntries":5`, 1), "paddedEntries 5"},
		{"async", strings.Replace(doc("Random", v0), `"asyncWindow":0`, `"asyncWindow":2`, 1), "asyncWindow"},
		{"trailing", doc("Random", v0) + "{}", "trailing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseDeployment([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to mention %q", err, c.want)
			}
		})
	}
}
