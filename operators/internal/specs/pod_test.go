package specs

import (
	"maps"
	"testing"
)

// TestScrapeAnnotations: with Runtime.ScrapeAnnotations every pod template carries
// prometheus.io/scrape, /port (the metrics port) and /path next to the caller's own
// annotations, which are not modified; without it, or on the host network (dynamic metrics
// ports), the template has the caller's annotations only.
func TestScrapeAnnotations(t *testing.T) {
	own := map[string]string{"obscura.dev/config-hash": "abc"}
	p := Pod{Role: "gateway", Image: "img", Annotations: own, CPU: "10m", Memory: "64Mi"}

	got := p.Template(Runtime{ScrapeAnnotations: true}).Annotations
	want := map[string]string{"obscura.dev/config-hash": "abc",
		"prometheus.io/scrape": "true", "prometheus.io/port": "9090", "prometheus.io/path": "/metrics"}
	if !maps.Equal(got, want) {
		t.Errorf("with --scrape-annotations: %v, want %v", got, want)
	}
	if len(own) != 1 {
		t.Errorf("the caller's annotations were modified: %v", own)
	}
	for name, rt := range map[string]Runtime{"default": {}, "host network": {ScrapeAnnotations: true, HostNetwork: true}} {
		if got := p.Template(rt).Annotations; !maps.Equal(got, own) {
			t.Errorf("%s: %v, want the caller's %v", name, got, own)
		}
	}
}
