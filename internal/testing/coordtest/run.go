package coordtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/datadir"
)

// Case is one shared case.
type Case struct {
	Name string
	Fn   func(*testing.T, Backend)
}

// Cases are the shared cases that are not fence cases, in the order Run
// runs them (for a backend that runs each one its own way, such as in a
// testing/synctest bubble).
func Cases() []Case {
	return append([]Case{
		{"SequentialWrapAround", SequentialWrapAround},
		{"FixedDatacenter", FixedDatacenter},
		{"ReuseRules", ReuseRules},
		{"Concurrent64", Concurrent64},
		{"Exhaustion", Exhaustion},
		{"PinRace", PinRace},
		{"PinDatacenter", PinDatacenter},
		{"InvalidSpec", InvalidSpec},
		{"NameInUse", NameInUse},
		{"ReserveAfterLeaseLoss", ReserveAfterLeaseLoss},
		{"EndedSessionWorkerTakenAgain", EndedSessionWorkerTakenAgain},
		{"EndedSlotTakenBySameInstance", EndedSlotTakenBySameInstance},
		{"ReserveNeverLowers", ReserveNeverLowers},
		{"ReleaseLowersAndRestartServes", ReleaseLowersAndRestartServes},
		{"TakeBackOwnStaleWorker", TakeBackOwnStaleWorker},
		{"RolledBackDetected", RolledBackDetected},
		{"LocalStateRefuses", LocalStateRefuses},
		{"WorkersAndForceRelease", WorkersAndForceRelease},
		{"Bump", Bump},
		{"RestoreMarkerBlocksAcquire", RestoreMarkerBlocksAcquire},
		{"RestoreMarkerKeepsHighestAcked", RestoreMarkerKeepsHighestAcked},
		{"BumpClearsRestoreMarker", BumpClearsRestoreMarker},
		{"BumpPastMaxTimeWritesNothing", BumpPastMaxTimeWritesNothing},
		{"BumpRefusesReservationsAhead", BumpRefusesReservationsAhead},
		{"GeneratorsListed", GeneratorsListed},
		{"Definitions", Definitions},
		{"Peers", Peers},
		{"FrozenHolderPastTTL", FrozenHolderPastTTL},
		{"Assured", Assured},
	}, CounterCases()...)
}

// Run runs every shared case that is not a fence case as a subtest, each on
// a fresh cluster of b.
func Run(t *testing.T, b Backend) {
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) { c.Fn(t, b) })
	}
}

// Layout strings of the cases; the coordinator treats them as opaque.
const (
	layoutA = "test-layout-a(t41,d0,w10,s12,e0,u1ms)"
	layoutB = "test-layout-b(t39,d0,w16,s8,e0,u10ms)"
)

// bigFloor accepts any reservation the cases write.
const bigFloor = int64(1) << 50

// Spec is a test Spec: one datacenter value, workers slots, accepting any
// reservation.
func Spec(generator string, workers uint64) coordinator.Spec {
	return coordinator.Spec{Generator: generator, Layout: layoutA, WorkerLimit: workers,
		DatacenterLimit: 1, Datacenter: -1, MaxFloor: bigFloor, LocalFloor: -1}
}

// Node is a test node named name with instance ID name+"-instance".
func Node(name string) coordinator.NodeInfo {
	return coordinator.NodeInfo{Name: name, InstanceID: name + "-instance", Address: "127.0.0.1:7300",
		StartTime: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
}

var sysClock = clockguard.NewSystem()

// Beat is a heartbeat of node read from the system clock source.
func Beat(node coordinator.NodeInfo) coordinator.Heartbeat {
	wall, _ := sysClock.Now()
	return coordinator.Heartbeat{Node: node, Wall: wall}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t testing.TB, c coordinator.Coordinator, spec coordinator.Spec, node coordinator.NodeInfo) coordinator.Lease {
	t.Helper()
	l, err := c.Acquire(ctxT(t, 20*time.Second), spec, node)
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", spec.Generator, node.Name, err)
	}
	return l
}

func mustReserve(t testing.TB, l coordinator.Lease, until int64, node coordinator.NodeInfo) {
	t.Helper()
	if err := l.Reserve(ctxT(t, 10*time.Second), until, Beat(node)); err != nil {
		t.Fatalf("Reserve(%d) on %s: %v", until, l.Slot(), err)
	}
}

func slotAt(spec coordinator.Spec, i uint64) coordinator.Slot { return spec.SlotAt(i) }

