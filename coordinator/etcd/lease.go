package etcd

import (
	"time"

	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/coordinator"
)

// lease is one acquisition of one slot. rev is the create revision of the
// owner key this holder created: every write it makes is guarded by it.
type lease struct {
	coordinator.LeaseCore
	c          *Coordinator
	ownerKey   string
	resKey     string
	sess       *session
	guardLease clientv3.LeaseID // the etcd lease the owner key is bound to
	rev        int64

	writeMu sync.Mutex // one fenced write at a time; guards res
	res     stored     // the reservation as this holder last read or wrote it
	created time.Time  // when the take was answered (Assured)
}

var _ coordinator.Lease = (*lease)(nil)

func newLease(c *Coordinator, spec coordinator.Spec, k keys, slot coordinator.Slot, sess *session,
	guardLease clientv3.LeaseID, rev int64, res stored, genFloor int64, incarnation string) *lease {
	l := &lease{c: c, ownerKey: k.owner(slot), resKey: k.reserved(slot), sess: sess, guardLease: guardLease, rev: rev, res: res,
		created: time.Now()}
	l.InitLeaseCore(spec, slot, res.value, genFloor, res.value, incarnation, c.log, func() { c.forget(l.ownerKey, l.rev) })
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		select {
		case <-sess.done:
			if !l.IsDone() {
				c.ended.Add(spec.Generator, slot, int64(guardLease))
			}
			l.Finish("etcd lease ended")
		case <-c.bg.Done():
			l.Finish("coordinator closed")
		case <-l.Ctx().Done():
		}
	}()
	return l
}

func (l *lease) etcdLease() clientv3.LeaseID { return l.sess.id }

// maxWriteRounds bounds one Reserve or Release: a write, and after the
// reservation was found changed behind the holder's back, a re-read and
// another write.
const maxWriteRounds = 5

// commit sends one holder txn, If(ownerGuard) Then(inner), retrying once
// after an error: a frozen member is dropped by the gRPC keepalive
// meanwhile, and the retry goes to another one. Repeating is safe: if the
// first one was applied, the retry's inner compare on the reservation's
// mod revision fails and the caller reads what is stored (a release's
// retry fails the owner guard instead: the first one deleted the key, and
// Release reads back what it left, releasedBefore). retried reports that
// the answer is a retry's, after an attempt whose outcome is unknown.
func (l *lease) commit(ctx context.Context, op string, inner clientv3.Op) (resp *clientv3.TxnResponse, retried bool, err error) {
	for attempt := 0; attempt < 2; attempt++ {
		cctx, cancel := l.c.call(ctx)
		resp, err = l.c.cli.Txn(cctx).If(ownerGuard(l.ownerKey, l.rev, l.guardLease)...).Then(inner).Else(clientv3.OpGet(l.ownerKey)).Commit()
		cancel()
		if err == nil || ctx.Err() != nil || l.IsDone() || isPermanent(err) {
			break
		}
		retried = true
	}
	if err != nil {
		return nil, retried, unavailable(op, err)
	}
	return resp, retried, nil
}

// resWrite is the inner txn of a holder write: If(the reservation's mod
// revision is the one this holder last saw) Then(ops, Get(reservation))
// Else(Get(reservation)). Nothing is written when the reservation moved.
func (l *lease) resWrite(ops ...clientv3.Op) clientv3.Op {
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(l.resKey), "=", l.res.modRev)},
		append(ops, clientv3.OpGet(l.resKey)),
		[]clientv3.Op{clientv3.OpGet(l.resKey)},
	)
}

// resAfter reads the reservation from a holder write's response: whether
// the inner txn ran, and what the reservation holds (parsed as a number;
// a value not in the canonical encoding is an error naming the key).
func (l *lease) resAfter(resp *clientv3.TxnResponse) (bool, stored, error) {
	in := resp.Responses[0].GetResponseTxn()
	rs := in.Responses[len(in.Responses)-1].GetResponseRange()
	cur, err := readStored(l.resKey, rs.Kvs)
	return in.Succeeded, cur, err
}

