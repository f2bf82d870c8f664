package zookeeper

import (
	"time"

	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/firnid/firn/coordinator"
)

// maxWriteRounds bounds one Reserve or Release: a write, and after a
// failure or a lost answer a re-read and another write. A request that
// failed because the client had no connection is followed by a wait for
// its next one (awaitConnection), not by the next request at once.
const maxWriteRounds = 4

// lease is one acquisition of one slot. Its identity is the owner node it
// created (czxid, in session); rv and ov are the versions of the
// reservation and owner nodes as this holder last wrote or confirmed them.
type lease struct {
	coordinator.LeaseCore
	c         *Coordinator
	ownerPath string
	resPath   string
	session   int64
	owner     int64 // session owning the owner node (= session, but for the weak take-back)
	czxid     int64

	created time.Time // when the take was answered (Assured)

	writeMu sync.Mutex // one fenced write at a time; guards rv, ov
	rv, ov  int32
}

var _ coordinator.Lease = (*lease)(nil)

func newLease(c *Coordinator, spec coordinator.Spec, p paths, slot coordinator.Slot, session, czxid int64,
	ov, rv int32, readR, genFloor int64, resBytes []byte, incarnation string) *lease {
	l := &lease{c: c, ownerPath: p.owner(slot), resPath: p.reserved(slot), session: session, owner: session, czxid: czxid, rv: rv, ov: ov,
		created: time.Now()}
	acked := readR
	if v, err := parseValue(resBytes); err == nil {
		acked = max(acked, v)
	}
	l.InitLeaseCore(spec, slot, readR, genFloor, acked, incarnation, c.log, func() { c.unregister(l) })
	return l
}

// Session is the ZooKeeper session the lease's owner node belongs to.
func (l *lease) Session() int64 { return l.session }

// reread reads the reservation, then the owner node. The order matters: if
// the owner node is still this lease's (same creation zxid), nobody else
// held the slot at any time up to the second read, so the reservation read
// before it was written only by this holder (or by an operator).
func (l *lease) reread(ctx context.Context) (res []byte, rst *zk.Stat, owner *zk.Stat, err error) {
	res, rst, err = l.c.get(ctx, l.resPath)
	if err != nil {
		return nil, nil, nil, err
	}
	owner, err = l.c.exists(ctx, l.ownerPath)
	if err != nil {
		return nil, nil, nil, err
	}
	return res, rst, owner, nil
}

func (l *lease) ours(owner *zk.Stat) bool {
	return owner != nil && owner.Czxid == l.czxid && owner.EphemeralOwner == l.owner
}

