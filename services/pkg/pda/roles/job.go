package roles

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pda"
)

// Job is the public configuration of one aggregation that both trust domains agree on:
// the AggregationJob spec without any secret (spec §3.9.1 PublicParams minus the window,
// plus the window schedule). Every role builds the per-window pda.Suite from it.
type Job struct {
	DeploymentID string
	Group        pda.GroupID
	Threshold    uint32
	CountMode    pda.CountMode
	Chunks       uint8
	Values       []uint16
	DBKey        []byte // encoded h_DB (from the DB domain)
	ProxyKey     []byte // encoded h_PRX (from the proxy domain)
	// WindowLength is the tumbling window (window id = unix seconds / length); Grace is how
	// long the proxy keeps accepting in-flight items after a window closes (U28).
	WindowLength time.Duration
	Grace        time.Duration

	mu     sync.Mutex
	suites map[uint64]*pda.Suite
}

// PoolRetention is how long the proxy domain's pool keeps an item: two windows and the
// grace, so a window's items are there until the mixer has sealed it.
func (j *Job) PoolRetention() time.Duration { return 2*j.WindowLength + j.Grace }

// Validate checks the job by building the suite of window 0.
func (j *Job) Validate() error {
	var errs []error
	if j.WindowLength < time.Second {
		errs = append(errs, errors.New("window length must be ≥ 1s"))
	}
	if j.Grace < 0 {
		errs = append(errs, errors.New("grace must be ≥ 0"))
	}
	if _, err := pda.NewSuite(j.params(0)); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid job: %w", errors.Join(errs...))
	}
	return nil
}

func (j *Job) params(w uint64) pda.PublicParams {
	return pda.PublicParams{
		Group: j.Group, DeploymentID: j.DeploymentID, Window: w, Threshold: j.Threshold,
		CountMode: j.CountMode, Chunks: j.Chunks, Values: slices.Clone(j.Values),
		DBKey: j.DBKey, ProxyKey: j.ProxyKey,
	}
}

// Suite returns the (cached) suite of window w.
func (j *Job) Suite(w uint64) (*pda.Suite, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if s := j.suites[w]; s != nil {
		return s, nil
	}
	s, err := pda.NewSuite(j.params(w))
	if err != nil {
		return nil, fmt.Errorf("suite of window %d: %w", w, err)
	}
	if j.suites == nil {
		j.suites = make(map[uint64]*pda.Suite)
	}
	if len(j.suites) > 64 { // windows are few; bound the cache anyway
		clear(j.suites)
	}
	j.suites[w] = s
	return s, nil
}

// WindowAt returns the window id of time t (proxy-domain time, U28).
func (j *Job) WindowAt(t time.Time) uint64 {
	return uint64(t.Unix()) / uint64(j.WindowLength/time.Second)
}

// End returns when window w closes.
func (j *Job) End(w uint64) time.Time {
	return time.Unix(int64((w+1)*uint64(j.WindowLength/time.Second)), 0)
}
