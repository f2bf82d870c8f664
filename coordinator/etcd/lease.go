package etcd

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/coordinator"
)

// lease is one acquisition of one slot. rev is the create revision of the
// owner key this holder created: every write it makes is guarded by it.
type lease struct {
	c           *Coordinator
	spec        coordinator.Spec
	slot        coordinator.Slot
	ownerKey    string
	resKey      string
	sess        *session
	guardLease  clientv3.LeaseID // the etcd lease the owner key is bound to
	rev         int64
	readR       int64
	floor       int64
	incarnation string

	writeMu sync.Mutex // one fenced write at a time
	acked   atomic.Int64
	done    chan struct{}
	once    sync.Once
	ctx     context.Context
	cancel  context.CancelFunc
}

var _ coordinator.Lease = (*lease)(nil)

func newLease(c *Coordinator, spec coordinator.Spec, k keys, slot coordinator.Slot, sess *session,
	guardLease clientv3.LeaseID, rev, readR, genFloor int64, incarnation string) *lease {
	ctx, cancel := context.WithCancel(context.Background())
	l := &lease{
		c: c, spec: spec, slot: slot, ownerKey: k.owner(slot), resKey: k.reserved(slot),
		sess: sess, guardLease: guardLease, rev: rev, readR: readR, floor: max(readR, spec.LocalFloor, genFloor), incarnation: incarnation,
		done: make(chan struct{}), ctx: ctx, cancel: cancel,
	}
	l.acked.Store(readR)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		select {
		case <-sess.done:
			l.finish("etcd lease ended")
		case <-c.bg.Done():
			l.finish("coordinator closed")
		case <-ctx.Done():
		}
	}()
	return l
}

func (l *lease) WorkerID() uint64            { return l.slot.Worker }
func (l *lease) Datacenter() uint64          { return l.slot.Datacenter }
func (l *lease) Slot() coordinator.Slot      { return l.slot }
func (l *lease) ReadReserved() int64         { return l.readR }
func (l *lease) Floor() int64                { return l.floor }
func (l *lease) Incarnation() string         { return l.incarnation }
func (l *lease) Reserved() int64             { return l.acked.Load() }
func (l *lease) Done() <-chan struct{}       { return l.done }
func (l *lease) Ctx() context.Context        { return l.ctx }
func (l *lease) etcdLease() clientv3.LeaseID { return l.sess.id }

func (l *lease) finish(why string) {
	l.once.Do(func() {
		close(l.done)
		l.cancel()
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

// Reserve implements coordinator.Lease: one txn guarded by the owner key's
// create revision that reads the old reservation, raises it to until
// (never lowering it) and rewrites the owner record with the heartbeat.
func (l *lease) Reserve(ctx context.Context, until int64, hb coordinator.Heartbeat) error {
	if until < 0 {
		return fmt.Errorf("%w: reservation %d must be >= 0", coordinator.ErrInvalidSpec, until)
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.isDone() {
		return l.lost("lease already ended")
	}
	acked := l.acked.Load()
	v := max(until, acked)
	var resp *clientv3.TxnResponse
	var err error
	// One retry after a timeout: a frozen member is dropped by the gRPC
	// keepalive meanwhile, and the retry goes to another one. The txn is
	// safe to repeat (same guard, same value).
	for attempt := 0; attempt < 2; attempt++ {
		cctx, cancel := l.c.call(ctx)
		resp, err = l.c.cli.Txn(cctx).
			If(ownerGuard(l.ownerKey, l.rev, l.guardLease)).
			Then(
				clientv3.OpGet(l.resKey),
				raiseTo(l.resKey, v),
				clientv3.OpPut(l.ownerKey, newOwnerRecord(hb), clientv3.WithIgnoreLease()),
			).Commit()
		cancel()
		if err == nil || ctx.Err() != nil || l.isDone() || isPermanent(err) {
			break
		}
	}
	if err != nil {
		if l.isDone() {
			return l.lost("lease ended during reserve")
		}
		return unavailable("reserve", err)
	}
	if !resp.Succeeded {
		return l.lost("owner key is gone or was re-created (fence failed)")
	}
	prev := int64(-1)
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if p, err := parseValue(kvs[0].Value); err == nil {
			prev = p
		}
	}
	l.acked.Store(v)
	if prev < acked {
		return &coordinator.RolledBackError{Generator: l.spec.Generator, Slot: l.slot, Seen: prev, Acked: acked}
	}
	return nil
}

// Release implements coordinator.Lease: in one txn guarded by the owner
// key's create revision it lowers the reservation to max(highest, Floor)
// and deletes the owner key. The reservation is lowered only while it
// holds no more than this lease had acknowledged (a bump made meanwhile is
// kept).
func (l *lease) Release(ctx context.Context, highest int64) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.isDone() {
		return l.lost("lease already ended")
	}
	v := max(highest, l.floor)
	acked := l.acked.Load()
	then := []clientv3.Op{clientv3.OpDelete(l.ownerKey)}
	if v >= 0 {
		p := pad(v)
		then = append(then, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Version(l.resKey), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(l.resKey, p)},
			[]clientv3.Op{clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value(l.resKey), "<", pad(max(acked, v)+1))},
				[]clientv3.Op{clientv3.OpPut(l.resKey, p)}, nil)},
		))
	}
	var resp *clientv3.TxnResponse
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		cctx, cancel := l.c.call(ctx)
		resp, err = l.c.cli.Txn(cctx).If(ownerGuard(l.ownerKey, l.rev, l.guardLease)).Then(then...).Commit()
		cancel()
		if err == nil || ctx.Err() != nil || isPermanent(err) {
			break
		}
	}
	if err != nil {
		return unavailable("release", err)
	}
	if !resp.Succeeded {
		return l.lost("owner key is gone or was re-created (fence failed)")
	}
	if v >= 0 {
		l.acked.Store(v)
	}
	l.finish("released")
	return nil
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
