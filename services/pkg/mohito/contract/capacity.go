package contract

import (
	"errors"
	"fmt"
	"time"
)

// ScaledBase is base_v in class percent: ⌈base × percent / 100⌉.
func ScaledBase(base uint64, percent int) uint64 {
	return (base*uint64(percent) + 99) / 100
}

// MaxPercent is the largest class; every K_v must hold the draw of that class.
func (c *CapacityClasses) MaxPercent() int {
	if c == nil || len(c.Percent) == 0 {
		return 100
	}
	return c.Percent[len(c.Percent)-1]
}

// MinLowerFakeRatio is the least lowerFakeRatio the classes allow: a round with at least this
// share of fakes would have fit the next lower class (its real commands are at most the lower
// class's share of the list), so lowering never causes the bursts that raise the class again.
func (c *CapacityClasses) MinLowerFakeRatio() float64 {
	least := 0.0
	for i := 1; i < len(c.Percent); i++ {
		least = max(least, 1-float64(c.Percent[i-1])/float64(c.Percent[i]))
	}
	return least
}

// HoldDuration parses Hold.
func (c *CapacityClasses) HoldDuration() (time.Duration, error) {
	d, err := time.ParseDuration(c.Hold)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("capacityClasses.hold %q must be a positive Go duration", c.Hold)
	}
	return d, nil
}

// Validate checks the policy for a series whose rounds start every period.
func (c *CapacityClasses) Validate(period time.Duration) error {
	var errs []error
	if len(c.Percent) < 2 || len(c.Percent) > 16 {
		errs = append(errs, fmt.Errorf("capacityClasses.percent needs 2 to 16 classes, has %d", len(c.Percent)))
	}
	for i, p := range c.Percent {
		switch {
		case i == 0 && p != 100:
			errs = append(errs, fmt.Errorf("capacityClasses.percent must start at 100 (the vendors' base), starts at %d", p))
		case i > 0 && p <= c.Percent[i-1]:
			errs = append(errs, fmt.Errorf("capacityClasses.percent must ascend: %d after %d", p, c.Percent[i-1]))
		case p > 10000:
			errs = append(errs, fmt.Errorf("capacityClasses.percent %d is above 10000", p))
		}
	}
	if hold, err := c.HoldDuration(); err != nil {
		errs = append(errs, err)
	} else if period > 0 && hold < 10*period {
		errs = append(errs, fmt.Errorf("capacityClasses.hold %v must be at least 10 periods (%v): a decision needs rounds to observe", hold, 10*period))
	}
	if !(c.BurstRate > 0 && c.BurstRate < 1) {
		errs = append(errs, fmt.Errorf("capacityClasses.burstRate %v must be in (0, 1)", c.BurstRate))
	}
	if len(errs) == 0 {
		if least := c.MinLowerFakeRatio(); c.LowerFakeRatio < least || c.LowerFakeRatio >= 1 {
			errs = append(errs, fmt.Errorf("capacityClasses.lowerFakeRatio %v must be in [%.3f, 1): below %.3f the demand that allowed lowering would not fit the lower class", c.LowerFakeRatio, least, least))
		}
	}
	return errors.Join(errs...)
}
