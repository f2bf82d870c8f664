package generator

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// wideRig is a Wide over members of tiny (4 IDs per unit) on a manual
// clock.
type wideRig struct {
	t     *testing.T
	clock *manualClock
	w     *Wide
	gens  map[uint64]*Generator
}

func newWideRig(t *testing.T, workers ...uint64) *wideRig {
	t.Helper()
	c := &manualClock{wall: tiny.Epoch.Add(5 * 365 * 24 * time.Hour)}
	r := &wideRig{t: t, clock: c, w: NewWide(tiny, c, tinyLead), gens: map[uint64]*Generator{}}
	for _, wk := range workers {
		r.add(wk, -1)
	}
	return r
}

// add builds a member for worker wk with the floor given, reserved far
// ahead, and installs the members.
func (r *wideRig) add(wk uint64, floor int64) *Generator {
	r.t.Helper()
	g, err := New(Config{Layout: tiny, Worker: wk, Clock: r.clock, Floor: floor, Reserved: NoReservation, MaxLead: tinyLead})
	if err != nil {
		r.t.Fatal(err)
	}
	r.gens[wk] = g
	r.install()
	return g
}

func (r *wideRig) install() {
	var gs []*Generator
	for _, g := range r.gens {
		gs = append(gs, g)
	}
	r.w.SetMembers(gs)
}

func (r *wideRig) now() int64 { w, _ := r.clock.Now(); return tiny.Units(w) }

// Within one unit the members' blocks come in ascending worker order,
// then the next unit: the IDs strictly increase, every member's whole
// unit is used, and runs of adjacent workers merge.
func TestWideOrder(t *testing.T) {
	r := newWideRig(t, 5, 1, 2)
	var ids []uint64
	for range 5 {
		dst := make([]uint64, 7)
		n, err := r.w.TryBatch(dst)
		if err != nil || n != 7 {
			t.Fatalf("TryBatch: %d, %v", n, err)
		}
		ids = append(ids, dst...)
	}
	now := r.now()
	for i, id := range ids {
		p, _ := tiny.Decode(id)
		unit, k := int64(i/12), i%12
		wantWorker := []uint64{1, 2, 5}[k/4]
		if p.Units != now+unit || p.Worker != wantWorker || p.Sequence != uint64(k%4) {
			t.Fatalf("ID %d: %+v, want unit %d worker %d sequence %d", i, p, now+unit, wantWorker, k%4)
		}
		if i > 0 && id <= ids[i-1] {
			t.Fatalf("ID %d (%d) not above the one before (%d)", i, id, ids[i-1])
		}
	}
	runs := make([]Run, 16)
	nr, n, err := r.w.TryRuns(runs, 24, false)
	if err != nil || n != 24 {
		t.Fatalf("TryRuns: %d runs %d IDs, %v", nr, n, err)
	}
	// The rest of the current unit (worker 5's last block), then per
	// unit: workers 1 and 2 merge (adjacent), worker 5 apart.
	var total uint64
	prev := ids[len(ids)-1]
	for _, run := range runs[:nr] {
		if run.First <= prev {
			t.Fatalf("run %+v not above %d", run, prev)
		}
		total += run.Count
		prev = run.First + run.Count - 1
	}
	if total != 24 {
		t.Fatalf("runs hold %d IDs, want 24", total)
	}
	if nr > 6 || runs[1].Count != 8 {
		t.Fatalf("runs %v: want workers 1 and 2 merged into runs of 8", runs[:nr])
	}
}

