package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/internal/testing/coordtest"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func quietConfig(endpoints []string, cluster string) etcd.Config {
	cfg := etcd.DefaultConfig()
	cfg.Endpoints, cfg.Clock, cfg.Cluster, cfg.Logger = endpoints, clockguard.NewSystem(), cluster, quiet
	return cfg
}

// isTake reports whether a request is an acquisition's take txn: the
// only txn whose success branch puts a key bound to an etcd lease.
func isTake(req any) bool {
	txn, ok := req.(*pb.TxnRequest)
	if !ok {
		return false
	}
	for _, op := range txn.Success {
		if put := op.GetRequestPut(); put != nil && put.Lease != 0 {
			return true
		}
	}
	return false
}

// takeInterceptor runs before(), when set, ahead of the next take txn,
// and loses the reply of a take txn while drop > 0: the txn is applied by
// the server, the client sees an error, as after a broken connection.
func takeInterceptor(before *atomic.Pointer[func()], drop *atomic.Int32) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !isTake(req) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if f := before.Swap(nil); f != nil {
			(*f)()
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && drop.Add(-1) >= 0 {
			return status.Error(codes.Unavailable, "test: the reply of the take txn was lost")
		}
		return err
	}
}

// holdRenewals makes every lease renewal stream wait until its context
// ends while hold is set: the renewals never reach the server, as for a
// paused process or a keepalive answer that has not arrived yet.
func holdRenewals(hold *atomic.Bool) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if hold.Load() && strings.HasSuffix(method, "/LeaseKeepAlive") {
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}

