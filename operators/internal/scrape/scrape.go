// Package scrape reads one workload's Prometheus metrics page, for the status readers that take
// a resource's figures from its pods' own metrics (ppsstatus, loisstatus).
package scrape

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MaxBody bounds one replica's metrics page.
const MaxBody = 4 << 20

// Metrics fetches http://endpoint/metrics (host:port) in the text format and parses it.
func Metrics(ctx context.Context, c *http.Client, endpoint string) (map[string]*dto.MetricFamily, error) {
	if _, _, err := net.SplitHostPort(endpoint); err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+endpoint+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	// The text format: the parser reads nothing else.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", endpoint, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return nil, fmt.Errorf("parse the metrics of %s: %w", endpoint, err)
	}
	return fams, nil
}