// At the lead limit Wide waits for the clock, as one generator does, and
// serves k times one worker's units meanwhile.
func TestWideLeadLimit(t *testing.T) {
	r := newWideRig(t, 0, 3)
	dst := make([]uint64, 1000)
	total := 0
	for {
		n, err := r.w.TryBatch(dst)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		total += n
	}
	units := int(tinyLead/tiny.Unit) + 1
	if want := units * 2 * 4; total != want {
		t.Fatalf("issued %d before the lead limit, want %d (%d units × 2 workers × 4)", total, want, units)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := r.w.NextBatch(ctx, dst); !errors.Is(err, ErrAhead) {
		t.Fatalf("NextBatch at the lead limit with a short deadline: %v, want ErrAhead", err)
	}
	// A wait the caller ends (its deadline running out as the timer
	// fires, or a cancel) is the same refusal as a deadline too short
	// from the start: the lead, wrapping the caller's reason.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(5*time.Millisecond, cancel)
	if _, err := r.w.NextBatch(ctx, dst); !errors.Is(err, ErrAhead) || !errors.Is(err, context.Canceled) {
		t.Fatalf("NextBatch at the lead limit, cancelled while waiting: %v, want ErrAhead wrapping the cancel", err)
	}
	r.clock.Advance(tiny.Unit)
	if n, err := r.w.TryBatch(dst); err != nil || n != 8 {
		t.Fatalf("one unit later: %d, %v; want the unit of both workers (8)", n, err)
	}
}

// A member whose floor lies ahead (it joined late) is passed over until
// the units pass its floor; a member whose reservation lags is passed
// over for the units it lacks; a retired one is passed over; the others
// keep serving, and the order holds across the changes.
func TestWideMembersComeAndGo(t *testing.T) {
	r := newWideRig(t, 2)
	var last uint64
	take := func(n int) []Parts {
		t.Helper()
		dst := make([]uint64, n)
		got, err := r.w.TryBatch(dst)
		if err != nil || got != n {
			t.Fatalf("TryBatch(%d): %d, %v", n, got, err)
		}
		var ps []Parts
		for _, id := range dst {
			if id <= last {
				t.Fatalf("ID %d not above %d", id, last)
			}
			last = id
			p, _ := tiny.Decode(id)
			ps = append(ps, p)
		}
		return ps
	}
	take(2) // worker 2 mid-unit
	now := r.now()
	r.add(1, now+2) // joins with a floor two units ahead
	r.add(3, -1)    // joins now, after worker 2 in this unit
	ps := take(2 + 4 + 8 + 8 + 12)
	workersAt := map[int64][]uint64{}
	for _, p := range ps {
		if ws := workersAt[p.Units]; len(ws) == 0 || ws[len(ws)-1] != p.Worker {
			workersAt[p.Units] = append(ws, p.Worker)
		}
	}
	for u, want := range map[int64][]uint64{now: {2, 3}, now + 1: {2, 3}, now + 2: {2, 3}, now + 3: {1, 2, 3}} {
		if got := workersAt[u]; len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
			t.Fatalf("unit %d served by workers %v, want %v (all: %v)", u-now, got, want, workersAt)
		}
	}
	// Worker 2 lags its reservation and worker 3 retires: worker 1 alone.
	g2 := r.gens[2]
	g2.reserved.Store(g2.Highest())
	r.gens[3].Retire()
	for _, p := range take(8) {
		if p.Worker != 1 {
			t.Fatalf("worker %d served; only worker 1 can", p.Worker)
		}
	}
	// Every member unable: a wait, not a cursor run to the lead limit.
	r.gens[1].Retire()
	dst := make([]uint64, 4)
	if n, err := r.w.TryBatch(dst); n != 0 || err != nil {
		t.Fatalf("no member can serve: %d, %v; want 0 and no error", n, err)
	}
	g2.SetReserved(NoReservation)
	if n, err := r.w.TryBatch(dst); n != 4 || err != nil {
		t.Fatalf("after worker 2's reservation moved: %d, %v", n, err)
	}
}

// Held, Wide refuses at once; a clock step beyond the lead fails closed as
// one generator does.
func TestWideHoldAndRollback(t *testing.T) {
	r := newWideRig(t, 0, 1)
	r.w.Hold(true)
	if _, err := r.w.TryBatch(make([]uint64, 1)); !errors.Is(err, ErrHeld) {
		t.Fatalf("held: %v, want ErrHeld", err)
	}
	r.w.Hold(false)
	if n, err := r.w.TryBatch(make([]uint64, 3)); n != 3 || err != nil {
		t.Fatalf("%d, %v", n, err)
	}
	r.clock.Step(-time.Second)
	if _, err := r.w.TryBatch(make([]uint64, 1)); !errors.Is(err, ErrRollback) {
		t.Fatalf("after a 1 s step back: %v, want ErrRollback", err)
	}
}

