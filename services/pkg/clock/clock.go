// Package clock holds the one context-aware wait every service loop uses.
package clock

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx ends, and reports whether the full wait elapsed, so a loop can
// write `if !clock.Sleep(ctx, d) { return ctx.Err() }` and stop promptly on shutdown.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
