package zookeeper_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/zookeeper"
	"github.com/firnid/firn/internal/testing/coordtest"
)

// TestMarkerCheckedInMulti: a restore marker written between an
// acquisition's read of the reservation and its multi still refuses it:
// the multi creates and deletes the marker's path, which fails while the
// marker exists.
func TestMarkerCheckedInMulti(t *testing.T) {
	cl := newCluster(t, standalone(t))
	c := cl.ConnectWith(t, sysClock, nil)
	other := cl.Connect(t, sysClock)
	spec := coordtest.Spec("gen", 4)
	l := acquire(t, c, spec, coordtest.Node("first")) // pins the generator
	ev := coordinator.RestoreEvidence{Generator: "gen", Slot: l.Slot(), Acked: 500, Shown: 200,
		At: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Node: coordtest.Node("noticer")}
	var once sync.Once
	var markErr error
	zookeeper.SetAfterRead(c, func(coordinator.Slot) {
		once.Do(func() { markErr = other.MarkRestored(ctxT(t, 10*time.Second), ev) })
	})
	_, err := c.Acquire(ctxT(t, 20*time.Second), spec, coordtest.Node("racer"))
	if markErr != nil {
		t.Fatal(markErr)
	}
	var re *coordinator.RestoredError
	if !errors.As(err, &re) || re.Evidence != ev {
		t.Fatalf("acquisition whose multi followed the marker's write: %v, want *RestoredError with the evidence", err)
	}
	hs, _ := c.Workers(ctxT(t, 10*time.Second), "gen")
	live := 0
	for _, h := range hs {
		if h.Live {
			live++
		}
	}
	if live != 1 {
		t.Fatalf("%d workers in use after the refused acquisition, want 1: %+v", live, hs)
	}
}

// TestNumbersNotCanonicalRefused: a reservation node holding anything but
// a decimal number in the canonical encoding, hand-written under a live
// holder, is never taken for a number: Reserve and Release refuse it
// naming the path (Release no longer writes over it), and neither reports
// success while the node holds less than asked.
func TestNumbersNotCanonicalRefused(t *testing.T) {
	cl := newCluster(t, standalone(t))
	c := cl.Connect(t, sysClock)
	for i, bad := range []string{"abc", "", "4.2e1", "+42", " 42", "0042"} {
		spec := coordtest.Spec(fmt.Sprintf("num%d", i), 1)
		n := coordtest.Node("holder")
		l := acquire(t, c, spec, n)
		reserve(t, l, 100, n)
		path := fmt.Sprintf("%s/%s/reserved/%d-%d", cl.Base(), spec.Generator, l.Slot().Datacenter, l.Slot().Worker)
		if _, err := cl.Admin().Set(path, []byte(bad), -1); err != nil {
			t.Fatal(err)
		}
		err := l.Reserve(ctxT(t, 10*time.Second), 200, beat(n))
		if err == nil || errors.Is(err, coordinator.ErrRolledBack) || !strings.Contains(err.Error(), path) {
			d, _, _ := cl.Admin().Get(path)
			t.Fatalf("hand-written %q: Reserve(200) = %v with %s holding %q; want a refusal naming the path", bad, err, path, d)
		}
		err = l.Release(ctxT(t, 10*time.Second), 100)
		if err == nil || !strings.Contains(err.Error(), path) {
			d, _, _ := cl.Admin().Get(path)
			t.Fatalf("hand-written %q: Release = %v with %s holding %q; want a refusal naming the path", bad, err, path, d)
		}
		if d, _, _ := cl.Admin().Get(path); string(d) != bad {
			t.Fatalf("hand-written %q was overwritten with %q", bad, d)
		}
		_, err = c.Bump(ctxT(t, 10*time.Second), coordinator.BumpSpec{Generator: spec.Generator, By: 10, MaxTime: 1 << 50})
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("hand-written %q: Bump = %v, want a refusal naming the path", bad, err)
		}
	}
}

