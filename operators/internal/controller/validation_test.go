package controller

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The CRDs' schemas and CEL rules are served by the real API server; these cases prove that
// invalid resources are rejected with a message a user can act on.

const validVendor = `
apiVersion: mohito.obscura.dev/v1alpha1
kind: Vendor
metadata: {name: v}
spec:
  index: 0
  devices: 10
  capacity: {base: 10, jitter: 5, paddedEntries: 200}
  keys: {secretRef: {name: k}}
`

const validRound = `
apiVersion: mohito.obscura.dev/v1alpha1
kind: Round
metadata: {name: r}
spec:
  period: 2s
  vendorSelector: {matchLabels: {a: b}}
  shufflerPolicy: {responseTimeout: 1s}
  keys: {secretRef: {name: k}}
`

const validShuffler = `
apiVersion: mohito.obscura.dev/v1alpha1
kind: Shuffler
metadata: {name: s}
spec:
  vendorRef: {name: v}
  fakePool: {size: 100}
`

const validJob = `
apiVersion: pda.obscura.dev/v1alpha1
kind: AggregationJob
metadata: {name: j}
spec:
  key: {type: IP}
  threshold: 2
  window: {duration: 1h}
  participants:
    - {name: a, identity: CN=a}
    - {name: b, identity: CN=b}
  proxy: {namespace: pda-proxy, keys: {secretRef: {name: k}}}
  database: {namespace: pda-db, keys: {secretRef: {name: k}}}
  resultSink: {natsSubject: pda.results}
`

const validPipeline = `
apiVersion: pps.obscura.dev/v1alpha1
kind: SecurePipeline
metadata: {name: p}
spec:
  source: '(begin (define x (val "a")) (start-building) x)'
  publishers:
    - {topic: a, deviceID: e9afe937531d24d7b6f174d5a6d00fb2fe35e819eb07602f10ebc16c85937336}
    - {topic: b, deviceID: 17e734a320bff2f886b163c2111248be744d90665b056e407540981b98559a9d}
  subscribers: [e15bdae6490124691c7d978d9bc39b5b467327c378b60665f31b92ecfb937273]
  window: 5s
  schedule: 1m
  garbler: {namespace: pps-garbler, keys: {secretRef: {name: k}}}
`

// mutate parses a valid manifest and applies edits given as dotted paths under spec
// ("capacity.paddedEntries": 1); a nil value deletes the field.
func mutate(t *testing.T, manifest string, edits map[string]any) *unstructured.Unstructured {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(manifest), &obj); err != nil {
		t.Fatal(err)
	}
	for path, v := range edits {
		parts := strings.Split("spec."+path, ".")
		m := obj
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		if v == nil {
			delete(m, parts[len(parts)-1])
		} else {
			m[parts[len(parts)-1]] = v
		}
	}
	return &unstructured.Unstructured{Object: obj}
}

func TestValidResourcesAccepted(t *testing.T) {
	ns := namespace(t)
	for _, m := range []string{validVendor, validRound, validShuffler, validJob, validPipeline} {
		u := mutate(t, m, nil)
		u.SetNamespace(ns)
		if err := k8s.Create(context.Background(), u); err != nil {
			t.Errorf("valid %s rejected: %v", u.GetKind(), err)
		}
	}
}

