package core

import (
	"github.com/firnid/firn/clockguard"
)

// What a program embedding a Core (and the simulator, test/sim) uses
// beside the requests for IDs and Status: the generator's serving state,
// as /readyz and the health watch follow it.

// Watch calls f on every transition of the named generator's serving
// state ("" is the default), in order, on the goroutine that made the
// change, until unsubscribe is called: what /readyz and the health watch
// follow. f may read the state (StateSnapshot) but must not block for
// long; see clockguard.ServingState.Subscribe.
func (c *Core) Watch(generator string, f func(clockguard.Transition)) (unsubscribe func(), err error) {
	rt, err := c.Find(generator)
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
	rt, err := c.Find(generator)
	if err != nil {
		return clockguard.Snapshot{}, err
	}
	return rt.state.Snapshot(), nil
}