// Opcodes of ZooKeeper requests.
const (
	opDelete  = 2
	opSetData = 5
	opMulti   = 14
)

// opGate holds the first request with one of its opcodes that a client
// sends while armed, until release is closed: blocked closes when it is
// held.
type opGate struct {
	ops     []int32
	armed   atomic.Bool
	once    sync.Once
	blocked chan struct{}
	release chan struct{}
}

func newOpGate(ops ...int32) *opGate {
	return &opGate{ops: ops, blocked: make(chan struct{}), release: make(chan struct{})}
}

type gatedConn struct {
	net.Conn
	g *opGate
}

// Write holds a request (length, xid, opcode, ...) with one of the
// gate's opcodes.
func (c gatedConn) Write(b []byte) (int, error) {
	if len(b) >= 12 && slices.Contains(c.g.ops, int32(binary.BigEndian.Uint32(b[8:12]))) && c.g.armed.Load() {
		c.g.once.Do(func() { close(c.g.blocked) })
		<-c.g.release
	}
	return c.Conn.Write(b)
}

func (g *opGate) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return gatedConn{Conn: c, g: g}, nil
}

// open lets the held request go and holds no more.
func (g *opGate) open() {
	g.armed.Store(false)
	select {
	case <-g.release:
	default:
		close(g.release)
	}
}

// markedFor writes marker m1 for a generator whose one holder reserved
// and released: the state a bump or a second MarkRestored starts from.
func markedFor(t *testing.T, holder coordinator.Coordinator, spec coordinator.Spec, acked int64) (coordinator.Slot, coordinator.RestoreEvidence) {
	t.Helper()
	n := coordtest.Node("holder")
	l := acquire(t, holder, spec, n)
	reserve(t, l, 100, n)
	if err := l.Release(ctxT(t, 10*time.Second), 100); err != nil {
		t.Fatal(err)
	}
	m1 := coordinator.RestoreEvidence{Generator: spec.Generator, Slot: l.Slot(), Acked: acked, Shown: 100, At: time.Now(), Node: n}
	if err := holder.MarkRestored(ctxT(t, 10*time.Second), m1); err != nil {
		t.Fatal(err)
	}
	return l.Slot(), m1
}