func TestInvalidResourcesRejected(t *testing.T) {
	ns := namespace(t)
	cases := []struct {
		name     string
		manifest string
		edits    map[string]any
		want     string
	}{
		{"vendor padded capacity below base+jitter", validVendor,
			map[string]any{"capacity.paddedEntries": 12},
			"capacity.paddedEntries (K_v) must be at least capacity.base + capacity.jitter"},
		{"vendor with two key sources", validVendor,
			map[string]any{"keys.vault": map[string]any{"role": "r", "path": "p"}},
			"set exactly one of keys.vault or keys.secretRef"},
		{"vendor with no key source", validVendor,
			map[string]any{"keys.secretRef": nil},
			"set exactly one of keys.vault or keys.secretRef"},
		{"vault path escaping the mount", validVendor,
			map[string]any{"keys.secretRef": nil, "keys.vault": map[string]any{"role": "r", "path": "../root"}},
			"vault.path must be relative to the mount and must not contain '..'"},
		{"negative vendor index", validVendor,
			map[string]any{"index": -1},
			"spec.index: Invalid value"},
		{"round decryptWorkers min above max", validRound,
			map[string]any{"decryptWorkers": map[string]any{"min": 5, "max": 2}},
			"decryptWorkers.min must not exceed decryptWorkers.max"},
		{"round period too short", validRound,
			map[string]any{"period": "10ms", "shufflerPolicy.responseTimeout": "5ms"},
			"period must be between 100ms and 1h"},
		{"round shuffler timeout not shorter than period", validRound,
			map[string]any{"shufflerPolicy.responseTimeout": "3s"},
			"shufflerPolicy.responseTimeout must be shorter than period"},
		{"round capacity classes not from 100", validRound,
			map[string]any{"capacity": map[string]any{"classes": map[string]any{"percent": []any{150, 200}}}},
			"capacity.classes.percent must start at 100 and ascend"},
		{"round capacity classes descending", validRound,
			map[string]any{"capacity": map[string]any{"classes": map[string]any{"percent": []any{100, 300, 200}}}},
			"capacity.classes.percent must start at 100 and ascend"},
		{"round q above 4", validRound,
			map[string]any{"commandsPerUser": 5},
			"spec.commandsPerUser: Invalid value"},
		{"round command size below the header", validRound,
			map[string]any{"commandSize": 64},
			"spec.commandSize: Invalid value"},
		{"round unparsable period", validRound,
			map[string]any{"period": "two seconds"},
			"spec.period: Invalid value"},
		{"shuffler refill above pool size", validShuffler,
			map[string]any{"fakePool.refillBelow": 500},
			"fakePool.refillBelow must not exceed fakePool.size"},
		{"job threshold below 2", validJob,
			map[string]any{"threshold": 1},
			"spec.threshold: Invalid value"},
		{"job threshold above participants", validJob,
			map[string]any{"threshold": 3},
			"threshold exceeds the number of participants"},
		{"job window end before start", validJob,
			map[string]any{"window": map[string]any{"start": "2026-11-22T10:00:00Z", "end": "2026-11-22T09:00:00Z"}},
			"window.end must be after window.start"},
		{"job window with end and duration", validJob,
			map[string]any{"window.end": "2030-01-01T00:00:00Z"},
			"set exactly one of window.end or window.duration"},
		{"job maxLength on an IP key", validJob,
			map[string]any{"key.maxLength": 10},
			"key.maxLength applies only to Domain, URL and Opaque keys"},
		{"job without a result sink", validJob,
			map[string]any{"resultSink.natsSubject": nil},
			"resultSink needs at least one of configMap, secret or natsSubject"},
		{"job with both configMap and secret sinks", validJob,
			map[string]any{"resultSink.configMap": map[string]any{"name": "a"}, "resultSink.secret": map[string]any{"name": "b"}},
			"resultSink takes configMap or secret, not both"},
		{"job streaming mixing (not served, so not in the API)", validJob,
			map[string]any{"mixing": map[string]any{"mode": "Streaming"}},
			`spec.mixing.mode: Unsupported value: "Streaming"`},
		{"job unknown key type", validJob,
			map[string]any{"key.type": "MAC"},
			`spec.key.type: Unsupported value: "MAC"`},
		{"pipeline publisher device id in upper case", validPipeline,
			map[string]any{"publishers": []any{map[string]any{"topic": "a", "deviceID": "E9AFE937531D24D7B6F174D5A6D00FB2FE35E819EB07602F10EBC16C85937336"}}},
			"deviceID must be 64 lowercase hex characters"},
		{"pipeline publisher device id too short", validPipeline,
			map[string]any{"publishers": []any{map[string]any{"topic": "a", "deviceID": "e9afe937"}}},
			"deviceID must be 64 lowercase hex characters"},
		{"pipeline publisher device id too long", validPipeline,
			map[string]any{"publishers": []any{map[string]any{"topic": "a", "deviceID": strings.Repeat("a", 65)}}},
			"spec.publishers[0].deviceID: Too long"},
		{"pipeline check on a hardened function", validPipeline,
			map[string]any{"mode": "hardened", "check": "kkrt"},
			"check applies only to faithful functions"},
		{"pipeline unknown check", validPipeline,
			map[string]any{"check": "psi"},
			`spec.check: Unsupported value: "psi"`},
		{"pipeline subscriber not a device id", validPipeline,
			map[string]any{"subscribers": []any{"dashboard"}},
			"a subscriber is a device id: 64 lowercase hex characters"},
		{"pipeline subscriber listed twice", validPipeline,
			map[string]any{"subscribers": []any{strings.Repeat("ab", 32), strings.Repeat("ab", 32)}},
			"spec.subscribers[1]: Duplicate value"},
		{"pipeline topic listed twice", validPipeline,
			map[string]any{"publishers": []any{
				map[string]any{"topic": "a", "deviceID": strings.Repeat("ab", 32)},
				map[string]any{"topic": "a", "deviceID": strings.Repeat("cd", 32)}}},
			"spec.publishers[1]: Duplicate value"},
		{"pipeline without publishers", validPipeline,
			map[string]any{"publishers": []any{}},
			"spec.publishers: Invalid value"},
		{"pipeline zero window", validPipeline,
			map[string]any{"window": "0s"},
			"window must be positive"},
		{"pipeline zero schedule", validPipeline,
			map[string]any{"schedule": "0m"},
			"schedule must be positive"},
		{"pipeline negative schedule", validPipeline,
			map[string]any{"schedule": "-1m"},
			"spec.schedule: Invalid value"},
		{"pipeline zero seedTTL", validPipeline,
			map[string]any{"seedTTL": "0h"},
			"seedTTL must be positive"},
		{"pipeline unknown mode", validPipeline,
			map[string]any{"mode": "paranoid"},
			`spec.mode: Unsupported value: "paranoid"`},
		{"pipeline empty source", validPipeline,
			map[string]any{"source": ""},
			"spec.source: Invalid value"},
		{"pipeline garbler with two key sources", validPipeline,
			map[string]any{"garbler.keys.vault": map[string]any{"role": "r", "identityKey": "i", "sealKey": "s"}},
			"set exactly one of keys.vault or keys.secretRef"},
		{"pipeline garbler without keys", validPipeline,
			map[string]any{"garbler.keys.secretRef": nil},
			"set exactly one of keys.vault or keys.secretRef"},
		{"pipeline garbler identity and seal in one entry", validPipeline,
			map[string]any{"garbler.keys.secretRef": map[string]any{"name": "k", "identityKey": "k", "sealKey": "k"}},
			"identityKey and sealKey must be different entries"},
		{"pipeline garbler vault address not a URL", validPipeline,
			map[string]any{"garbler.keys.secretRef": nil, "garbler.keys.vault": map[string]any{"role": "r", "identityKey": "i", "sealKey": "s", "address": "vault:8200"}},
			"vault.address must be an http:// or https:// URL"},
		{"pipeline garbler namespace not a DNS label", validPipeline,
			map[string]any{"garbler.namespace": "PPS_Garbler"},
			"spec.garbler.namespace: Invalid value"},
		{"pipeline broker workers zero", validPipeline,
			map[string]any{"broker.workers": 0},
			"spec.broker.workers: Invalid value"},
		{"pipeline broker redis without a port", validPipeline,
			map[string]any{"broker.redis.address": "redis"},
			"spec.broker.redis.address: Invalid value"},
	}
	// The name is part of NATS account and user names: no dots.
	dotted := mutate(t, validPipeline, nil)
	dotted.SetName("parking.daily")
	cases = append(cases, struct {
		name     string
		manifest string
		edits    map[string]any
		want     string
	}{"pipeline name with a dot", "", nil, "a SecurePipeline name is at most 40 characters without dots"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := dotted
			if tc.manifest != "" {
				u = mutate(t, tc.manifest, tc.edits)
			}
			u.SetNamespace(ns)
			err := k8s.Create(context.Background(), u)
			if err == nil {
				t.Fatalf("accepted; want rejection with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rejected with\n  %v\nwant a message containing\n  %q", err, tc.want)
			}
		})
	}
}

