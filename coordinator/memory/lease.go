package memory

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/firnid/firn/coordinator"
)

// lease is one acquisition of one slot. Every write it makes is fenced on
// its owner record: the record must still carry the ownership token
// (the revision of the take) and the session this holder bound it to.
type lease struct {
	c            *Client
	spec         coordinator.Spec
	slot         coordinator.Slot
	sess         *session // the client session whose loss ends the lease
	guardSession int64    // the session the owner record is bound to
	token        int64
	readR        int64
	genFloor     int64 // the generator floor read at acquisition (-1: none)
	floor        int64
	incarnation  string

	write  chan struct{} // one write at a time (a channel: durably blocking under synctest)
	acked  atomic.Int64
	done   chan struct{}
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
}

var _ coordinator.Lease = (*lease)(nil)

func newLease(c *Client, spec coordinator.Spec, slot coordinator.Slot, sess *session, guardSession, token, readR, genFloor int64, incarnation string) *lease {
	ctx, cancel := context.WithCancel(context.Background())
	l := &lease{c: c, spec: spec, slot: slot, sess: sess, guardSession: guardSession, token: token,
		readR: readR, genFloor: genFloor, floor: max(readR, spec.LocalFloor, genFloor), incarnation: incarnation,
		write: make(chan struct{}, 1), done: make(chan struct{}), ctx: ctx, cancel: cancel}
	l.acked.Store(readR)
	return l
}

func (l *lease) WorkerID() uint64       { return l.slot.Worker }
func (l *lease) Datacenter() uint64     { return l.slot.Datacenter }
func (l *lease) Slot() coordinator.Slot { return l.slot }
func (l *lease) ReadReserved() int64    { return l.readR }
func (l *lease) GeneratorFloor() int64  { return l.genFloor }
func (l *lease) Floor() int64           { return l.floor }
func (l *lease) Incarnation() string    { return l.incarnation }
func (l *lease) Reserved() int64        { return l.acked.Load() }
func (l *lease) Done() <-chan struct{}  { return l.done }
func (l *lease) Ctx() context.Context   { return l.ctx }

// Token is the lease's ownership token: the revision at which its owner
// record was created (reused by acquisitions after a Restore).
func (l *lease) Token() int64 { return l.token }

func (l *lease) finish(why string) {
	l.once.Do(func() {
		l.cancel() // before Done closes: whoever sees Done sees Ctx ended
		close(l.done)
		l.c.unregister(l)
		l.c.log.Info("worker lease ended", "generator", l.spec.Generator, "slot", l.slot.String(), "reason", why)
	})
}

func (l *lease) isDone() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

func (l *lease) lost(why string) error {
	l.finish(why)
	return fmt.Errorf("%w: generator %q %s: %s", coordinator.ErrLeaseLost, l.spec.Generator, l.slot, why)
}

// lock takes the lease's write lock, bounded by ctx.
func (l *lease) lock(ctx context.Context, what string) error {
	select {
	case l.write <- struct{}{}:
		return nil
	case <-ctx.Done():
		return unavailable(what, ctx.Err())
	}
}

func (l *lease) unlock() { <-l.write }

// fencedLocked returns the generator state and owner record when the
// record is still this lease's (the fence), under the store's lock.
func (l *lease) fencedLocked() (*genState, bool) {
	g := l.c.s.st.gen(l.spec.Generator, false)
	if g == nil {
		return nil, false
	}
	o, ok := g.owners[l.slot]
	return g, ok && guard(o, l.token, l.guardSession)
}

const fenceFailed = "owner record is gone, was re-created or is bound to another session (fence failed)"

// Reserve implements coordinator.Lease: in one step fenced on the owner
// record it raises the reservation to until when that is higher (never
// lowering it) and rewrites the owner record with the heartbeat. A stored
// value below one already acknowledged to this lease (a write behind its
// back: an operator, a restore) is raised again and reported as a
// *coordinator.RolledBackError.
func (l *lease) Reserve(ctx context.Context, until int64, hb coordinator.Heartbeat) error {
	if until < 0 {
		return fmt.Errorf("%w: reservation %d must be >= 0", coordinator.ErrInvalidSpec, until)
	}
	if err := l.lock(ctx, "reserve"); err != nil {
		return err
	}
	defer l.unlock()
	if l.isDone() {
		return l.lost("lease already ended")
	}
	acked := l.acked.Load()
	v := max(until, acked)
	var rolled *coordinator.RolledBackError
	err := l.c.call(ctx, OpReserve, "reserve", func(time.Time) error {
		g, ok := l.fencedLocked()
		if !ok {
			return errFence
		}
		st := l.c.s.st
		cur := g.reservedOf(l.slot)
		if cur < acked {
			rolled = &coordinator.RolledBackError{Generator: l.spec.Generator, Slot: l.slot, Seen: cur, Acked: acked}
		}
		st.rev++
		if v > cur {
			g.reserved[l.slot] = v
		}
		o := g.owners[l.slot]
		o.rec = record(hb)
		l.c.s.putOwnerLocked(l.spec.Generator, g, l.slot, o)
		if l.c.lost(OpReserve) {
			return unavailable("reserve", errReplyLost)
		}
		return nil
	})
	switch {
	case err == errFence:
		return l.lost(fenceFailed)
	case err != nil:
		if l.isDone() {
			return l.lost("lease ended during reserve")
		}
		return err
	}
	l.acked.Store(v)
	if rolled != nil {
		return rolled
	}
	return nil
}

// Release implements coordinator.Lease: in one step fenced like Reserve it
// deletes the owner record and sets the reservation to max(highest,
// Floor), only while it holds no more than max(what this lease had
// acknowledged, that value) (a bump made meanwhile is kept).
func (l *lease) Release(ctx context.Context, highest int64) error {
	if err := l.lock(ctx, "release"); err != nil {
		return err
	}
	defer l.unlock()
	if l.isDone() {
		return l.lost("lease already ended")
	}
	v := max(highest, l.floor)
	acked := l.acked.Load()
	err := l.c.call(ctx, OpRelease, "release", func(time.Time) error {
		g, ok := l.fencedLocked()
		if !ok {
			return errFence
		}
		l.c.s.st.rev++
		if cur := g.reservedOf(l.slot); v >= 0 && cur <= max(acked, v) && cur != v {
			g.reserved[l.slot] = v
		}
		l.c.s.deleteOwnerLocked(l.spec.Generator, g, l.slot)
		if l.c.lost(OpRelease) {
			return unavailable("release", errReplyLost)
		}
		return nil
	})
	switch {
	case err == errFence:
		return l.lost(fenceFailed)
	case err != nil:
		return err
	}
	if v >= 0 {
		l.acked.Store(v)
	}
	l.finish("released")
	return nil
}
