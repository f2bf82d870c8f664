package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/firnid/firn/coordinator"
)

// lease is one acquisition of one slot. Every write it makes is fenced on
// its owner record: the record must still carry the ownership token
// (the revision of the take) and the session this holder bound it to.
type lease struct {
	coordinator.LeaseCore
	c            *Client
	sess         *session // the client session whose loss ends the lease
	guardSession int64    // the session the owner record is bound to
	token        int64

	write chan struct{} // one write at a time (a channel: durably blocking under synctest)

	created time.Time // when the take was answered (Assured)
}

var _ coordinator.Lease = (*lease)(nil)

func newLease(c *Client, spec coordinator.Spec, slot coordinator.Slot, sess *session, guardSession, token, readR, genFloor int64, incarnation string) *lease {
	l := &lease{c: c, sess: sess, guardSession: guardSession, token: token, write: make(chan struct{}, 1), created: time.Now()}
	l.InitLeaseCore(spec, slot, readR, genFloor, readR, incarnation, c.log, func() { c.unregister(l) })
	return l
}

// Token is the lease's ownership token: the revision at which its owner
// record was created (reused by acquisitions after a Restore).
func (l *lease) Token() int64 { return l.token }

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
	g := l.c.s.st.gen(l.Spec().Generator, false)
	if g == nil {
		return nil, false
	}
	o, ok := g.owners[l.Slot()]
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
	if l.IsDone() {
		return l.Lost("lease already ended")
	}
	acked := l.Reserved()
	v := max(until, acked)
	var rolled *coordinator.RolledBackError
	gone := false
	err := l.c.call(ctx, OpReserve, "reserve", func(time.Time) error {
		g, ok := l.fencedLocked()
		if !ok {
			if g == nil {
				gone = true
			} else {
				_, owned := g.owners[l.Slot()]
				gone = !owned
			}
			return errFence
		}
		st := l.c.s.st
		cur := g.reservedOf(l.Slot())
		if cur < acked {
			rolled = &coordinator.RolledBackError{Generator: l.Spec().Generator, Slot: l.Slot(), Seen: cur, Acked: acked}
		}
		st.rev++
		if v > cur {
			g.reserved[l.Slot()] = v
		}
		o := g.owners[l.Slot()]
		o.rec = record(hb)
		l.c.s.putOwnerLocked(l.Spec().Generator, g, l.Slot(), o)
		if l.c.lost(OpReserve) {
			return unavailable("reserve", errReplyLost)
		}
		return nil
	})
	switch {
	case err == errFence:
		if gone {
			// The session ended on the store and this write noticed
			// before the renewal did: the worker is taken again first,
			// as after a session the renewal saw end.
			l.c.ended.Add(l.Spec().Generator, l.Slot(), l.guardSession)
		}
		return l.Lost(fenceFailed)
	case err != nil:
		if l.IsDone() {
			return l.Lost("lease ended during reserve")
		}
		return err
	}
	l.SetReserved(v)
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
	if l.IsDone() {
		return l.Lost("lease already ended")
	}
	v := max(highest, l.Floor())
	acked := l.Reserved()
	err := l.c.call(ctx, OpRelease, "release", func(time.Time) error {
		g, ok := l.fencedLocked()
		if !ok {
			return errFence
		}
		l.c.s.st.rev++
		if cur := g.reservedOf(l.Slot()); v >= 0 && cur <= max(acked, v) && cur != v {
			g.reserved[l.Slot()] = v
		}
		l.c.s.deleteOwnerLocked(l.Spec().Generator, g, l.Slot())
		if l.c.lost(OpRelease) {
			return unavailable("release", errReplyLost)
		}
		return nil
	})
	switch {
	case err == errFence:
		return l.Lost(fenceFailed)
	case err != nil:
		return err
	}
	if v >= 0 {
		l.SetReserved(v)
	}
	l.Finish("released")
	return nil
}

// Assured is how long the store keeps the lease at least: the TTL from
// when the session's last acknowledged renewal was sent (an injected
// Expire or a Restore ends it sooner, as a revoke would in etcd).
func (l *lease) Assured() time.Duration {
	if l.IsDone() {
		return 0
	}
	return l.sess.assured(l.created)
}