// Concurrent callers of a four-member Wide on the real clock get unique
// IDs, and each caller's IDs increase.
func TestWideConcurrentUnique(t *testing.T) {
	c := realClock{origin: time.Now()}
	w := NewWide(tiny, c, tinyLead)
	var gs []*Generator
	for wk := range uint64(4) {
		g, err := New(Config{Layout: tiny, Worker: wk, Clock: c, Floor: -1, Reserved: NoReservation, MaxLead: tinyLead})
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	w.SetMembers(gs)
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev uint64
			mine := make([]uint64, 0, 3000)
			for len(mine) < 3000 {
				if len(mine)%2 == 0 {
					dst := make([]uint64, 13)
					n, err := w.NextBatch(context.Background(), dst)
					if err != nil {
						t.Error(err)
						return
					}
					mine = append(mine, dst[:n]...)
				} else {
					runs := make([]Run, 4)
					nr, _, err := w.TryRuns(runs, 9, true)
					if err != nil {
						t.Error(err)
						return
					}
					for _, run := range runs[:nr] {
						for i := range run.Count {
							mine = append(mine, run.First+i)
						}
					}
					if nr == 0 {
						if err := w.AwaitBulk(context.Background()); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}
			for _, id := range mine {
				if id <= prev {
					t.Errorf("a caller's IDs went back: %d after %d", id, prev)
					return
				}
				prev = id
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range mine {
				if seen[id] {
					t.Errorf("duplicate %d", id)
					return
				}
				seen[id] = true
			}
		}()
	}
	wg.Wait()
}

// tinySeq is tiny with the sequence above the node fields (as sonyflake
// packs it): within a unit the IDs sort by sequence, then worker.
var tinySeq = Layout{Epoch: tiny.Epoch, Unit: tiny.Unit, TimeBits: tiny.TimeBits, WorkerBits: tiny.WorkerBits,
	SequenceBits: tiny.SequenceBits, Order: SeqNode}

// In the SeqNode order Wide walks a unit in the layout's bit order — one
// ID of each member per sequence value, in ascending worker order — so
// the IDs strictly increase across members, units, batches, runs and a
// change of members mid-unit. Before, it handed out each member's whole
// block in turn, and the second member's first ID lay below the first
// member's last.
func TestWideSeqNodeOrder(t *testing.T) {
	c := &manualClock{wall: tinySeq.Epoch.Add(5 * 365 * 24 * time.Hour)}
	w := NewWide(tinySeq, c, tinyLead)
	gens := map[uint64]*Generator{}
	install := func() {
		var gs []*Generator
		for _, g := range gens {
			gs = append(gs, g)
		}
		w.SetMembers(gs)
	}
	for _, wk := range []uint64{6, 1, 3} {
		g, err := New(Config{Layout: tinySeq, Worker: wk, Clock: c, Floor: -1, Reserved: NoReservation, MaxLead: tinyLead})
		if err != nil {
			t.Fatal(err)
		}
		gens[wk] = g
	}
	install()
	now, _ := c.Now()
	start := tinySeq.Units(now)
	var ids []uint64
	for _, k := range []int{1, 5, 2, 7, 12, 3} {
		dst := make([]uint64, k)
		n, err := w.TryBatch(dst)
		if err != nil || n != k {
			t.Fatalf("TryBatch(%d): %d, %v", k, n, err)
		}
		ids = append(ids, dst...)
	}
	// Every position of the first units, in bit order: unit, sequence,
	// worker.
	for i, id := range ids {
		p, err := tinySeq.Decode(id)
		if err != nil {
			t.Fatal(err)
		}
		unit, k := int64(i/12), i%12
		if p.Units != start+unit || p.Sequence != uint64(k/3) || p.Worker != []uint64{1, 3, 6}[k%3] {
			t.Fatalf("ID %d: %+v, want unit %d sequence %d worker %d", i, p, start+unit, k/3, []uint64{1, 3, 6}[k%3])
		}
		if i > 0 && id <= ids[i-1] {
			t.Fatalf("ID %d (%d) not above the one before (%d)", i, id, ids[i-1])
		}
	}
	// A member joins mid-unit and one leaves: the order holds.
	g, err := New(Config{Layout: tinySeq, Worker: 0, Clock: c, Floor: -1, Reserved: NoReservation, MaxLead: tinyLead})
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]uint64, 5)
	if n, err := w.TryBatch(dst); err != nil || n != 5 {
		t.Fatalf("TryBatch: %d, %v", n, err)
	}
	ids = append(ids, dst...)
	gens[0] = g
	install()
	gens[3].Retire()
	delete(gens, 3)
	install()
	for range 4 {
		runs := make([]Run, 8)
		nr, n, err := w.TryRuns(runs, 8, true)
		if err != nil || n == 0 {
			t.Fatalf("TryRuns: %d runs %d IDs, %v", nr, n, err)
		}
		for _, r := range runs[:nr] {
			if r.Count != 1 {
				t.Fatalf("run %+v: the SeqNode order has no consecutive IDs", r)
			}
			ids = append(ids, r.First)
		}
		c.Advance(tiny.Unit / 3)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			p, _ := tinySeq.Decode(ids[i])
			q, _ := tinySeq.Decode(ids[i-1])
			t.Fatalf("ID %d %+v not above the one before %+v", i, p, q)
		}
	}
}