// SequentialWrapAround: slots are handed out in cursor order; freed slots
// are reused only when the cursor wraps around to them.
func SequentialWrapAround(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	spec := Spec("seq", 4)
	spec.DatacenterLimit = 2 // 8 slots: dc 0 workers 0..3, then dc 1
	leases := make([]coordinator.Lease, 8)
	for i := range leases {
		l := mustAcquire(t, c, spec, Node(fmt.Sprintf("n%d", i)))
		if got, want := l.Slot(), slotAt(spec, uint64(i)); got != want {
			t.Fatalf("acquisition %d got %s, want %s", i, got, want)
		}
		if l.ReadReserved() != -1 || l.Floor() != -1 {
			t.Fatalf("fresh slot %s: ReadReserved %d Floor %d, want -1, -1", l.Slot(), l.ReadReserved(), l.Floor())
		}
		leases[i] = l
	}
	if _, err := c.Acquire(ctxT(t, 10*time.Second), spec, Node("extra")); !errors.Is(err, coordinator.ErrExhausted) {
		t.Fatalf("9th acquisition: %v, want ErrExhausted", err)
	}
	release := func(i int) {
		t.Helper()
		if err := leases[i].Release(ctxT(t, 10*time.Second), -1); err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
	}
	// The cursor is at 8 (= 0 of the next lap): freed 5 and 2 come back
	// in cursor order, 2 first.
	release(5)
	release(2)
	for _, want := range []int{2, 5} {
		l := mustAcquire(t, c, spec, Node(fmt.Sprintf("r%d", want)))
		if l.Slot() != slotAt(spec, uint64(want)) {
			t.Fatalf("after wrap got %s, want %s", l.Slot(), slotAt(spec, uint64(want)))
		}
		leases[want] = l
	}
	// The cursor is past 5: freeing 1 and 7 gives 7 first, then wraps to 1.
	release(1)
	release(7)
	for _, want := range []int{7, 1} {
		l := mustAcquire(t, c, spec, Node(fmt.Sprintf("s%d", want)))
		if l.Slot() != slotAt(spec, uint64(want)) {
			t.Fatalf("second wrap got %s, want %s", l.Slot(), slotAt(spec, uint64(want)))
		}
	}
}

// FixedDatacenter: with Spec.Datacenter fixed the cursor walks workers
// only, all in that datacenter.
func FixedDatacenter(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	spec := Spec("fixed", 3)
	spec.DatacenterLimit, spec.Datacenter = 4, 2
	for i := 0; i < 3; i++ {
		l := mustAcquire(t, c, spec, Node(fmt.Sprintf("n%d", i)))
		if want := (coordinator.Slot{Datacenter: 2, Worker: uint64(i)}); l.Slot() != want {
			t.Fatalf("got %s, want %s", l.Slot(), want)
		}
	}
	_, err := c.Acquire(ctxT(t, 10*time.Second), spec, Node("x"))
	var ex *coordinator.ExhaustedError
	if !errors.As(err, &ex) || ex.Limit != 3 {
		t.Fatalf("4th acquisition: %v, want ExhaustedError with limit 3", err)
	}
}

// ReuseRules: a slot is reused only after its owner is gone and when its
// R <= Spec.MaxFloor; the new holder's Floor is at least R.
func ReuseRules(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	ca, cb := cl.Connect(t, sysClock), cl.Connect(t, sysClock)
	spec := Spec("reuse", 2)
	na, nb := Node("a"), Node("b")
	la := mustAcquire(t, ca, spec, na)
	mustReserve(t, la, 1000, na)
	lb := mustAcquire(t, cb, spec, nb)
	if lb.Slot() == la.Slot() {
		t.Fatalf("two live leases on %s", la.Slot())
	}
	cl.Expire(t, la)
	waitDone(t, la, 3*cl.TTL())

	cc := cl.Connect(t, sysClock)
	low := spec
	low.MaxFloor = 999
	_, err := cc.Acquire(ctxT(t, 10*time.Second), low, Node("c"))
	var ex *coordinator.ExhaustedError
	if !errors.As(err, &ex) || ex.TooFar != 1 || len(ex.Live) != 1 || ex.Live[0].Slot != lb.Slot() {
		t.Fatalf("acquire with MaxFloor 999: %v, want exhausted with 1 live holder and 1 slot too far", err)
	}
	if !strings.Contains(err.Error(), "limit 2") || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("exhaustion message %q does not name the limit and the holder", err)
	}
	at := spec
	at.MaxFloor = 1000
	lc := mustAcquire(t, cc, at, Node("c"))
	if lc.Slot() != la.Slot() || lc.ReadReserved() != 1000 || lc.Floor() < 1000 {
		t.Fatalf("reuse: slot %s ReadReserved %d Floor %d, want %s, 1000, >= 1000", lc.Slot(), lc.ReadReserved(), lc.Floor(), la.Slot())
	}
	// LocalFloor raises the Floor above R.
	mustReserve(t, lc, 1001, Node("c"))
	if err := lc.Release(ctxT(t, 10*time.Second), 1001); err != nil {
		t.Fatal(err)
	}
	lf := spec
	lf.LocalFloor = 5000
	ld := mustAcquire(t, cc, lf, Node("c"))
	if ld.Slot() != la.Slot() || ld.ReadReserved() != 1001 || ld.Floor() != 5000 {
		t.Fatalf("LocalFloor: slot %s ReadReserved %d Floor %d, want %s 1001 5000", ld.Slot(), ld.ReadReserved(), ld.Floor(), la.Slot())
	}
}

