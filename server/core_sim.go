package server

import (
	"context"
	"fmt"
	"strconv"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/generator"
)

// What a program embedding a Core (and the simulator, test/sim) uses
// beside NextIDs and Status: ranges, as the gRPC API's NextRange serves
// them, and the generator's serving state, as /readyz and the health
// watch follow it.

// NextRange returns count IDs of the named generator ("" is the default)
// as runs of consecutive IDs, as the gRPC API's NextRange does: the same
// IDs, in the same order, NextIDs would return, increasing; count runs
// from 1 to the generator's max_range (GeneratorStatus.MaxRange). A
// generator that does not serve refuses at once with the cause.
func (c *Core) NextRange(ctx context.Context, generator string, count uint64) ([]generator.Run, error) {
	rt, err := c.lookup(generator)
	if err != nil {
		return nil, err
	}
	if count < 1 || count > rt.maxRange {
		return nil, badField("count", strconv.FormatUint(count, 10), fmt.Sprintf("[1, %d]", rt.maxRange),
			"count %d outside [1, %d] for generator %q (sequence per unit × units in max-lead × workers)", count, rt.maxRange, rt.cfg.Name)
	}
	return rt.issueRuns(ctx, count)
}

// Watch calls f on every transition of the named generator's serving
// state ("" is the default), in order, on the goroutine that made the
// change, until unsubscribe is called: what /readyz and the health watch
// follow. f may read the state (StateSnapshot) but must not block for
// long; see clockguard.ServingState.Subscribe.
func (c *Core) Watch(generator string, f func(clockguard.Transition)) (unsubscribe func(), err error) {
	rt, err := c.lookup(generator)
	if err != nil {
		return nil, err
	}
	return rt.state.Subscribe(f), nil
}

// StateSnapshot is a consistent copy of the named generator's serving
// state ("" is the default): its state, its reason and the causes it
// holds, each with its code — what a refusal made now would report
// (clockguard.Snapshot.Refusal).
func (c *Core) StateSnapshot(generator string) (clockguard.Snapshot, error) {
	rt, err := c.lookup(generator)
	if err != nil {
		return clockguard.Snapshot{}, err
	}
	return rt.state.Snapshot(), nil
}