// standingMarker is the generator's restore marker as Generators shows
// it (nil: none) and its floor.
func standingMarker(t *testing.T, c coordinator.Admin, generator string) (*coordinator.RestoreEvidence, int64) {
	t.Helper()
	gens, err := c.Generators(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, gs := range gens {
		if gs.Name == generator {
			return gs.Restore, gs.Floor
		}
	}
	return nil, -1
}

// TestBumpClearsOnlyTheMarkerItRead: a bump deletes the restore marker it
// read and no other. Bump A reads marker M1; bump B covers and clears M1;
// a node then finds a much larger restore and writes M2, a node created
// anew, whose version (0) is M1's. A's delete must leave M2 standing:
// guarded by the marker's version alone it removed M2, which no bump's
// floor covers, and a fresh node acquired below what M2's node had
// acknowledged (IDs issued twice). The marker generation node's version,
// which B's delete moved, is what tells M2 from M1.
func TestBumpClearsOnlyTheMarkerItRead(t *testing.T) {
	cl := newCluster(t, standalone(t))
	holder := cl.Connect(t, sysClock)
	spec := coordtest.Spec("aba", 2)
	slot, m1 := markedFor(t, holder, spec, 150)

	g := newOpGate(opDelete, opMulti) // A's marker delete: the first of either it sends
	a := cl.ConnectWith(t, sysClock, func(cfg *zookeeper.Config) { cfg.Dialer = g.dial })
	other := cl.Connect(t, sysClock)
	defer g.open()
	g.armed.Store(true)
	type result struct {
		res coordinator.BumpResult
		err error
	}
	aDone := make(chan result, 1)
	go func() {
		res, err := a.Bump(ctxT(t, 20*time.Second), coordinator.BumpSpec{Generator: spec.Generator, By: 100, MaxTime: 1 << 50})
		aDone <- result{res, err}
	}()
	select {
	case <-g.blocked: // A read M1 and is about to delete it
	case r := <-aDone:
		t.Fatalf("bump A ended before its marker delete: %+v", r)
	case <-time.After(15 * time.Second):
		t.Fatal("bump A never sent its marker delete")
	}
	resB, err := other.Bump(ctxT(t, 10*time.Second), coordinator.BumpSpec{Generator: spec.Generator, By: 100, MaxTime: 1 << 50})
	if err != nil || resB.Cleared == nil {
		t.Fatalf("bump B: %+v, %v", resB, err)
	}
	m2 := coordinator.RestoreEvidence{Generator: spec.Generator, Slot: slot, Acked: 100000, Shown: 300, At: time.Now(), Node: coordtest.Node("late")}
	if err := other.MarkRestored(ctxT(t, 10*time.Second), m2); err != nil {
		t.Fatal(err)
	}
	g.open()
	r := <-aDone
	t.Logf("bump A: floor %d, cleared %+v, err %v; bump B floor %d", r.res.Floor, r.res.Cleared, r.err, resB.Floor)
	if r.err == nil || !errors.Is(r.err, coordinator.ErrRestored) {
		t.Errorf("bump A: %v, want the refusal saying the marker was written again (ErrRestored)", r.err)
	}
	if st, floor := standingMarker(t, other, spec.Generator); st == nil || st.Acked != m2.Acked {
		t.Fatalf("marker after bump A: %+v (generator floor %d), want M2 (acknowledged %d) standing; bump A read only M1 (acknowledged %d)",
			st, floor, m2.Acked, m1.Acked)
	}
	if _, err := other.Acquire(ctxT(t, 10*time.Second), spec, coordtest.Node("fresh")); !errors.Is(err, coordinator.ErrRestored) {
		t.Fatalf("a fresh node's Acquire with M2 standing: %v, want ErrRestored", err)
	}
}

// TestMarkRestoredReplacesOnlyTheMarkerItRead: MarkRestored replaces a
// standing marker it does not cover, and only the marker it read. Node n1
// reads M1 (version 0) and is about to replace it with its evidence
// (acknowledged 200); a bump clears M1 and node n2 writes M3 (acknowledged
// 100000), created anew at version 0. n1's replacement must not land on
// M3: it did, guarded by the version alone, and the next bump then had to
// cover only 200.
func TestMarkRestoredReplacesOnlyTheMarkerItRead(t *testing.T) {
	cl := newCluster(t, standalone(t))
	holder := cl.Connect(t, sysClock)
	spec := coordtest.Spec("aba2", 2)
	slot, _ := markedFor(t, holder, spec, 150)

	g := newOpGate(opSetData, opMulti) // n1's replacement: the first of either it sends
	n1 := cl.ConnectWith(t, sysClock, func(cfg *zookeeper.Config) { cfg.Dialer = g.dial })
	other := cl.Connect(t, sysClock)
	defer g.open()
	e := coordinator.RestoreEvidence{Generator: spec.Generator, Slot: slot, Acked: 200, Shown: 100, At: time.Now(), Node: coordtest.Node("n1")}
	g.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- n1.MarkRestored(ctxT(t, 20*time.Second), e) }()
	select {
	case <-g.blocked: // n1 read M1 and is replacing it
	case err := <-done:
		t.Fatalf("n1's MarkRestored ended before replacing M1: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("n1 never sent its replacement")
	}
	if _, err := other.Bump(ctxT(t, 10*time.Second), coordinator.BumpSpec{Generator: spec.Generator, By: 100, MaxTime: 1 << 50}); err != nil {
		t.Fatal(err)
	}
	m3 := coordinator.RestoreEvidence{Generator: spec.Generator, Slot: slot, Acked: 100000, Shown: 200, At: time.Now(), Node: coordtest.Node("n2")}
	if err := other.MarkRestored(ctxT(t, 10*time.Second), m3); err != nil {
		t.Fatal(err)
	}
	g.open()
	if err := <-done; err != nil {
		t.Errorf("n1's MarkRestored: %v, want nil (M3 covers its evidence)", err)
	}
	if st, _ := standingMarker(t, other, spec.Generator); st == nil || st.Acked != m3.Acked {
		t.Fatalf("the standing marker is %+v: n2's marker (acknowledged %d) was overwritten by n1's evidence (acknowledged %d), which it covers",
			st, m3.Acked, e.Acked)
	}
}

// TestCounterBumpKeepsUnreadableMarker: a restore marker that does not
// decode still stands, and only an operator can judge it
// (coordinator.DecodeRestore). BumpCounter must refuse it, naming it,
// before writing anything, as Bump does: it deleted it with a bump by one
// ID, which covers nothing the marker's node may have acknowledged, and
// the counter's claims resumed.
func TestCounterBumpKeepsUnreadableMarker(t *testing.T) {
	cl := newCluster(t, standalone(t))
	c := cl.Connect(t, sysClock)
	spec := coordtest.CounterSpec("seg", 1, 1<<40)
	before, err := c.ReadCounter(ctxT(t, 10*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	// Evidence whose shown value is out of range: it does not validate.
	bad := `{"generator":"seg","datacenter":0,"worker":0,"acked":500000,"shown":-7,"counter":true,"node":"n1"}`
	path := cl.Base() + "/" + spec.Generator + "/restored"
	if _, err := cl.Admin().Create(path, []byte(bad), 0, cl.ACL()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadCounter(ctxT(t, 10*time.Second), spec); !errors.Is(err, coordinator.ErrRestored) {
		t.Fatalf("ReadCounter with the unreadable marker: %v, want ErrRestored", err)
	}
	res, err := c.BumpCounter(ctxT(t, 10*time.Second), spec, 1)
	if ok, _, _ := cl.Admin().Exists(path); !ok {
		t.Fatalf("BumpCounter by 1 ID deleted the unreadable marker %s without judging it (cleared %+v, next %d -> %d, err %v)",
			path, res.Cleared, res.Before.Next, res.After.Next, err)
	}
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("BumpCounter with the unreadable marker: %v, want a refusal naming %s", err, path)
	}
	d, _, err := cl.Admin().Get(cl.Base() + "/" + spec.Generator + "/counter")
	if err != nil || string(d) != string(before.Raw) {
		t.Fatalf("the counter holds %s after the refused bump (%v), want %s", d, err, before.Raw)
	}
}

// TestWorkersRefusesNonCanonicalReservation: stored reservations are
// parsed in their canonical encoding, and anything else is refused naming
// the node (docs/design.md, Fences). Workers showed such a reservation as
// never reserved (-1), and an exhausted Acquire named its holder with -1;
// both must refuse it, naming the node.
func TestWorkersRefusesNonCanonicalReservation(t *testing.T) {
	cl := newCluster(t, standalone(t))
	c := cl.Connect(t, sysClock)
	n := coordtest.Node("n")
	spec := coordtest.Spec("canon", 1)
	l := acquire(t, c, spec, n)
	reserve(t, l, 500, n)
	path := cl.Base() + "/" + spec.Generator + "/reserved/" + l.Slot().Key()
	if _, err := cl.Admin().Set(path, []byte("0000000000000000900"), -1); err != nil { // etcd's padded form
		t.Fatal(err)
	}
	hs, err := c.Workers(ctxT(t, 10*time.Second), spec.Generator)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Workers with %s holding %q: %+v, %v; want a refusal naming the node", path, "0000000000000000900", hs, err)
	}
	// The one worker is held: another node's Acquire is exhausted and
	// reads the holder's reservation to name it.
	_, err = cl.Connect(t, sysClock).Acquire(ctxT(t, 10*time.Second), spec, coordtest.Node("m"))
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Acquire with the one worker held and %s holding %q: %v; want a refusal naming the node", path, "0000000000000000900", err)
	}
}