func waitDone(t testing.TB, l coordinator.Lease, d time.Duration) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(d):
		t.Fatalf("lease %s: Done not closed within %v", l.Slot(), d)
	}
	if l.Ctx().Err() == nil {
		t.Fatalf("lease %s: Done closed but Ctx not cancelled", l.Slot())
	}
}

// Concurrent64: 64 acquirers on 8 clients at once get 64 distinct slots,
// and the 65th finds the space exhausted.
func Concurrent64(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	spec := Spec("conc", 64)
	var clients []coordinator.Backend
	for i := 0; i < 8; i++ {
		clients = append(clients, cl.Connect(t, sysClock))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[coordinator.Slot]string{}
	var errs []error
	ctx := ctxT(t, 120*time.Second)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			node := Node(fmt.Sprintf("c%02d", i))
			l, err := clients[i%8].Acquire(ctx, spec, node)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", node.Name, err))
				return
			}
			if prev, dup := got[l.Slot()]; dup {
				errs = append(errs, fmt.Errorf("slot %s given to %s and %s", l.Slot(), prev, node.Name))
			}
			got[l.Slot()] = node.Name
		}(i)
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d acquisitions failed: %v", len(errs), errs)
	}
	if len(got) != 64 {
		t.Fatalf("%d distinct slots, want 64", len(got))
	}
	if _, err := clients[0].Acquire(ctx, spec, Node("late")); !errors.Is(err, coordinator.ErrExhausted) {
		t.Fatalf("65th: %v, want ErrExhausted", err)
	}
	hs, err := clients[1].Workers(ctx, "conc")
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, h := range hs {
		if h.Live {
			live++
			if got[h.Slot] != h.Heartbeat.Node.Name {
				t.Fatalf("Workers says %s is held by %q, acquisition said %q", h.Slot, h.Heartbeat.Node.Name, got[h.Slot])
			}
		}
	}
	if live != 64 {
		t.Fatalf("Workers lists %d live holders, want 64", live)
	}
}

// Exhaustion: the error names the limit and the live holders.
func Exhaustion(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	spec := Spec("exh", 3)
	for i := 0; i < 3; i++ {
		mustAcquire(t, c, spec, Node(fmt.Sprintf("holder%d", i)))
	}
	_, err := c.Acquire(ctxT(t, 10*time.Second), spec, Node("late"))
	var ex *coordinator.ExhaustedError
	if !errors.As(err, &ex) || !errors.Is(err, coordinator.ErrExhausted) {
		t.Fatalf("got %v, want *ExhaustedError", err)
	}
	if ex.Limit != 3 || len(ex.Live) != 3 {
		t.Fatalf("limit %d live %d, want 3 and 3", ex.Limit, len(ex.Live))
	}
	for _, want := range []string{"limit 3", "holder0", "holder1", "holder2"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("message %q lacks %q", err, want)
		}
	}
}

// PinRace: two first nodes of a generator with different layouts race;
// exactly one wins, the other is refused with both layouts named; later
// nodes see the winner's incarnation.
func PinRace(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c1, c2 := cl.Connect(t, sysClock), cl.Connect(t, sysClock)
	for round := 0; round < 8; round++ {
		gen := fmt.Sprintf("race%d", round)
		sa, sb := Spec(gen, 4), Spec(gen, 4)
		sb.Layout = layoutB
		var wg sync.WaitGroup
		var la, lb coordinator.Lease
		var ea, eb error
		start := make(chan struct{})
		wg.Add(2)
		go func() { defer wg.Done(); <-start; la, ea = c1.Acquire(ctxT(t, 20*time.Second), sa, Node("a")) }()
		go func() { defer wg.Done(); <-start; lb, eb = c2.Acquire(ctxT(t, 20*time.Second), sb, Node("b")) }()
		close(start)
		wg.Wait()
		if (ea == nil) == (eb == nil) {
			t.Fatalf("round %d: errors %v and %v: want exactly one winner", round, ea, eb)
		}
		lose, winner := eb, la
		if ea != nil {
			lose, winner = ea, lb
		}
		var lm *coordinator.LayoutMismatchError
		if !errors.As(lose, &lm) || !errors.Is(lose, coordinator.ErrLayoutMismatch) {
			t.Fatalf("round %d: loser got %v, want *LayoutMismatchError", round, lose)
		}
		if !strings.Contains(lose.Error(), layoutA) || !strings.Contains(lose.Error(), layoutB) {
			t.Fatalf("round %d: %q does not name both layouts", round, lose)
		}
		same := sa
		if winner == lb {
			same = sb
		}
		l := mustAcquire(t, c1, same, Node("third"))
		if l.Incarnation() == "" || l.Incarnation() != winner.Incarnation() {
			t.Fatalf("round %d: incarnations %q and %q differ", round, l.Incarnation(), winner.Incarnation())
		}
	}
	// Different generators have different incarnations.
	x := mustAcquire(t, c1, Spec("inc-x", 1), Node("a"))
	y := mustAcquire(t, c1, Spec("inc-y", 1), Node("a"))
	if x.Incarnation() == y.Incarnation() {
		t.Fatalf("two generators share incarnation %q", x.Incarnation())
	}
}

