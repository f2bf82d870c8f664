package memory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/segment"
)

// errMoved is SwapCounter's refusal inside the store's lock; the caller
// returns the record now stored with coordinator.ErrCounterMoved.
var errMoved = errors.New("counter moved")

// ReadCounter implements coordinator.Counters: the pin and the counter
// are created together when neither exists.
func (c *Client) ReadCounter(ctx context.Context, spec coordinator.CounterSpec) (coordinator.CounterRecord, error) {
	if err := spec.Validate(); err != nil {
		return coordinator.CounterRecord{}, err
	}
	var rec coordinator.CounterRecord
	err := c.call(ctx, OpCounter, "read counter", func(time.Time) error {
		g, err := c.counterLocked(spec, true)
		if err != nil {
			return err
		}
		rec, err = counterRecord(spec, g)
		return err
	})
	return rec, err
}

// SwapCounter implements coordinator.Counters: next is written only while
// the stored counter is prev (counterGuard), the pin unchanged and no
// restore marker stands.
func (c *Client) SwapCounter(ctx context.Context, spec coordinator.CounterSpec, prev coordinator.CounterRecord, next segment.Counter) (coordinator.CounterRecord, error) {
	if err := spec.Validate(); err != nil {
		return coordinator.CounterRecord{}, err
	}
	if err := next.Validate(spec.Definition); err != nil {
		return coordinator.CounterRecord{}, fmt.Errorf("%w: %v", coordinator.ErrInvalidSpec, err)
	}
	var rec coordinator.CounterRecord
	err := c.call(ctx, OpCounter, "swap counter", func(time.Time) error {
		g, err := c.counterLocked(spec, false)
		if err != nil {
			return err
		}
		if !counterGuard(g.counter, g.counterRev, prev) {
			rec, err = counterRecord(spec, g)
			if err != nil {
				return err
			}
			return errMoved
		}
		c.s.st.rev++
		g.counter, g.counterRev = next.Encode(), c.s.st.rev
		rec, err = counterRecord(spec, g)
		if err == nil && c.lost(OpCounter) {
			return unavailable("swap counter", errReplyLost) // written, but the reply is lost
		}
		return err
	})
	if errors.Is(err, errMoved) {
		return rec, fmt.Errorf("%w: generator %q", coordinator.ErrCounterMoved, spec.Generator)
	}
	if err != nil {
		return coordinator.CounterRecord{}, err
	}
	return rec, nil
}

// counterLocked is the generator's state for a counter operation: the
// marker refused, the pin checked (created with the counter when create
// and neither exists).
func (c *Client) counterLocked(spec coordinator.CounterSpec, create bool) (*genState, error) {
	g := c.s.st.gen(spec.Generator, true)
	if g.marker != nil {
		return nil, &coordinator.RestoredError{Evidence: *g.marker}
	}
	if g.pin == nil {
		if !create {
			return nil, fmt.Errorf("%w: generator %q has no pin (its counter was never read)", coordinator.ErrInvalidSpec, spec.Generator)
		}
		c.s.st.rev++
		g.pin = c.s.newPin(spec.PinSpec())
		g.counter, g.counterRev = segment.NewCounter(spec.Definition).Encode(), c.s.st.rev
		c.log.Info("generator pinned", "generator", spec.Generator, "definition", spec.Definition.String(),
			"incarnation", g.pin.Incarnation)
	}
	if err := g.pin.Check(spec.PinSpec()); err != nil {
		return nil, err
	}
	if g.counter == nil {
		return nil, fmt.Errorf("%w: generator %q is pinned to %q but has no counter", segment.ErrCounter, spec.Generator, g.pin.Layout)
	}
	return g, nil
}

func counterRecord(spec coordinator.CounterSpec, g *genState) (coordinator.CounterRecord, error) {
	return coordinator.DecodeCounterRecord(spec.Generator+"/counter", spec, g.counter, g.counterRev)
}

// BumpCounter implements coordinator.Counters: under the store's lock,
// the counter raised and the marker deleted (refused, nothing written,
// when the bump does not cover the marker: coordinator.BumpedCounter).
func (c *Client) BumpCounter(ctx context.Context, spec coordinator.CounterSpec, by uint64) (coordinator.CounterBump, error) {
	if err := spec.Validate(); err != nil {
		return coordinator.CounterBump{}, err
	}
	var out coordinator.CounterBump
	err := c.call(ctx, OpCounter, "bump counter", func(time.Time) error {
		g := c.s.st.gen(spec.Generator, false)
		if g == nil || g.pin == nil || g.counter == nil {
			return fmt.Errorf("%w: generator %q has no counter to bump", coordinator.ErrInvalidSpec, spec.Generator)
		}
		if err := g.pin.Check(spec.PinSpec()); err != nil {
			return err
		}
		bump, raw, err := coordinator.BumpedCounter(spec.Generator+"/counter", spec, g.counter, by, g.marker)
		if err != nil {
			return err
		}
		c.s.st.rev++
		g.counter, g.counterRev = raw, c.s.st.rev
		bump.Cleared, g.marker = g.marker, nil
		out = bump
		return nil
	})
	return out, err
}