func TestImmutableFieldsRejected(t *testing.T) {
	ns := namespace(t)
	cases := []struct {
		name     string
		manifest string
		edits    map[string]any
		want     string
	}{
		{"vendor index", validVendor, map[string]any{"index": 1}, "index is immutable"},
		{"shuffler vendorRef", validShuffler, map[string]any{"vendorRef.name": "other"}, "vendorRef is immutable"},
		{"job threshold", validJob, map[string]any{"threshold": 2, "participants": []any{
			map[string]any{"name": "a", "identity": "CN=a"}, map[string]any{"name": "b", "identity": "CN=b"},
			map[string]any{"name": "c", "identity": "CN=c"}}}, ""},
		{"job key type", validJob, map[string]any{"key.type": "IPv4"}, "key is immutable"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			orig := mutate(t, tc.manifest, nil)
			orig.SetNamespace(ns)
			orig.SetName(orig.GetName() + string(rune('a'+i)))
			if err := k8s.Create(context.Background(), orig); err != nil {
				t.Fatal(err)
			}
			changed := mutate(t, tc.manifest, tc.edits)
			changed.SetNamespace(ns)
			changed.SetName(orig.GetName())
			// The reconcilers write status concurrently; retry conflicts on the fresh version.
			var err error
			for range 20 {
				if err = k8s.Get(context.Background(), client.ObjectKeyFromObject(orig), orig); err != nil {
					t.Fatal(err)
				}
				changed.SetResourceVersion(orig.GetResourceVersion())
				if err = k8s.Update(context.Background(), changed); !apierrors.IsConflict(err) {
					break
				}
			}
			if tc.want == "" {
				// Control: an unchanged threshold with more participants is a legal edit.
				if err != nil {
					t.Fatalf("legal update rejected: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("update error %v, want %q", err, tc.want)
			}
		})
	}
}