// PinDatacenter: a fixed datacenter is pinned with the layout.
func PinDatacenter(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	s := Spec("pindc", 4)
	s.DatacenterLimit, s.Datacenter = 4, 1
	mustAcquire(t, c, s, Node("a"))
	for _, dc := range []int64{2, -1} {
		o := s
		o.Datacenter = dc
		_, err := c.Acquire(ctxT(t, 10*time.Second), o, Node(fmt.Sprintf("b%d", dc+1)))
		if !errors.Is(err, coordinator.ErrLayoutMismatch) || !strings.Contains(err.Error(), "datacenter 1") {
			t.Fatalf("datacenter %d on a pin with 1: %v, want a layout mismatch naming datacenter 1", dc, err)
		}
	}
}

// InvalidSpec: bad input is refused naming the field.
func InvalidSpec(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	for _, tc := range []struct {
		name  string
		mod   func(*coordinator.Spec)
		field string
	}{
		{"no generator", func(s *coordinator.Spec) { s.Generator = "" }, "Generator"},
		{"slash", func(s *coordinator.Spec) { s.Generator = "a/b" }, "Generator"},
		{"no layout", func(s *coordinator.Spec) { s.Layout = "" }, "Layout"},
		{"no workers", func(s *coordinator.Spec) { s.WorkerLimit = 0 }, "WorkerLimit"},
		{"datacenter out of range", func(s *coordinator.Spec) { s.Datacenter = 1 }, "Datacenter"},
		{"negative floor", func(s *coordinator.Spec) { s.MaxFloor = -5 }, "MaxFloor"},
	} {
		s := Spec("inv", 4)
		tc.mod(&s)
		_, err := c.Acquire(ctxT(t, 5*time.Second), s, Node("a"))
		if !errors.Is(err, coordinator.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want ErrInvalidSpec naming %s", tc.name, err, tc.field)
		}
	}
	l := mustAcquire(t, c, Spec("inv", 4), Node("a"))
	if err := l.Reserve(ctxT(t, 5*time.Second), -2, Beat(Node("a"))); !errors.Is(err, coordinator.ErrInvalidSpec) {
		t.Errorf("Reserve(-2): %v, want ErrInvalidSpec", err)
	}
}

// NameInUse: a live owner record carrying this node's name with another
// instance ID blocks acquisition, naming the holder.
func NameInUse(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	a := Node("same-name")
	mustAcquire(t, c, Spec("names", 4), a)
	other := a
	other.InstanceID = "another-instance"
	_, err := c.Acquire(ctxT(t, 10*time.Second), Spec("names", 4), other)
	var ne *coordinator.NameInUseError
	if !errors.As(err, &ne) || !errors.Is(err, coordinator.ErrNameInUse) || ne.Instance != a.InstanceID {
		t.Fatalf("got %v, want *NameInUseError naming instance %q", err, a.InstanceID)
	}
	// The same instance (a second lease of one node) is not refused.
	mustAcquire(t, c, Spec("names", 4), a)
}

// ReserveAfterLeaseLoss: once ownership expired, Reserve fails with
// ErrLeaseLost, Done closes and the reservation stays as acknowledged.
func ReserveAfterLeaseLoss(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	n := Node("a")
	l := mustAcquire(t, c, Spec("loss", 1), n)
	mustReserve(t, l, 700, n)
	cl.Expire(t, l)
	err := l.Reserve(ctxT(t, 10*time.Second), 800, Beat(n))
	if !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("Reserve after expiry: %v, want ErrLeaseLost", err)
	}
	waitDone(t, l, 3*cl.TTL())
	if got := cl.Reserved(t, "loss", l.Slot()); got != 700 {
		t.Fatalf("reserved = %d after the failed Reserve, want 700", got)
	}
	if err := l.Release(ctxT(t, 10*time.Second), 600); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("Release after expiry: %v, want ErrLeaseLost", err)
	}
	// A new acquisition (a new lease) works and starts above 700.
	l2 := mustAcquire(t, c, Spec("loss", 1), n)
	if l2.Floor() < 700 {
		t.Fatalf("new Floor %d < 700", l2.Floor())
	}
	mustReserve(t, l2, 900, n)
}