func createRevision(t *testing.T, cli *clientv3.Client, key string) (int64, clientv3.LeaseID) {
	t.Helper()
	for i := 0; ; i++ {
		g, err := cli.Get(ctxFor(t, 5*time.Second), key)
		if err == nil {
			if len(g.Kvs) != 1 {
				t.Fatalf("%s is absent", key)
			}
			return g.Kvs[0].CreateRevision, clientv3.LeaseID(g.Kvs[0].Lease)
		}
		if i == 50 {
			t.Fatalf("reading %s: %v", key, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestFenceLeaseRestore: Debian's etcd restored from a snapshot without
// --bump-revision (3.4's etcdctl has none) reuses revision numbers. Holder
// A acquires a worker after the snapshot; the member is lost and restored;
// holder B then takes the same worker, and its owner key gets the create
// revision A's guard compares. A, whose renewals have not told it yet
// that its etcd lease is gone, must not get a write acknowledged: the
// guard's lease compare refuses it (ErrLeaseLost). Under build tag
// firn_weakfence_lease, which drops that compare, A's write lands on B's
// worker and this test fails.
func TestFenceLeaseRestore(t *testing.T) {
	p := etcdtest.StartCluster(t, 1)
	m := p.Members[0]
	admin := p.Client(t)
	defer admin.Close()
	spec := coordtest.Spec("gen", 4)
	base := quietConfig(p.Endpoints(), "restore")

	// The generator is pinned (and its cursor set) before the snapshot.
	pre := newCoord(t, base)
	first := coordtest.Node("first")
	l0, err := pre.Acquire(ctxFor(t, 20*time.Second), spec, first)
	if err != nil {
		t.Fatal(err)
	}
	if err := l0.Reserve(ctxFor(t, 10*time.Second), 50, coordtest.Beat(first)); err != nil {
		t.Fatal(err)
	}
	if err := l0.Release(ctxFor(t, 10*time.Second), 50); err != nil {
		t.Fatal(err)
	}
	pre.Close()
	snap := filepath.Join(t.TempDir(), "snapshot.db")
	m.SaveSnapshot(t, snap)

	// A acquires after the snapshot. Its renewals are held: it keeps
	// believing in its etcd lease across the restore.
	var hold atomic.Bool
	hold.Store(true)
	acfg := etcd.WithDialOptions(base, grpc.WithChainStreamInterceptor(holdRenewals(&hold)))
	acfg.Timing.LeaseTTL = 60 * time.Second
	a := newCoord(t, acfg)
	na := coordtest.Node("a")
	la, err := a.Acquire(ctxFor(t, 20*time.Second), spec, na)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Reserve(ctxFor(t, 10*time.Second), 100, coordtest.Beat(na)); err != nil {
		t.Fatal(err)
	}
	ownerKey := etcd.OwnerKey(a.Root(), spec.Generator, la.Slot())
	revA, leaseA := createRevision(t, admin, ownerKey)

	p.RestoreSnapshot(t, m, snap) // no --bump-revision

	b := newCoord(t, base)
	nb := coordtest.Node("b")
	lb, err := b.Acquire(ctxFor(t, 20*time.Second), spec, nb)
	if err != nil {
		t.Fatal(err)
	}
	revB, leaseB := createRevision(t, admin, ownerKey)
	if lb.Slot() != la.Slot() || revB != revA || leaseB == leaseA {
		t.Fatalf("the premise does not hold: A holds %s (revision %d, lease %x), B got %s (revision %d, lease %x); want the same slot and revision under another lease",
			la.Slot(), revA, int64(leaseA), lb.Slot(), revB, int64(leaseB))
	}
	if err := lb.Reserve(ctxFor(t, 10*time.Second), 150, coordtest.Beat(nb)); err != nil {
		t.Fatal(err)
	}

	// A writes again: its guard compares the create revision B's key has.
	for i := 0; i < 3; i++ {
		var err error
		for try := 0; ; try++ {
			err = la.Reserve(ctxFor(t, 10*time.Second), int64(200+i), coordtest.Beat(na))
			if !errors.Is(err, coordinator.ErrUnavailable) || try == 60 {
				break // reconnected to the restored member, or give up
			}
			time.Sleep(250 * time.Millisecond)
		}
		if !errors.Is(err, coordinator.ErrLeaseLost) {
			t.Fatalf("A's Reserve after the restore (try %d), against B's owner key of the same create revision: %v, want ErrLeaseLost", i, err)
		}
	}
	if err := la.Release(ctxFor(t, 10*time.Second), 100); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("A's Release after the restore: %v, want ErrLeaseLost", err)
	}
	g, err := admin.Get(ctxFor(t, 5*time.Second), etcd.ReservedKey(a.Root(), spec.Generator, la.Slot()))
	if err != nil || len(g.Kvs) != 1 {
		t.Fatalf("reading B's reservation: %v", err)
	}
	if v, err := etcd.DecodeReserved(g.Kvs[0].Value); err != nil || v != 150 {
		t.Fatalf("B's reservation holds %q after A's attempts, want B's 150", g.Kvs[0].Value)
	}
	if err := lb.Reserve(ctxFor(t, 10*time.Second), 300, coordtest.Beat(nb)); err != nil {
		t.Fatalf("B's Reserve after A's attempts: %v", err)
	}
}

// TestStrayOwnerAfterLostTakeReply: a take txn applied by etcd whose reply
// is lost leaves an owner key bound to the coordinator's live etcd lease
// that no lease holds. The retry (within the same Acquire, and any later
// one) deletes it: the workers in use do not grow, and the stray slot is
// free again.
func TestStrayOwnerAfterLostTakeReply(t *testing.T) {
	srv := etcdtest.StartEmbedded(t)
	var before atomic.Pointer[func()]
	var drop atomic.Int32
	cfg := etcd.WithDialOptions(quietConfig(srv.Endpoints, "stray"), grpc.WithChainUnaryInterceptor(takeInterceptor(&before, &drop)))
	c := newCoord(t, cfg)
	spec := coordtest.Spec("gen", 4)
	live := func() []coordinator.SlotState {
		t.Helper()
		hs, err := c.Workers(ctxFor(t, 10*time.Second), spec.Generator)
		if err != nil {
			t.Fatal(err)
		}
		var out []coordinator.SlotState
		for _, h := range hs {
			if h.Live {
				out = append(out, h)
			}
		}
		return out
	}
	var held []coordinator.Lease
	for i := 0; i < 3; i++ {
		n := coordtest.Node(fmt.Sprintf("n%d", i))
		drop.Store(1)
		l, err := c.Acquire(ctxFor(t, 20*time.Second), spec, n)
		if err != nil {
			t.Fatalf("acquisition %d with its first take reply lost: %v", i, err)
		}
		if drop.Load() >= 1 {
			t.Fatalf("acquisition %d: no take reply was lost", i)
		}
		held = append(held, l)
		if got := live(); len(got) != len(held) {
			t.Fatalf("after %d acquisitions, each with a lost take reply: %d workers in use (%+v), want %d", i+1, len(got), got, len(held))
		}
		if err := l.Reserve(ctxFor(t, 10*time.Second), int64(100*(i+1)), coordtest.Beat(n)); err != nil {
			t.Fatal(err)
		}
	}
	// The worker space is not burnt: with 3 held, the 4th slot is free.
	l, err := c.Acquire(ctxFor(t, 20*time.Second), spec, coordtest.Node("last"))
	if err != nil {
		t.Fatalf("4th acquisition on 4 workers with 3 held: %v", err)
	}
	held = append(held, l)
	if got := live(); len(got) != 4 {
		t.Fatalf("%d workers in use, want 4", len(got))
	}
	// Leases this coordinator holds are never taken for strays.
	for _, l := range held {
		if err := l.Reserve(ctxFor(t, 10*time.Second), 1000, coordtest.Beat(coordtest.Node("x"))); err != nil {
			t.Fatalf("Reserve on %s after the stray clean-ups: %v", l.Slot(), err)
		}
	}
}

// TestMarkerCheckedInTake: a restore marker written between an
// acquisition's scan and its take txn still refuses it: the take compares
// the marker's absence in the same txn.
func TestMarkerCheckedInTake(t *testing.T) {
	srv := etcdtest.StartEmbedded(t)
	var before atomic.Pointer[func()]
	var drop atomic.Int32
	cfg := etcd.WithDialOptions(quietConfig(srv.Endpoints, "marker-race"), grpc.WithChainUnaryInterceptor(takeInterceptor(&before, &drop)))
	c := newCoord(t, cfg)
	other := newCoord(t, quietConfig(srv.Endpoints, "marker-race"))
	spec := coordtest.Spec("gen", 4)
	mustAcquire := func(n string) coordinator.Lease {
		l, err := c.Acquire(ctxFor(t, 20*time.Second), spec, coordtest.Node(n))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := mustAcquire("first") // pins the generator
	ev := coordinator.RestoreEvidence{Generator: "gen", Slot: l.Slot(), Acked: 500, Shown: 200,
		At: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Node: coordtest.Node("noticer")}
	var markErr error
	mark := func() { markErr = other.MarkRestored(context.Background(), ev) }
	before.Store(&mark)
	_, err := c.Acquire(ctxFor(t, 20*time.Second), spec, coordtest.Node("racer"))
	if markErr != nil {
		t.Fatal(markErr)
	}
	var re *coordinator.RestoredError
	if !errors.As(err, &re) || re.Evidence != ev {
		t.Fatalf("acquisition whose take followed the marker's write: %v, want *RestoredError with the evidence", err)
	}
	hs, _ := c.Workers(ctxFor(t, 10*time.Second), "gen")
	if n := len(hs); n != 1 {
		t.Fatalf("%d slots in use after the refused acquisition, want 1: %+v", n, hs)
	}
}

// TestNumbersComparedAsNumbers: a reservation hand-written in a form other
// than the canonical 19 digits under a live holder never lets Reserve
// report success (or a rollback it claims to have raised) while the value
// stored stays below what was asked: Reserve either raises it, or refuses
// naming the key. A lower canonical value is raised. Bump and Acquire
// refuse such a value naming the key as well.
func TestNumbersComparedAsNumbers(t *testing.T) {
	srv := etcdtest.StartEmbedded(t)
	c := newCoord(t, quietConfig(srv.Endpoints, "numbers"))
	cli := c.Client()
	read := func(key string) string {
		g, err := cli.Get(ctxFor(t, 5*time.Second), key)
		if err != nil || len(g.Kvs) != 1 {
			t.Fatalf("reading %s: %v", key, err)
		}
		return string(g.Kvs[0].Value)
	}
	i := 0
	for _, acked := range []int64{10, 100} {
		for _, bad := range []string{"42", "+42", " 42", "42 ", "0042", "4.2e1", "forty-two", ""} {
			i++
			spec := coordtest.Spec(fmt.Sprintf("num%d", i), 1)
			n := coordtest.Node("holder")
			l, err := c.Acquire(ctxFor(t, 20*time.Second), spec, n)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Reserve(ctxFor(t, 10*time.Second), acked, coordtest.Beat(n)); err != nil {
				t.Fatal(err)
			}
			key := etcd.ReservedKey(c.Root(), spec.Generator, l.Slot())
			if _, err := cli.Put(ctxFor(t, 5*time.Second), key, bad); err != nil {
				t.Fatal(err)
			}
			err = l.Reserve(ctxFor(t, 10*time.Second), 200, coordtest.Beat(n))
			stored := read(key)
			v, perr := etcd.DecodeReserved([]byte(stored))
			switch {
			case err == nil || errors.Is(err, coordinator.ErrRolledBack):
				if perr != nil || v < 200 {
					t.Fatalf("acked %d, hand-written %q: Reserve(200) returned %v while %s holds %q", acked, bad, err, key, stored)
				}
			case !strings.Contains(err.Error(), key):
				t.Fatalf("acked %d, hand-written %q: Reserve(200) refused with %v, which does not name %s", acked, bad, err, key)
			}
			if perr != nil {
				// Refused: so are a bump and a new acquisition, naming the key.
				_, berr := c.Bump(ctxFor(t, 10*time.Second), coordinator.BumpSpec{Generator: spec.Generator, By: 10, Now: 0, MaxTime: 1 << 50})
				if berr == nil || !strings.Contains(berr.Error(), key) {
					t.Fatalf("hand-written %q: Bump: %v, want a refusal naming %s", bad, berr, key)
				}
				_, aerr := c.Acquire(ctxFor(t, 10*time.Second), spec, coordtest.Node("another"))
				if aerr == nil || !strings.Contains(aerr.Error(), key) {
					t.Fatalf("hand-written %q: Acquire: %v, want a refusal naming %s", bad, aerr, key)
				}
			}
		}
	}
	// A lower canonical value is raised, and reported as a rollback.
	spec := coordtest.Spec("canonical", 1)
	n := coordtest.Node("holder")
	l, err := c.Acquire(ctxFor(t, 20*time.Second), spec, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(ctxFor(t, 10*time.Second), 100, coordtest.Beat(n)); err != nil {
		t.Fatal(err)
	}
	key := etcd.ReservedKey(c.Root(), spec.Generator, l.Slot())
	if _, err := cli.Put(ctxFor(t, 5*time.Second), key, etcd.EncodeReserved(42)); err != nil {
		t.Fatal(err)
	}
	err = l.Reserve(ctxFor(t, 10*time.Second), 200, coordtest.Beat(n))
	var rb *coordinator.RolledBackError
	if !errors.As(err, &rb) || rb.Seen != 42 || rb.Acked != 100 || read(key) != etcd.EncodeReserved(200) {
		t.Fatalf("canonical 42 under an acked 100: Reserve(200) = %v, stored %q; want a rollback 42 < 100 and 200 stored", err, read(key))
	}
}

// TestFenceLeaseCounterRestore: coordtest.FenceLeaseCounterRestore on
// Debian's etcd restored from a snapshot without --bump-revision, which
// reuses revision numbers (see TestFenceLeaseRestore).
func TestFenceLeaseCounterRestore(t *testing.T) {
	p := etcdtest.StartCluster(t, 1)
	m := p.Members[0]
	base := quietConfig(p.Endpoints(), "counter-restore")
	pre, a, b := newCoord(t, base), newCoord(t, base), newCoord(t, base)
	snap := filepath.Join(t.TempDir(), "snapshot.db")
	coordtest.FenceLeaseCounterRestore(t, pre, a, b,
		func() { m.SaveSnapshot(t, snap) },
		func() { p.RestoreSnapshot(t, m, snap) })
}

// TestBumpClearsOnlyTheMarkerItRead: a bump deletes the restore marker it
// read and no other. Bump A reads marker M1 and is held before its
// delete; bump B covers and clears M1, and a node then writes M2. A's
// delete, guarded by M1's mod revision, must leave M2 standing (the
// ZooKeeper test of the same name shows why a version is not enough).
func TestBumpClearsOnlyTheMarkerItRead(t *testing.T) {
	srv := etcdtest.StartEmbedded(t)
	var armed atomic.Bool
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	gate := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if txn, ok := req.(*pb.TxnRequest); ok && armed.Load() {
			for _, op := range txn.Success {
				if d := op.GetRequestDeleteRange(); d != nil && strings.HasSuffix(string(d.Key), "/restored") {
					once.Do(func() { close(blocked) })
					<-release
				}
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	holder := newCoord(t, quietConfig(srv.Endpoints, "aba"))
	a := newCoord(t, etcd.WithDialOptions(quietConfig(srv.Endpoints, "aba"), grpc.WithChainUnaryInterceptor(gate)))
	other := newCoord(t, quietConfig(srv.Endpoints, "aba"))
	n := coordtest.Node("holder")
	spec := coordtest.Spec("aba", 2)
	l, err := holder.Acquire(ctxFor(t, 10*time.Second), spec, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(ctxFor(t, 10*time.Second), 100, coordtest.Beat(n)); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctxFor(t, 10*time.Second), 100); err != nil {
		t.Fatal(err)
	}
	m1 := coordinator.RestoreEvidence{Generator: spec.Generator, Slot: l.Slot(), Acked: 150, Shown: 100, At: time.Now(), Node: n}
	if err := holder.MarkRestored(ctxFor(t, 10*time.Second), m1); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Bump(ctxFor(t, 20*time.Second), coordinator.BumpSpec{Generator: spec.Generator, By: 100, MaxTime: 1 << 50})
		aDone <- err
	}()
	select {
	case <-blocked:
	case err := <-aDone:
		t.Fatalf("bump A ended before its marker delete: %v", err)
	}
	if _, err := other.Bump(ctxFor(t, 10*time.Second), coordinator.BumpSpec{Generator: spec.Generator, By: 100, MaxTime: 1 << 50}); err != nil {
		armed.Store(false)
		close(release)
		t.Fatal(err)
	}
	m2 := coordinator.RestoreEvidence{Generator: spec.Generator, Slot: l.Slot(), Acked: 100000, Shown: 300, At: time.Now(), Node: coordtest.Node("late")}
	if err := other.MarkRestored(ctxFor(t, 10*time.Second), m2); err != nil {
		armed.Store(false)
		close(release)
		t.Fatal(err)
	}
	armed.Store(false)
	close(release)
	t.Logf("bump A: %v", <-aDone)
	gens, err := other.Generators(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, gs := range gens {
		if gs.Name == spec.Generator && (gs.Restore == nil || gs.Restore.Acked != m2.Acked) {
			t.Fatalf("marker after bump A: %+v, want M2 standing", gs.Restore)
		}
	}
}

// TestCounterBumpKeepsUnreadableMarker: a restore marker that does not
// decode still stands, and only an operator can judge it
// (coordinator.DecodeRestore). BumpCounter must refuse it, naming it,
// before writing anything, as Bump does: it deleted it with a bump by one
// ID, which covers nothing the marker's node may have acknowledged, and
// the counter's claims resumed.
func TestCounterBumpKeepsUnreadableMarker(t *testing.T) {
	srv := etcdtest.StartEmbedded(t)
	c := newCoord(t, quietConfig(srv.Endpoints, "unread"))
	spec := coordtest.CounterSpec("seg", 1, 1<<40)
	before, err := c.ReadCounter(ctxFor(t, 10*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	// Evidence whose shown value is out of range: it does not validate.
	bad := `{"generator":"seg","datacenter":0,"worker":0,"acked":500000,"shown":-7,"counter":true,"node":"n1"}`
	key := etcd.RestoredKey(c.Root(), spec.Generator)
	if _, err := c.Client().Put(ctxFor(t, 10*time.Second), key, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadCounter(ctxFor(t, 10*time.Second), spec); !errors.Is(err, coordinator.ErrRestored) {
		t.Fatalf("ReadCounter with the unreadable marker: %v, want ErrRestored", err)
	}
	if _, err := c.Bump(ctxFor(t, 10*time.Second), coordinator.BumpSpec{Generator: spec.Generator, By: 1, MaxTime: 1 << 50}); err == nil || !strings.Contains(err.Error(), key) {
		t.Fatalf("Bump (snowflake) with the unreadable marker: %v, want a refusal naming %s", err, key)
	}
	res, err := c.BumpCounter(ctxFor(t, 10*time.Second), spec, 1)
	if g, _ := c.Client().Get(ctxFor(t, 10*time.Second), key); len(g.Kvs) == 0 {
		t.Fatalf("BumpCounter by 1 ID deleted the unreadable marker %s without judging it (cleared %+v, next %d -> %d, err %v)",
			key, res.Cleared, res.Before.Next, res.After.Next, err)
	}
	if err == nil || !strings.Contains(err.Error(), key) {
		t.Fatalf("BumpCounter with the unreadable marker: %v, want a refusal naming %s", err, key)
	}
	g, err := c.Client().Get(ctxFor(t, 10*time.Second), c.Root()+spec.Generator+"/counter")
	if err != nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != string(before.Raw) {
		t.Fatalf("the counter after the refused bump: %v %v, want %s", g, err, before.Raw)
	}
}

// TestLateTakeLeavesNoStray: a take txn the client gave up on, applied by
// the server after the retry's scan, leaves an owner key bound to the
// node's live etcd lease that no lease object holds; the retry takes
// another slot. Only a later Acquire of this coordinator deleted it, so a
// node that holds the one worker it needs kept a second one for as long
// as its etcd lease lived, and other nodes found the worker space
// exhausted. The session sweeps such strays after its renewals.
func TestLateTakeLeavesNoStray(t *testing.T) {
	srv := etcdtest.StartEmbedded(t)
	var pending atomic.Pointer[func()]
	var first atomic.Bool
	first.Store(true)
	late := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !isTake(req) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if first.Swap(false) {
			// Not answered in time; the server applies it later.
			f := func() { _ = invoker(context.Background(), method, req, new(pb.TxnResponse), cc, opts...) }
			pending.Store(&f)
			return status.Error(codes.DeadlineExceeded, "test: no answer in time")
		}
		if f := pending.Swap(nil); f != nil {
			(*f)() // the late txn lands between the retry's scan and its take
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cfg := etcd.WithDialOptions(quietConfig(srv.Endpoints, "late"), grpc.WithChainUnaryInterceptor(late))
	cfg.Timing.LeaseTTL = 2 * time.Second
	c := newCoord(t, cfg)
	spec := coordtest.Spec("gen", 2)
	l, err := c.Acquire(ctxFor(t, 20*time.Second), spec, coordtest.Node("n"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("acquired %s", l.Slot())
	time.Sleep(3 * cfg.Timing.LeaseTTL) // several TTLs: the etcd lease is renewed meanwhile
	hs, err := c.Workers(ctxFor(t, 10*time.Second), spec.Generator)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Live && h.Slot != l.Slot() {
			other := newCoord(t, quietConfig(srv.Endpoints, "late"))
			_, aerr := other.Acquire(ctxFor(t, 10*time.Second), spec, coordtest.Node("m"))
			t.Fatalf("after %v, %s is still owned by node n (%+v), which holds only %s; another node's Acquire: %v",
				3*cfg.Timing.LeaseTTL, h.Slot, h.Heartbeat.Node.Name, l.Slot(), aerr)
		}
	}
	if err := l.Reserve(ctxFor(t, 10*time.Second), 100, coordtest.Beat(coordtest.Node("n"))); err != nil {
		t.Fatalf("the lease the retry took, after the sweeps: Reserve: %v", err)
	}
}

// isRelease reports whether req is a holder's release txn: If(ownerGuard)
// Then(Txn(... Delete(owner) ...)).
func isRelease(req any) bool {
	txn, ok := req.(*pb.TxnRequest)
	if !ok || len(txn.Success) != 1 {
		return false
	}
	in := txn.Success[0].GetRequestTxn()
	if in == nil {
		return false
	}
	for _, op := range in.Success {
		if op.GetRequestDeleteRange() != nil {
			return true
		}
	}
	return false
}

// TestReleaseLostReply: a release whose txn is applied and whose reply is
// lost is retried once by commit; the retry's owner guard fails (the
// release deleted the key), and Release reported a lost lease ("fence
// failed") although it released the worker and wrote the reservation. It
// must read back what the release left and report it released, as
// ZooKeeper's Release does; a release whose guard fails with no lost reply
// before it still reports the lost lease.
func TestReleaseLostReply(t *testing.T) {
	srv := etcdtest.StartEmbedded(t)
	var drop atomic.Int32
	lose := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && isRelease(req) && drop.Add(-1) >= 0 {
			return status.Error(codes.Unavailable, "test: the reply of the release txn was lost")
		}
		return err
	}
	c := newCoord(t, etcd.WithDialOptions(quietConfig(srv.Endpoints, "rel"), grpc.WithChainUnaryInterceptor(lose)))
	n := coordtest.Node("n")
	spec := coordtest.Spec("gen", 2)
	l, err := c.Acquire(ctxFor(t, 10*time.Second), spec, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(ctxFor(t, 10*time.Second), 900, coordtest.Beat(n)); err != nil {
		t.Fatal(err)
	}
	drop.Store(1)
	if err := l.Release(ctxFor(t, 10*time.Second), 400); err != nil {
		hs, _ := c.Workers(ctxFor(t, 10*time.Second), spec.Generator)
		t.Fatalf("Release(400), applied (owner gone, reservation 400) with its reply lost: %v (workers: %+v)", err, hs)
	}
	if got := l.Reserved(); got != 400 {
		t.Errorf("Reserved after the release: %d, want 400", got)
	}
	g, err := c.Client().Get(ctxFor(t, 10*time.Second), etcd.ReservedKey(c.Root(), spec.Generator, l.Slot()))
	if err != nil || len(g.Kvs) != 1 {
		t.Fatal(g, err)
	}
	if v, err := etcd.DecodeReserved(g.Kvs[0].Value); err != nil || v != 400 {
		t.Fatalf("reservation after the release: %q (%v), want 400", g.Kvs[0].Value, err)
	}

	// Control: a holder whose key was taken away (ForceRelease) before its
	// release, with no reply lost, has lost its lease.
	l2, err := c.Acquire(ctxFor(t, 10*time.Second), spec, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ForceRelease(ctxFor(t, 10*time.Second), spec.Generator, l2.Slot()); err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctxFor(t, 10*time.Second), 400); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("Release after ForceRelease: %v, want ErrLeaseLost", err)
	}
}
