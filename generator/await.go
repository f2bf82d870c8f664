//go:build !firn_wedge

package generator

import (
	"context"
	"time"
)

// awaitReservation waits until the reservation may have reached need: a
// raise, a Wake, or waitSlice, after which the caller reads the clock again
// (the time it needs may have changed with the clock).
func (g *Generator) awaitReservation(ctx context.Context, need int64, wk <-chan struct{}) error {
	g.waits.Add(1)
	if g.reserved.Load() >= need {
		return nil
	}
	t := time.NewTimer(waitSlice)
	defer t.Stop()
	select {
	case <-wk:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return &ReservationError{Need: need, Reserved: g.reserved.Load(), Err: ctx.Err()}
	case <-g.retireC:
		return ErrRetired
	}
}

// tryFill is TryBatch's fill: what one time unit allows now, never a wait.
func (g *Generator) tryFill(dst []uint64) (int, error) {
	n, _, _, err := g.next(dst, false, g.leadUnits)
	return n, err
}