// EndedSessionWorkerTakenAgain: after the liveness behind a lease ended
// (Expire), the coordinator's next acquisition takes that worker again —
// not the free one the cursor points at — and reads its reservation: a
// node compares it with what it acknowledged for that worker, which is how
// a restore of the coordinator shows.
func EndedSessionWorkerTakenAgain(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	n := Node("a")
	spec := Spec("ended", 3)
	l := mustAcquire(t, c, spec, n)
	mustReserve(t, l, 1000, n)
	cl.Expire(t, l)
	waitDone(t, l, 3*cl.TTL())
	l2 := mustAcquire(t, c, spec, n)
	if l2.Slot() != l.Slot() || l2.ReadReserved() != 1000 {
		t.Fatalf("after the expiry the coordinator took %s reading reservation %d; want its old %s reading 1000",
			l2.Slot(), l2.ReadReserved(), l.Slot())
	}
}

// EndedSlotTakenBySameInstance: a process whose session ended does not
// wait for a worker that another process of the same instance (a
// replacement on its data dir, beside the zombie it replaced) took in a
// session of its own: only an owner record of the very session that ended
// is waited for. It takes a free worker at once.
func EndedSlotTakenBySameInstance(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	zombie, replacement := cl.Connect(t, sysClock), cl.Connect(t, sysClock)
	n := Node("a")
	spec := Spec("replaced", 2)
	l := mustAcquire(t, zombie, spec, n)
	cl.Expire(t, l)
	waitDone(t, l, 3*cl.TTL())
	other := Spec("replaced", 2)
	other.Held = map[coordinator.Slot]bool{{Worker: 1}: true} // the replacement takes worker 0
	lr := mustAcquire(t, replacement, other, n)
	if lr.Slot() != l.Slot() {
		t.Fatalf("replacement took %s, want %s", lr.Slot(), l.Slot())
	}
	l2, err := zombie.Acquire(ctxT(t, 3*cl.TTL()), spec, n)
	if err != nil {
		t.Fatalf("the process whose session ended, its worker held by another process of its instance: %v; want a free worker at once", err)
	}
	if l2.Slot() == l.Slot() {
		t.Fatalf("took %s, held by the replacement", l2.Slot())
	}
}

// ReserveNeverLowers: a smaller until keeps the reservation.
func ReserveNeverLowers(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	n := Node("a")
	l := mustAcquire(t, c, Spec("lower", 1), n)
	mustReserve(t, l, 500, n)
	mustReserve(t, l, 300, n)
	if got := cl.Reserved(t, "lower", l.Slot()); got != 500 {
		t.Fatalf("reserved %d after Reserve(300) following 500, want 500", got)
	}
	if l.Reserved() != 500 {
		t.Fatalf("Reserved() = %d, want 500", l.Reserved())
	}
}

// ReleaseLowersAndRestartServes: Release lowers R to the highest time
// produced (never below Floor) and frees the slot at once, so a restart
// acquires it with R within its MaxFloor.
func ReleaseLowersAndRestartServes(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	n := Node("a")
	spec := Spec("rel", 1)
	l := mustAcquire(t, c, spec, n)
	mustReserve(t, l, 5000, n)
	if err := l.Release(ctxT(t, 10*time.Second), 3000); err != nil {
		t.Fatal(err)
	}
	waitDone(t, l, time.Second)
	if got := cl.Reserved(t, "rel", l.Slot()); got != 3000 {
		t.Fatalf("reserved %d after Release(3000), want 3000", got)
	}
	if err := l.Reserve(ctxT(t, 10*time.Second), 6000, Beat(n)); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("Reserve after Release: %v, want ErrLeaseLost", err)
	}
	restart := spec
	restart.MaxFloor = 3000 // the restarted node's now + max-lead
	c2 := cl.Connect(t, sysClock)
	l2, err := c2.Acquire(ctxT(t, 5*time.Second), restart, n)
	if err != nil {
		t.Fatalf("restart did not get the released slot at once: %v", err)
	}
	if l2.Floor() != 3000 {
		t.Fatalf("restart Floor %d, want 3000", l2.Floor())
	}
	// Release never goes below the Floor.
	if err := l2.Release(ctxT(t, 10*time.Second), 10); err != nil {
		t.Fatal(err)
	}
	if got := cl.Reserved(t, "rel", l.Slot()); got != 3000 {
		t.Fatalf("reserved %d after Release(10) on Floor 3000, want 3000", got)
	}
}

