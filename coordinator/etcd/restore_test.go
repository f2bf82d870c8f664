package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
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
