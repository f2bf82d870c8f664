//go:build firn_wedge

package generator

import "context"

// firn_wedge, a weakened build for the simulator (test/run.sh): a wedge
// of an earlier build comes back. A reservation wait ends only when the
// reservation reaches the time it was sized from, whatever the clock does
// since; the ring's filler waits in it, holding its lock; and a forward
// step is followed (steprule_wedge.go). The simulator must catch it.
func (g *Generator) awaitReservation(ctx context.Context, need int64, wk <-chan struct{}) error {
	g.waits.Add(1)
	for g.reserved.Load() < need {
		select {
		case <-wk:
			wk = g.waker()
		case <-ctx.Done():
			return &ReservationError{Need: need, Reserved: g.reserved.Load(), Err: ctx.Err()}
		case <-g.retireC:
			return ErrRetired
		}
	}
	return nil
}

func (g *Generator) tryFill(dst []uint64) (int, error) {
	return g.nextBatch(context.Background(), dst, false, g.leadUnits)
}