// TakeBackOwnStaleWorker: a restart with the same instance ID takes its
// crashed predecessor's worker back once the heartbeat is older than
// TakeBackAge, starting above its reservation; with a fresh heartbeat it
// takes another slot instead.
func TakeBackOwnStaleWorker(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	spec := Spec("takeback", 4)
	n := Node("crashy")
	old := cl.Connect(t, sysClock)
	lo := mustAcquire(t, old, spec, n)
	mustReserve(t, lo, 2000, n)
	cl.Kill(t, old) // crash: ownership lingers until the TTL

	// Same instance, heartbeat fresh: not taken back.
	fresh := cl.Connect(t, sysClock)
	lf := mustAcquire(t, fresh, spec, n)
	if lf.Slot() == lo.Slot() {
		t.Fatalf("took back %s with a fresh heartbeat", lo.Slot())
	}
	if err := lf.Release(ctxT(t, 10*time.Second), -1); err != nil {
		t.Fatal(err)
	}
	// Same instance, its clock sees the heartbeat as 3 s old.
	late := cl.Connect(t, clockguard.NewOffset(sysClock, coordinator.TakeBackAge+time.Second))
	ln := mustAcquire(t, late, spec, n)
	if ln.Slot() != lo.Slot() {
		t.Fatalf("restart got %s, want its own stale %s back", ln.Slot(), lo.Slot())
	}
	if ln.Floor() < 2000 {
		t.Fatalf("take-back Floor %d < old reservation 2000", ln.Floor())
	}
	mustReserve(t, ln, 2500, n)
	// Another instance never takes a stale worker back.
	other := Node("other")
	lx := mustAcquire(t, cl.Connect(t, clockguard.NewOffset(sysClock, time.Hour)), spec, other)
	if lx.Slot() == ln.Slot() {
		t.Fatalf("another instance took %s", ln.Slot())
	}
}

// RolledBackDetected: a reservation lowered behind the holder's back is
// reported by its next Reserve.
func RolledBackDetected(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	n := Node("a")
	l := mustAcquire(t, c, Spec("rb", 1), n)
	mustReserve(t, l, 3000, n)
	cl.SetReserved(t, "rb", l.Slot(), 1000)
	err := l.Reserve(ctxT(t, 10*time.Second), 3100, Beat(n))
	var rb *coordinator.RolledBackError
	if !errors.As(err, &rb) || !errors.Is(err, coordinator.ErrRolledBack) || rb.Seen != 1000 || rb.Acked != 3000 {
		t.Fatalf("Reserve after a rollback: %v, want RolledBackError seen 1000 acked 3000", err)
	}
	if !strings.Contains(err.Error(), "coordinator state rolled back") {
		t.Fatalf("message %q lacks the reason", err)
	}
}

// WorkersAndForceRelease: Workers lists holders and reservations;
// ForceRelease frees a slot through the fence, keeping R, and the former
// holder's next Reserve fails.
func WorkersAndForceRelease(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c, admin := cl.Connect(t, sysClock), cl.Connect(t, sysClock)
	spec := Spec("admin", 4)
	na, nb := Node("a"), Node("b")
	la := mustAcquire(t, c, spec, na)
	lb := mustAcquire(t, c, spec, nb)
	mustReserve(t, la, 111, na)
	mustReserve(t, lb, 222, nb)
	if err := lb.Release(ctxT(t, 10*time.Second), 200); err != nil {
		t.Fatal(err)
	}
	hs, err := admin.Workers(ctxT(t, 10*time.Second), "admin")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || !hs[0].Live || hs[0].Reserved != 111 || hs[0].Heartbeat.Node.Name != "a" ||
		hs[1].Live || hs[1].Reserved != 200 {
		t.Fatalf("Workers = %+v, want a live at 111 and a free slot at 200", hs)
	}
	if err := admin.ForceRelease(ctxT(t, 10*time.Second), "admin", la.Slot()); err != nil {
		t.Fatal(err)
	}
	if err := la.Reserve(ctxT(t, 10*time.Second), 300, Beat(na)); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("Reserve after force-release: %v, want ErrLeaseLost", err)
	}
	if got := cl.Reserved(t, "admin", la.Slot()); got != 111 {
		t.Fatalf("reserved %d after force-release, want 111 kept", got)
	}
	if err := admin.ForceRelease(ctxT(t, 10*time.Second), "admin", la.Slot()); !errors.Is(err, coordinator.ErrNotHeld) {
		t.Fatalf("second force-release: %v, want ErrNotHeld", err)
	}
}

// bump runs Bump with a MaxTime that no case reaches.
func bump(t testing.TB, c coordinator.Admin, generator string, by, now int64) (coordinator.BumpResult, error) {
	return c.Bump(ctxT(t, 10*time.Second), coordinator.BumpSpec{Generator: generator, By: by, Now: now, MaxTime: bigFloor})
}