// Reserve implements coordinator.Lease: one txn guarded by the owner key's
// create revision and etcd lease; inside it, guarded by the mod revision of
// the reservation as this holder last saw it, it raises the reservation to
// until when that is higher (deciding numerically, never lowering it),
// rewrites the owner record with the heartbeat, and reads the reservation
// back to check it holds what was sent. If the reservation moved behind the
// holder's back (an operator, a bump, a restore), the value found is parsed
// as a number — refused, naming the key, when it is not in the canonical
// encoding — and the write repeated against it; a value below one already
// acknowledged to this lease is reported as a *coordinator.RolledBackError
// once raised again.
func (l *lease) Reserve(ctx context.Context, until int64, hb coordinator.Heartbeat) error {
	if until < 0 {
		return fmt.Errorf("%w: reservation %d must be >= 0", coordinator.ErrInvalidSpec, until)
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.IsDone() {
		return l.Lost("lease already ended")
	}
	acked := l.Reserved()
	v := max(until, acked)
	rec := newOwnerRecord(hb)
	var rolled *coordinator.RolledBackError
	for round := 0; round < maxWriteRounds; round++ {
		raise := v > l.res.value
		var ops []clientv3.Op
		if raise {
			ops = append(ops, clientv3.OpPut(l.resKey, pad(v)))
		}
		ops = append(ops, clientv3.OpPut(l.ownerKey, rec, clientv3.WithIgnoreLease()))
		resp, _, err := l.commit(ctx, "reserve", l.resWrite(ops...))
		if err != nil {
			if l.IsDone() {
				return l.Lost("lease ended during reserve")
			}
			return err
		}
		if !resp.Succeeded {
			if ownerGone(resp) {
				// The etcd lease ended (expired, revoked, or a restore
				// that does not show the take) and this write noticed
				// before the keepalive did: the worker is taken again
				// first, as after a lease the keepalive saw end.
				l.c.ended.Add(l.Spec().Generator, l.Slot(), int64(l.guardLease))
			}
			return l.Lost("owner key is gone, was re-created or is bound to another etcd lease (fence failed)")
		}
		applied, cur, err := l.resAfter(resp)
		if err != nil {
			return err
		}
		l.res = cur
		if !applied {
			// Written behind this holder's back: decide on what is there.
			if cur.value < acked && rolled == nil {
				rolled = &coordinator.RolledBackError{Generator: l.Spec().Generator, Slot: l.Slot(), Seen: cur.value, Acked: acked}
			}
			continue
		}
		if cur.value < v || (raise && cur.value != v) {
			return fmt.Errorf("etcd: reservation %s holds %d after the write of %d was acknowledged", l.resKey, cur.value, v)
		}
		l.SetReserved(v)
		if rolled != nil {
			return rolled
		}
		return nil
	}
	return fmt.Errorf("%w: etcd reserve: reservation %s kept changing (%d rounds)", coordinator.ErrUnavailable, l.resKey, maxWriteRounds)
}

// Release implements coordinator.Lease: in one txn guarded like Reserve it
// sets the reservation to max(highest, Floor) and deletes the owner key.
// The reservation is set only while it holds no more than max(what this
// lease had acknowledged, that value), compared as numbers (a bump made
// meanwhile is kept).
func (l *lease) Release(ctx context.Context, highest int64) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.IsDone() {
		return l.Lost("lease already ended")
	}
	v := max(highest, l.Floor())
	acked := l.Reserved()
	for round := 0; round < maxWriteRounds; round++ {
		set := v >= 0 && l.res.value <= max(acked, v) && l.res.value != v
		ops := []clientv3.Op{clientv3.OpDelete(l.ownerKey)}
		if set {
			ops = append(ops, clientv3.OpPut(l.resKey, pad(v)))
		}
		resp, retried, err := l.commit(ctx, "release", l.resWrite(ops...))
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			if retried {
				if released, sent := l.releasedBefore(ctx, v, set); released {
					if sent && v >= 0 {
						l.SetReserved(v)
					}
					l.Finish("released")
					return nil // applied: the answer was lost
				}
			}
			return l.Lost("owner key is gone, was re-created or is bound to another etcd lease (fence failed)")
		}
		applied, cur, err := l.resAfter(resp)
		if err != nil {
			return err
		}
		l.res = cur
		if !applied {
			continue // written behind this holder's back: decide again
		}
		if set && cur.value != v {
			return fmt.Errorf("etcd: reservation %s holds %d after the write of %d was acknowledged", l.resKey, cur.value, v)
		}
		if v >= 0 {
			l.SetReserved(v)
		}
		l.Finish("released")
		return nil
	}
	return fmt.Errorf("%w: etcd release: reservation %s kept changing (%d rounds)", coordinator.ErrUnavailable, l.resKey, maxWriteRounds)
}

// releasedBefore reads back, in one txn, what a release whose answer was
// lost left (the retry found the owner guard failing): it was applied if
// the owner key is no longer this holder's (gone, or a later holder's)
// and the reservation holds what the release sent (set: v; else
// untouched since this holder last read it), or was written after a later
// holder took the key. sent reports that the reservation holds what the
// release meant it to.
func (l *lease) releasedBefore(ctx context.Context, v int64, set bool) (released, sent bool) {
	cctx, cancel := l.c.call(ctx)
	resp, err := l.c.cli.Txn(cctx).Then(clientv3.OpGet(l.ownerKey), clientv3.OpGet(l.resKey)).Commit()
	cancel()
	if err != nil {
		return false, false
	}
	owners := resp.Responses[0].GetResponseRange().Kvs
	if len(owners) == 1 && owners[0].CreateRevision == l.rev && clientv3.LeaseID(owners[0].Lease) == l.guardLease {
		return false, false // still this holder's: the guard failed on nothing the release did
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	cur, err := readStored(l.resKey, kvs)
	if err != nil || len(kvs) != 1 {
		return false, false
	}
	switch {
	case set && cur.value == v, !set && cur.modRev == l.res.modRev:
		return true, true
	case len(owners) == 1 && cur.modRev > owners[0].CreateRevision:
		return true, false // a later holder's since
	}
	return false, false
}

// ownerGone reports whether a holder txn whose owner guard failed found
// the owner key absent (its Else branch reads it).
func ownerGone(resp *clientv3.TxnResponse) bool {
	return len(resp.Responses) == 1 && len(resp.Responses[0].GetResponseRange().Kvs) == 0
}

// LeaseID returns the etcd lease behind a lease from this backend (for
// tests and tools that revoke it from outside).
func LeaseID(l coordinator.Lease) (clientv3.LeaseID, bool) {
	el, ok := l.(*lease)
	if !ok {
		return 0, false
	}
	return el.etcdLease(), true
}

// Assured is how long etcd keeps the lease's etcd lease at least: its TTL
// from when the last acknowledged renewal was sent.
func (l *lease) Assured() time.Duration {
	if l.IsDone() {
		return 0
	}
	return l.sess.assured(l.created)
}