// Reserve implements coordinator.Lease with one multi: setData of the
// reservation and of the owner record (the heartbeat), each at the version
// this holder last wrote. After a failed or unanswered multi it re-reads:
// the lease is kept only while the owner node is still the one this lease
// created in its session. Then, if the reservation holds what was sent,
// the write was applied; if it is untouched, it is sent again; if someone
// else wrote it (an operator or a restore), the new version is adopted and
// the write repeated — a value below one already acknowledged is reported
// as a *coordinator.RolledBackError after it has been raised again.
func (l *lease) Reserve(ctx context.Context, until int64, hb coordinator.Heartbeat) error {
	if until < 0 {
		return fmt.Errorf("%w: reservation %d must be >= 0", coordinator.ErrInvalidSpec, until)
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.IsDone() {
		return l.Lost("lease already ended")
	}
	if sid := l.c.sid.Load(); sid != l.session {
		return l.Lost("zookeeper session ended")
	}
	acked := l.Reserved()
	v := max(until, acked)
	rec := encodeOwner(hb)
	var rolled *coordinator.RolledBackError
	var last error
	for round := 0; round < maxWriteRounds; round++ {
		if round > 0 && l.IsDone() {
			return l.Lost("zookeeper session expired")
		}
		data := encodeValue(v)
		ops, resIdx, ownerIdx := reserveOps(l.resPath, data, l.rv, l.ownerPath, rec, l.ov)
		next := l.c.nextHandshake()
		res, err := l.c.multi(ctx, ops)
		if err == nil {
			l.rv, l.ov = res[resIdx].Stat.Version, res[ownerIdx].Stat.Version
			l.SetReserved(v)
			if rolled != nil {
				return rolled
			}
			return nil
		}
		if errors.Is(err, zk.ErrSessionExpired) {
			return l.Lost("zookeeper session expired")
		}
		if isPermanent(err) {
			return unavailable("reserve", err)
		}
		last = err
		if !l.c.awaitConnection(ctx, next, err) {
			break
		}
		next = l.c.nextHandshake()
		cur, rst, owner, rerr := l.reread(ctx)
		if rerr != nil {
			// Ownership and outcome unknown: not extended. Try again while
			// time remains (an expiry learned on reconnecting ends the
			// lease meanwhile); the next call re-reads otherwise (its
			// versions will not match if this one landed).
			if l.IsDone() {
				return l.Lost("zookeeper session expired")
			}
			last = errors.Join(err, rerr)
			if !l.c.awaitConnection(ctx, next, rerr) {
				break
			}
			continue
		}
		if !l.ours(owner) {
			return l.Lost("owner node is gone or was re-created (fence failed)")
		}
		l.ov = owner.Version
		if rst.Version == l.rv {
			continue // not applied: send it again
		}
		if bytes.Equal(cur, data) {
			l.rv = rst.Version
			l.SetReserved(v)
			if rolled != nil {
				return rolled
			}
			return nil // applied: the answer was lost
		}
		seen, perr := parsePath(l.resPath, cur)
		if perr != nil {
			// Not adopted: no later write of this holder goes over it.
			return perr
		}
		l.rv = rst.Version
		if seen < acked && rolled == nil {
			rolled = &coordinator.RolledBackError{Generator: l.Spec().Generator, Slot: l.Slot(), Seen: seen, Acked: acked}
		}
		v = max(v, seen)
	}
	return unavailable("reserve: outcome unknown", fmt.Errorf("no outcome after %d rounds: %w", maxWriteRounds, last))
}

// Release implements coordinator.Lease: in one multi fenced like Reserve it
// lowers the reservation to max(highest, Floor) and deletes the owner node.
// A reservation raised behind the holder's back above what it had
// acknowledged (a bump) is kept, not lowered.
func (l *lease) Release(ctx context.Context, highest int64) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.IsDone() {
		return l.Lost("lease already ended")
	}
	if sid := l.c.sid.Load(); sid != l.session {
		return l.Lost("zookeeper session ended")
	}
	acked := l.Reserved()
	target := max(highest, l.Floor())
	var last error
	for round := 0; round < maxWriteRounds; round++ {
		if round > 0 && l.IsDone() {
			return l.Lost("zookeeper session expired before release")
		}
		data := encodeValue(target)
		ops, _ := releaseOps(l.resPath, data, l.rv, l.ownerPath, l.ov)
		next := l.c.nextHandshake()
		_, err := l.c.multi(ctx, ops)
		if err == nil {
			l.SetReserved(target)
			l.Finish("released")
			return nil
		}
		if errors.Is(err, zk.ErrSessionExpired) {
			return l.Lost("zookeeper session expired before release")
		}
		if isPermanent(err) {
			return unavailable("release", err)
		}
		last = err
		if !l.c.awaitConnection(ctx, next, err) {
			break
		}
		next = l.c.nextHandshake()
		cur, rst, owner, rerr := l.reread(ctx)
		if rerr != nil {
			if l.IsDone() {
				return l.Lost("zookeeper session expired before release")
			}
			last = errors.Join(err, rerr)
			if !l.c.awaitConnection(ctx, next, rerr) {
				break
			}
			continue
		}
		if !l.ours(owner) {
			if bytes.Equal(cur, data) {
				l.SetReserved(target)
				l.Finish("released")
				return nil // applied: the answer was lost
			}
			return l.Lost("owner node is gone or was re-created before release (fence failed)")
		}
		l.ov = owner.Version
		if rst.Version != l.rv {
			seen, err := parsePath(l.resPath, cur)
			if err != nil {
				return err
			}
			l.rv = rst.Version
			if seen > acked {
				target = max(target, seen) // a bump made meanwhile is kept
			}
		}
	}
	return unavailable("release: outcome unknown", fmt.Errorf("no outcome after %d rounds: %w", maxWriteRounds, last))
}

// SessionOf returns the ZooKeeper session behind a lease from this backend
// (for tests and tools that expire it from outside).
func SessionOf(l coordinator.Lease) (int64, bool) {
	zl, ok := l.(*lease)
	if !ok {
		return 0, false
	}
	return zl.session, true
}

// Assured is how long ZooKeeper keeps the lease's session at least: its
// timeout from when the session's latest request the leader answered (a
// write or a sync, not a read: see read) was sent.
func (l *lease) Assured() time.Duration {
	if l.IsDone() {
		return 0
	}
	return l.c.assured(l.session, l.created)
}