// Bump raises every reservation of the generator, and the generator floor
// that a worker absent from a restored snapshot starts above.
func Bump(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	spec := Spec("bump", 6)
	var ls []coordinator.Lease
	for i := 0; i < 3; i++ {
		n := Node(fmt.Sprintf("n%d", i))
		l := mustAcquire(t, c, spec, n)
		mustReserve(t, l, int64(100*(i+1)), n)
		ls = append(ls, l)
	}
	if _, err := bump(t, c, "bump", 1000, 50); err != nil {
		t.Fatal(err)
	}
	for i, l := range ls {
		if got, want := cl.Reserved(t, "bump", l.Slot()), int64(100*(i+1)+1000); got != want {
			t.Fatalf("%s reserved %d after bump, want %d", l.Slot(), got, want)
		}
	}
	if _, err := bump(t, c, "bump", 0, 50); !errors.Is(err, coordinator.ErrInvalidSpec) {
		t.Fatalf("Bump(0): %v, want ErrInvalidSpec", err)
	}
	// A holder's next Reserve below the bumped value keeps it.
	mustReserve(t, ls[0], 150, Node("n0"))
	if got := cl.Reserved(t, "bump", ls[0].Slot()); got != 1100 {
		t.Fatalf("reserved %d after Reserve(150) over a bump to 1100", got)
	}

	// A worker never reserved before the bump (as one first used after a
	// restored snapshot was taken) starts above max(now, every R) + by.
	near := spec
	near.MaxFloor = 1299
	_, err := c.Acquire(ctxT(t, 10*time.Second), near, Node("n3"))
	var ex *coordinator.ExhaustedError
	if !errors.As(err, &ex) || ex.TooFar != 3 || !strings.Contains(err.Error(), "generator floor 1300") {
		t.Fatalf("acquire with MaxFloor 1299 under a generator floor of 1300: %v, want exhaustion with 3 free workers too far, naming the floor", err)
	}
	fresh := mustAcquire(t, c, spec, Node("n3"))
	if fresh.ReadReserved() != -1 || fresh.Floor() != 1300 {
		t.Fatalf("fresh %s after bump: read R %d, floor %d; want -1 and 1300 (max(50, 300) + 1000)",
			fresh.Slot(), fresh.ReadReserved(), fresh.Floor())
	}
	// A second bump with a later clock raises the floor from now; one with
	// an earlier clock never lowers it.
	if r, err := bump(t, c, "bump", 10, 5000); err != nil || r.Floor != 5010 || r.Cleared != nil {
		t.Fatalf("bump at 5000 by 10: %+v, %v; want floor 5010, no marker cleared", r, err)
	}
	if r, err := bump(t, c, "bump", 10, 0); err != nil || r.Floor != 5010 {
		t.Fatalf("bump at 0 by 10 after a floor of 5010: %+v, %v; want the floor kept at 5010", r, err)
	}
	if l := mustAcquire(t, c, spec, Node("n4")); l.Floor() != 5010 {
		t.Fatalf("floor after bumps at 5000 and 0 by 10: %d, want 5010", l.Floor())
	}
	// A generator that the restored snapshot does not know at all gets a
	// floor too.
	if _, err := bump(t, c, "bumpnew", 100, 700); err != nil {
		t.Fatal(err)
	}
	if l := mustAcquire(t, c, Spec("bumpnew", 2), Node("n5")); l.Floor() != 800 {
		t.Fatalf("floor of a new generator bumped at 700 by 100: %d, want 800", l.Floor())
	}
}