// AwaitBulk returns only when TryBulk can produce: a member waiting for
// its reservation at the current unit while another's floor lets it issue
// at the next made AwaitBulk return at once while TryBulk issued nothing,
// so a bulk call spun until the clock reached the next unit.
func TestWideAwaitBulkAgreesWithTryBulk(t *testing.T) {
	c := &manualClock{wall: tiny.Epoch.Add(5 * 365 * 24 * time.Hour)}
	w := NewWide(tiny, c, tinyLead)
	now, _ := c.Now()
	u := tiny.Units(now)
	joined, err := New(Config{Layout: tiny, Worker: 0, Clock: c, Floor: u, Reserved: NoReservation, MaxLead: tinyLead})
	if err != nil {
		t.Fatal(err)
	}
	lagging, err := New(Config{Layout: tiny, Worker: 1, Clock: c, Floor: -1, Reserved: u - 1, MaxLead: tinyLead})
	if err != nil {
		t.Fatal(err)
	}
	w.SetMembers([]*Generator{joined, lagging})
	dst := make([]uint64, 64)
	for round := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := w.AwaitBulk(ctx)
		cancel()
		n, terr := w.TryBulk(dst)
		if terr != nil {
			t.Fatal(terr)
		}
		if err == nil && n == 0 {
			t.Fatalf("round %d: AwaitBulk returned, then TryBulk issued nothing (the clock did not move)", round)
		}
		for _, id := range dst[:n] {
			if p, _ := tiny.Decode(id); p.Units <= u || p.Worker != 0 {
				t.Fatalf("ID %+v: want worker 0 above its floor %d", p, u)
			}
		}
	}
}

// A member that issued ahead of the Wide by itself (the ring's filler of a
// one-worker generator takes from the generator directly) up to the lead
// limit: AwaitBulk must wait for the clock, not return at once while
// TryBulk issues nothing (a range call spun on it in the simulator).
func TestWideAwaitBulkMemberAhead(t *testing.T) {
	c := &manualClock{wall: tiny.Epoch.Add(5 * 365 * 24 * time.Hour)}
	w := NewWide(tiny, c, tinyLead)
	g, err := New(Config{Layout: tiny, Worker: 3, Clock: c, Floor: -1, Reserved: NoReservation, MaxLead: tinyLead})
	if err != nil {
		t.Fatal(err)
	}
	w.SetMembers([]*Generator{g})
	dst := make([]uint64, 64)
	if n, err := w.TryBatch(dst[:1]); err != nil || n != 1 {
		t.Fatalf("TryBatch: %d, %v", n, err)
	}
	for { // the member alone, to its lead limit
		n, err := g.TryBatch(dst)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = w.AwaitBulk(ctx)
	n, terr := w.TryBulk(dst)
	if terr != nil {
		t.Fatal(terr)
	}
	if err == nil && n == 0 {
		t.Fatal("AwaitBulk returned, then TryBulk issued nothing (the clock did not move)")
	}
	if err == nil {
		t.Fatalf("AwaitBulk returned at the lead limit with the clock still; TryBulk gave %d", n)
	}
}

// Members that waited for their reservations at a unit, in a call that
// issued at the unit before, are asked again by the next call once the
// reservations came: before, the cursor kept "waited" and the next call
// issued nothing while peek said it could (a range call spun on it).
func TestWideAsksAgainAfterReservationWait(t *testing.T) {
	c := &manualClock{wall: tiny.Epoch.Add(5 * 365 * 24 * time.Hour)}
	w := NewWide(tiny, c, tinyLead)
	now, _ := c.Now()
	u := tiny.Units(now)
	var gs []*Generator
	for _, wk := range []uint64{1, 2} {
		g, err := New(Config{Layout: tiny, Worker: wk, Clock: c, Floor: -1, Reserved: u, MaxLead: tinyLead})
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	w.SetMembers(gs)
	dst := make([]uint64, 64)
	if n, err := w.TryBatch(dst); err != nil || n != 8 {
		t.Fatalf("TryBatch up to the reservations: %d, %v; want both workers' unit (8)", n, err)
	}
	for _, g := range gs {
		g.SetReserved(NoReservation)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := w.AwaitBulk(ctx); err != nil {
		t.Fatalf("AwaitBulk with the reservations raised: %v", err)
	}
	if n, err := w.TryBulk(dst); err != nil || n == 0 {
		t.Fatalf("TryBulk with the reservations raised: %d, %v; want the next units", n, err)
	}
}
