package core

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/firnid/firn/coordinator"
)

// errJournalBusy: the data dir's previous write has not returned yet.
var errJournalBusy = errors.New("data dir: the previous write has not finished (a stalled disk?)")

// boundedJournal gives the data-dir journal a deadline. Its writes fsync;
// on a stalled disk an fsync may not return for a long time, and the
// holder's loop must not stall with it (the node would say ready while no
// reservation is extended, and SIGTERM would outlast --shutdown-timeout).
// A write that does not return in time fails (the reservation is not sent,
// so nothing unsafe happens) and is left to finish on its own; until it
// does, the next ones fail at once.
type boundedJournal struct {
	j       coordinator.Journal
	timeout time.Duration
	busy    atomic.Bool
}

func newBoundedJournal(j coordinator.Journal, timeout time.Duration) *boundedJournal {
	return &boundedJournal{j: j, timeout: timeout}
}

func (b *boundedJournal) BeforeReserve(slot coordinator.Slot, until int64) error {
	if !b.busy.CompareAndSwap(false, true) {
		return errJournalBusy
	}
	done := make(chan error, 1)
	go func() {
		err := b.j.BeforeReserve(slot, until)
		b.busy.Store(false)
		done <- err
	}()
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("data dir: writing the reservation did not finish within %v (a stalled disk?)", b.timeout)
	}
}

// Acked only records in memory; it never waits on the disk (it may wait
// for the journal's lock while a write holds it, so it runs apart).
func (b *boundedJournal) Acked(slot coordinator.Slot, r int64) {
	if !b.busy.Load() {
		b.j.Acked(slot, r)
		return
	}
	go b.j.Acked(slot, r)
}

// runBounded runs f, returning its error, or ctx's when ctx ends first (f
// is then left to finish on its own).
func runBounded(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("data dir: write did not finish in time (a stalled disk?): %w", ctx.Err())
	}
}

// journalFor is the data-dir journal of one generator, wrapped as
// WithJournalWrap asks.
func (c *Core) journalFor(rt *Generator) coordinator.Journal {
	if c.wrapJournal != nil {
		return c.wrapJournal(rt.local)
	}
	return rt.local
}