// Peers lists live holders' heartbeats with their receipt time on the
// observer's clock.
func Peers(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	fake := clockguard.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	obs := cl.Connect(t, fake)
	c := cl.Connect(t, sysClock)
	na, nb := Node("pa"), Node("pb")
	la := mustAcquire(t, c, Spec("peers1", 2), na)
	lb := mustAcquire(t, c, Spec("peers2", 2), nb)
	if _, err := obs.Peers(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	fake.Advance(time.Minute)
	hbA := coordinator.Heartbeat{Node: na, Wall: time.Date(2031, 5, 5, 5, 5, 5, 0, time.UTC)}
	if err := la.Reserve(ctxT(t, 10*time.Second), 10, hbA); err != nil {
		t.Fatal(err)
	}
	mustReserve(t, lb, 10, nb)
	for i := 0; ; i++ {
		ps, err := obs.Peers(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var gotA *coordinator.PeerBeat
		for j := range ps {
			if ps[j].Heartbeat.Node.Name == "pa" {
				gotA = &ps[j]
			}
		}
		if len(ps) == 2 && gotA != nil && gotA.Heartbeat.Wall.Equal(hbA.Wall) {
			want, _ := fake.Now()
			if !gotA.Received.Equal(want) || gotA.Generator != "peers1" || gotA.Slot != la.Slot() {
				t.Fatalf("peer %+v: want received %v on generator peers1 %s", *gotA, want, la.Slot())
			}
			break
		}
		if i == 100 {
			t.Fatalf("Peers = %+v, want pa with its new heartbeat and pb", ps)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := lb.Release(ctxT(t, 10*time.Second), 10); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		ps, _ := obs.Peers(ctxT(t, 10*time.Second))
		if len(ps) == 1 && ps[0].Heartbeat.Node.Name == "pa" {
			break
		}
		if i == 100 {
			t.Fatalf("after release Peers = %+v, want only pa", ps)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FrozenHolderPastTTL: a holder in another process, frozen with SIGSTOP
// past the TTL, loses its slot; a new holder starts at or above every
// reservation the frozen one had acknowledged; once thawed, the old holder
// gets no reservation acknowledged and reports the loss.
func FrozenHolderPastTTL(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	spec := Spec("frozen", 1)
	ch := startChild(t, cl, spec, Node("child"), 1000)
	got := ch.waitAcquired(30 * time.Second)
	ch.waitAcks(3, 20*time.Second)
	ch.freeze()
	time.Sleep(cl.TTL() + 1500*time.Millisecond)

	c := cl.Connect(t, sysClock)
	var l coordinator.Lease
	for i := 0; l == nil; i++ {
		var err error
		l, err = c.Acquire(ctxT(t, 10*time.Second), spec, Node("parent"))
		if err != nil {
			if !errors.Is(err, coordinator.ErrExhausted) || i == 50 {
				t.Fatalf("acquire after the freeze: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if l.Slot() != got.slot {
		t.Fatalf("new holder got %s, the frozen one held %s", l.Slot(), got.slot)
	}
	checkAbove(t, ch, l)
	ch.thaw()
	lost := ch.waitLost(10 * time.Second)
	checkAbove(t, ch, l)
	if !lost {
		t.Fatalf("thawed holder did not report its lease lost: %q", tail(ch.output(), 5))
	}
	mustReserve(t, l, l.Floor()+10, Node("parent"))
}

// Assured: a lease is assured for at most the TTL from its take, stays
// assured while its client renews it (never dropping to zero over three
// TTLs), and is assured for nothing once released.
func Assured(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	l, err := c.Acquire(ctxT(t, 10*time.Second), Spec("assured", 1), Node("a"))
	if err != nil {
		t.Fatal(err)
	}
	if a := l.Assured(); a <= 0 || a > cl.TTL() {
		t.Fatalf("Assured right after the take: %v, want in (0, %v]", a, cl.TTL())
	}
	low := cl.TTL()
	for end := time.Now().Add(3 * cl.TTL()); time.Now().Before(end); time.Sleep(cl.TTL() / 20) {
		low = min(low, l.Assured())
	}
	if low <= 0 {
		t.Fatalf("Assured fell to %v while the client renewed its lease", low)
	}
	t.Logf("lowest Assured over 3 TTLs of %v: %v", cl.TTL(), low)
	if err := l.Release(ctxT(t, 5*time.Second), -1); err != nil {
		t.Fatal(err)
	}
	if a := l.Assured(); a != 0 {
		t.Fatalf("Assured after Release: %v, want 0", a)
	}
}

// checkAbove fails unless every ack of the child is at or below the new
// holder's R read at acquisition (and so below its Floor).
func checkAbove(t testing.TB, ch *child, l coordinator.Lease) {
	t.Helper()
	acks := ch.ackList()
	if len(acks) == 0 {
		t.Fatal("child acknowledged nothing")
	}
	for _, a := range acks {
		if a > l.ReadReserved() || a > l.Floor() {
			t.Fatalf("old holder had %d acknowledged, above the new holder's read R %d / Floor %d (child output %q)",
				a, l.ReadReserved(), l.Floor(), ch.output())
		}
	}
}

// LocalStateRefuses: the node-local state refuses a lease whose
// reservation was lowered behind the node's back while it was away
// ("coordinator state rolled back"), and a pin with another incarnation
// ("coordinator state recreated").
func LocalStateRefuses(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	st, err := datadir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.Generator("localgen")
	if err != nil {
		t.Fatal(err)
	}
	n := Node("local")
	n.InstanceID = st.InstanceID()
	spec := Spec("localgen", 1)
	c := cl.Connect(t, sysClock)
	spec.LocalFloor = g.LocalFloor()
	l := mustAcquire(t, c, spec, n)
	if err := g.Check(l); err != nil {
		t.Fatalf("first check: %v", err)
	}
	for _, until := range []int64{4000, 4100} {
		if err := g.BeforeReserve(l.Slot(), until); err != nil {
			t.Fatal(err)
		}
		mustReserve(t, l, until, n)
		g.Acked(l.Slot(), until)
	}
	if err := g.Flush(); err != nil {
		t.Fatal(err)
	}
	cl.Expire(t, l) // the node goes away without a release
	waitDone(t, l, 3*cl.TTL())
	cl.SetReserved(t, "localgen", l.Slot(), 3000) // a restored snapshot

	spec.LocalFloor = g.LocalFloor()
	l2 := mustAcquire(t, c, spec, n)
	if l2.Floor() < 4100 {
		t.Fatalf("Floor %d after restart, want >= the node's own last reservation 4100", l2.Floor())
	}
	err = g.Check(l2)
	if !errors.Is(err, coordinator.ErrRolledBack) || !strings.Contains(err.Error(), "coordinator state rolled back") {
		t.Fatalf("check after the rollback: %v, want coordinator state rolled back", err)
	}

	// Another cluster is another pin: its incarnation differs.
	other := b.NewCluster(t)
	l3 := mustAcquire(t, other.Connect(t, sysClock), spec, n)
	if err := g.Check(l3); !errors.Is(err, coordinator.ErrRecreated) || !strings.Contains(err.Error(), "coordinator state recreated") {
		t.Fatalf("check on a recreated pin: %v, want coordinator state recreated", err)
	}
}
