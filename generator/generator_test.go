package generator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
)

// manualClock is a test clock: Advance moves wall and monotonic readings
// together, Step moves the wall reading alone.
type manualClock struct {
	mu   sync.Mutex
	wall time.Time
	mono time.Duration
}

func (c *manualClock) Now() (time.Time, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall, c.mono
}
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.wall, c.mono = c.wall.Add(d), c.mono+d
	c.mu.Unlock()
}
func (c *manualClock) Step(d time.Duration) { c.mu.Lock(); c.wall = c.wall.Add(d); c.mu.Unlock() }
func (c *manualClock) Set(t time.Time)      { c.mu.Lock(); c.wall = t; c.mu.Unlock() }

// realClock reads the system clock (tests only; the package itself never does).
type realClock struct{ origin time.Time }

func (c realClock) Now() (time.Time, time.Duration) {
	t := time.Now()
	return t.Round(0), t.Sub(c.origin)
}

// tiny: 4 IDs per 1 ms unit, so borrowing to the lead limit is quick.
var tiny = Layout{Epoch: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), Unit: time.Millisecond,
	TimeBits: 41, WorkerBits: 3, SequenceBits: 2}

const tinyLead = 200 * time.Millisecond

type rig struct {
	t     *testing.T
	clock *manualClock
	g     *Generator
	seen  map[uint64]bool
	last  uint64
}

func newRig(t *testing.T, mut func(*Config)) *rig {
	t.Helper()
	c := &manualClock{wall: tiny.Epoch.Add(5 * 365 * 24 * time.Hour)}
	cfg := Config{Layout: tiny, Worker: 5, Clock: c, Floor: -1, Reserved: NoReservation, MaxLead: tinyLead}
	if mut != nil {
		mut(&cfg)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &rig{t: t, clock: c, g: g, seen: map[uint64]bool{}}
}

func (r *rig) now() int64 { w, _ := r.clock.Now(); return tiny.Units(w) }

// try asks for one ID without letting a wait happen.
func (r *rig) try() (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	id, err := r.g.Next(ctx)
	if err == nil {
		r.record(id)
	}
	return id, err
}

func (r *rig) record(id uint64) {
	r.t.Helper()
	if r.seen[id] {
		r.t.Fatalf("duplicate ID %d", id)
	}
	if id <= r.last {
		r.t.Fatalf("ID %d not above previous %d", id, r.last)
	}
	r.seen[id] = true
	r.last = id
}

func (r *rig) mustNext() Parts {
	r.t.Helper()
	id, err := r.try()
	if err != nil {
		r.t.Fatalf("Next: %v", err)
	}
	p, _ := tiny.Decode(id)
	return p
}

// borrowToLimit issues IDs until the generator reaches the lead limit.
func (r *rig) borrowToLimit() {
	r.t.Helper()
	for i := 0; ; i++ {
		_, err := r.try()
		if errors.Is(err, ErrAhead) {
			return
		}
		if err != nil {
			r.t.Fatalf("borrowing: %v", err)
		}
		if i > 10000 {
			r.t.Fatal("never reached the lead limit")
		}
	}
}

// nextWhileAdvancing calls Next in the background and advances the clock one
// unit per real millisecond until it returns; it reports how far the clock
// had to move.
func (r *rig) nextWhileAdvancing(limit time.Duration) (Parts, time.Duration, error) {
	r.t.Helper()
	type res struct {
		id  uint64
		err error
	}
	done := make(chan res, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { id, err := r.g.Next(ctx); done <- res{id, err} }()
	var moved time.Duration
	for {
		select {
		case x := <-done:
			if x.err != nil {
				return Parts{}, moved, x.err
			}
			r.record(x.id)
			p, _ := tiny.Decode(x.id)
			return p, moved, nil
		case <-time.After(200 * time.Microsecond):
			if moved < limit {
				r.clock.Advance(time.Millisecond)
				moved += time.Millisecond
			}
		}
	}
}

func TestBackwardSteps(t *testing.T) {
	steps := []struct {
		name     string
		step     time.Duration
		absorbed bool
	}{
		{"1ms", time.Millisecond, true},
		{"10ms", 10 * time.Millisecond, true},
		{"100ms", 100 * time.Millisecond, true},
		{"just under max-lead", tinyLead - time.Millisecond, true},
		{"just over max-lead", tinyLead + time.Millisecond, false},
		{"10s", 10 * time.Second, false},
	}
	for _, mode := range []string{"idle", "borrowing at limit"} {
		for _, s := range steps {
			t.Run(mode+"/"+s.name, func(t *testing.T) {
				r := newRig(t, nil)
				r.mustNext()
				if mode == "borrowing at limit" {
					r.borrowToLimit()
				}
				before := r.g.Highest()
				r.clock.Step(-s.step)
				_, err := r.try()
				switch {
				case s.absorbed && mode == "idle":
					// L − now = step <= max-lead: served at once, above
					// everything issued before.
					if err != nil {
						t.Fatalf("idle step %v: %v, want an ID at once", s.step, err)
					}
				case s.absorbed:
					// Borrowing at the limit: the call waits (here: would
					// outlast the 1 ms deadline) but never fails, and is
					// delayed by at most the step plus one unit.
					if !errors.Is(err, ErrAhead) {
						t.Fatalf("step %v at limit: %v, want a wait (ErrAhead)", s.step, err)
					}
					r.clock.Advance(s.step)
					if _, err := r.try(); !errors.Is(err, ErrAhead) {
						t.Fatalf("after %v: %v, want still waiting", s.step, err)
					}
					r.clock.Advance(time.Millisecond)
					if _, err := r.try(); err != nil {
						t.Fatalf("after %v + 1 unit: %v, want served", s.step, err)
					}
					if r.g.Highest() <= before {
						t.Fatalf("time %d not above %d", r.g.Highest(), before)
					}
					// A blocking caller waits through a fresh step and
					// never sees an error.
					r.borrowToLimit()
					r.clock.Step(-s.step)
					if _, _, err := r.nextWhileAdvancing(2 * tinyLead); err != nil {
						t.Fatalf("blocking caller after step %v: %v", s.step, err)
					}
				default:
					var re *RollbackError
					if !errors.As(err, &re) || !errors.Is(err, ErrRollback) {
						t.Fatalf("step %v: %v, want *RollbackError", s.step, err)
					}
					if re.Step != s.step || re.Limit != tinyLead {
						t.Fatalf("RollbackError{%v, %v}, want {%v, %v}", re.Step, re.Limit, s.step, tinyLead)
					}
					// Still failing while L − now > max-lead.
					r.clock.Advance(s.step - tinyLead - time.Millisecond)
					if _, err := r.try(); !errors.Is(err, ErrRollback) {
						t.Fatalf("before recovery: %v, want ErrRollback", err)
					}
					// Recovered once L − now <= max-lead.
					r.clock.Advance(2 * time.Millisecond)
					if mode == "borrowing at limit" {
						r.clock.Advance(tinyLead)
					}
					if _, err := r.try(); err != nil {
						t.Fatalf("after recovery: %v", err)
					}
				}
				// Whatever happened, the IDs go on increasing.
				for i := 0; i < 20; i++ {
					if _, err := r.try(); err != nil && !errors.Is(err, ErrAhead) {
						t.Fatalf("after step: %v", err)
					}
				}
			})
		}
	}
}

func TestClockPaths(t *testing.T) {
	t.Run("forward jump", func(t *testing.T) {
		r := newRig(t, nil)
		p0 := r.mustNext()
		r.clock.Step(10 * time.Second)
		p1 := r.mustNext()
		if p1.Units != p0.Units+10000 || p1.Sequence != 0 {
			t.Fatalf("after +10s: %+v (before %+v)", p1, p0)
		}
	})
	t.Run("sequence exhaustion borrows the next unit", func(t *testing.T) {
		r := newRig(t, nil)
		now := r.now()
		for i := 0; i < 4; i++ {
			if p := r.mustNext(); p.Units != now || p.Sequence != uint64(i) {
				t.Fatalf("ID %d: %+v", i, p)
			}
		}
		if p := r.mustNext(); p.Units != now+1 || p.Sequence != 0 {
			t.Fatalf("5th ID %+v, want borrowed unit %d", p, now+1)
		}
	})
	t.Run("NextBatch stays in one unit", func(t *testing.T) {
		r := newRig(t, nil)
		buf := make([]uint64, 10)
		n, err := r.g.NextBatch(context.Background(), buf)
		if err != nil || n != 4 {
			t.Fatalf("NextBatch = %d, %v; want 4 (one unit)", n, err)
		}
		for _, id := range buf[:n] {
			r.record(id)
		}
		n, err = r.g.NextBatch(context.Background(), buf[:3])
		if err != nil || n != 3 {
			t.Fatalf("second NextBatch = %d, %v", n, err)
		}
	})
	t.Run("borrowing stops at max-lead", func(t *testing.T) {
		r := newRig(t, nil)
		now := r.now()
		r.borrowToLimit()
		if lead := r.g.Highest() - now; lead != int64(tinyLead/time.Millisecond) {
			t.Fatalf("lead at limit = %d units, want %d", lead, tinyLead/time.Millisecond)
		}
		if len(r.seen) != 4*(int(tinyLead/time.Millisecond)+1) {
			t.Fatalf("issued %d IDs at the limit", len(r.seen))
		}
		r.clock.Advance(time.Millisecond)
		if p := r.mustNext(); p.Units != r.now()+int64(tinyLead/time.Millisecond) {
			t.Fatalf("after one more unit: %+v", p)
		}
	})
	t.Run("floor ahead within max-lead", func(t *testing.T) {
		var r *rig
		r = newRig(t, func(c *Config) { c.Floor = tiny.Units(c.Clock.(*manualClock).wall) + 50 })
		if p := r.mustNext(); p.Units != r.g.Floor()+1 {
			t.Fatalf("first ID at %d, want floor+1 = %d", p.Units, r.g.Floor()+1)
		}
	})
	t.Run("floor ahead beyond max-lead", func(t *testing.T) {
		r := newRig(t, func(c *Config) { c.Floor = tiny.Units(c.Clock.(*manualClock).wall) + 500 })
		if _, err := r.try(); !errors.Is(err, ErrAhead) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("floor 500 units ahead: %v, want ErrAhead", err)
		}
		r.clock.Advance(300 * time.Millisecond) // floor+1 − now = 201 units
		if _, err := r.try(); !errors.Is(err, ErrAhead) {
			t.Fatalf("201 units ahead: %v, want ErrAhead", err)
		}
		r.clock.Advance(time.Millisecond)
		if p := r.mustNext(); p.Units != r.g.Floor()+1 {
			t.Fatalf("after waiting: %+v, want floor+1", p)
		}
	})
	t.Run("reservation reached", func(t *testing.T) {
		var start int64
		r := newRig(t, func(c *Config) {
			start = tiny.Units(c.Clock.(*manualClock).wall)
			c.Reserved = start + 1
		})
		for i := 0; i < 8; i++ {
			r.mustNext()
		}
		_, err := r.try()
		var re *ReservationError
		if !errors.As(err, &re) || re.Need != start+2 || re.Reserved != start+1 {
			t.Fatalf("past the reservation: %v, want *ReservationError{need %d, reserved %d}", err, start+2, start+1)
		}
		// A waiting caller is woken by SetReserved.
		done := make(chan error, 1)
		go func() {
			id, err := r.g.Next(context.Background())
			if err == nil {
				p, _ := tiny.Decode(id)
				if p.Units != start+2 {
					err = errors.New("wrong unit after SetReserved")
				}
			}
			done <- err
		}()
		awaitWaits(t, r.g, 1)
		r.g.SetReserved(start) // lowering is ignored
		if r.g.Reserved() != start+1 {
			t.Fatalf("SetReserved lowered the bound")
		}
		r.g.SetReserved(start + 5)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("waiter not woken by SetReserved")
		}
		if r.g.ReservationWaits() == 0 {
			t.Fatal("no reservation wait counted")
		}
	})
	t.Run("clock before epoch", func(t *testing.T) {
		r := newRig(t, nil)
		r.clock.Set(tiny.Epoch.Add(-time.Second))
		if _, err := r.try(); !errors.Is(err, ErrClockRange) {
			t.Fatalf("before epoch: %v, want ErrClockRange", err)
		}
	})
	t.Run("clock past the layout", func(t *testing.T) {
		r := newRig(t, nil)
		r.clock.Set(tiny.End().Add(time.Millisecond))
		if _, err := r.try(); !errors.Is(err, ErrClockRange) {
			t.Fatalf("past end: %v, want ErrClockRange", err)
		}
	})
	t.Run("never past the layout's last time", func(t *testing.T) {
		r := newRig(t, nil)
		r.clock.Set(tiny.UnitStart(tiny.MaxTime()))
		for i := 0; i < 4; i++ {
			r.mustNext()
		}
		if _, err := r.try(); !errors.Is(err, ErrClockRange) {
			t.Fatalf("borrowing past the end: %v, want ErrClockRange", err)
		}
	})
	t.Run("retired", func(t *testing.T) {
		r := newRig(t, nil)
		r.mustNext()
		h := r.g.Highest()
		r.g.Retire()
		if _, err := r.try(); !errors.Is(err, ErrRetired) {
			t.Fatalf("after Retire: %v", err)
		}
		if r.g.Highest() != h {
			t.Fatal("Highest moved after Retire")
		}
	})
}

func TestNewRefuses(t *testing.T) {
	c := &manualClock{wall: tiny.Epoch.Add(time.Hour * 24 * 400)}
	base := Config{Layout: tiny, Clock: c, Floor: -1, Reserved: NoReservation}
	cases := []struct {
		name string
		mut  func(*Config)
	}{
		{"no clock", func(c *Config) { c.Clock = nil }},
		{"worker too wide", func(c *Config) { c.Worker = 8 }},
		{"datacenter too wide", func(c *Config) { c.Datacenter = 1 }},
		{"max-lead below 2 units", func(c *Config) { c.MaxLead = time.Millisecond }},
		{"bad layout", func(c *Config) { c.Layout.SequenceBits = 0 }},
		{"negative reservation", func(c *Config) { c.Reserved = -5 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mut(&cfg)
			if _, err := New(cfg); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
	g, err := New(base)
	if err != nil || g.MaxLead() != time.Second {
		t.Fatalf("default max-lead: %v, %v", g.MaxLead(), err)
	}
}

// TestConcurrentUnique: many goroutines, millions of IDs on the real clock;
// no duplicate, and each goroutine's IDs strictly increase.
// TestConcurrentUnique: 2 M IDs from 16 goroutines, each goroutine's
// increasing, none twice, in both field orders.
func TestConcurrentUnique(t *testing.T) {
	sf, _ := Preset("snowflake")
	seqNode := sf
	seqNode.Order = SeqNode
	for _, l := range []Layout{sf, seqNode} {
		t.Run(l.Order.String(), func(t *testing.T) { concurrentUnique(t, l) })
	}
}

func concurrentUnique(t *testing.T, sf Layout) {
	g, err := New(Config{Layout: sf, Worker: 7, Datacenter: 3, Clock: realClock{time.Now()},
		Floor: -1, Reserved: NoReservation, MaxLead: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 16, 125_000 // 2 M IDs
	out := make([][]uint64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]uint64, 0, each)
			buf := make([]uint64, 64)
			ctx := context.Background()
			for len(ids) < each {
				if w%2 == 0 {
					id, err := g.Next(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					ids = append(ids, id)
					continue
				}
				n, err := g.NextBatch(ctx, buf[:min(len(buf), each-len(ids))])
				if err != nil {
					t.Error(err)
					return
				}
				ids = append(ids, buf[:n]...)
			}
			out[w] = ids
		}()
	}
	wg.Wait()
	all := make([]uint64, 0, workers*each)
	for w, ids := range out {
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				t.Fatalf("goroutine %d: ID %d after %d", w, ids[i], ids[i-1])
			}
		}
		all = append(all, ids...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("duplicate ID %d", all[i])
		}
	}
	if len(all) != workers*each {
		t.Fatalf("got %d IDs", len(all))
	}
	p, _ := sf.Decode(all[0])
	if p.Worker != 7 || p.Datacenter != 3 {
		t.Fatalf("fields %+v", p)
	}
}

// fastManual is a manual clock that also offers monotonic-only reads, as
// the system clock does.
type fastManual struct {
	manualClock
	fullReads int
}

func (c *fastManual) Now() (time.Time, time.Duration) {
	c.mu.Lock()
	c.fullReads++
	c.mu.Unlock()
	return c.manualClock.Now()
}

func (c *fastManual) FastMono() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono, true
}

// TestFastClockStepReachesPolicy: with monotonic-only reads, the wall clock
// is read in full at least once a millisecond, so a real step reaches the
// clock policy within that window.
func TestFastClockStepReachesPolicy(t *testing.T) {
	c := &fastManual{manualClock: manualClock{wall: tiny.Epoch.Add(5 * 365 * 24 * time.Hour)}}
	g, err := New(Config{Layout: tiny, Worker: 1, Clock: c, Floor: -1, Reserved: NoReservation, MaxLead: tinyLead})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	next := func() error { _, err := g.Next(ctx); return err }
	if err := next(); err != nil {
		t.Fatal(err)
	}
	reads := c.fullReads
	c.Advance(100 * time.Microsecond)
	if err := next(); err != nil || c.fullReads != reads {
		t.Fatalf("within the window: err %v, full reads %d -> %d", err, reads, c.fullReads)
	}
	c.Step(-10 * time.Second)
	// Within the window the step is not seen yet; the IDs stay unique.
	if err := next(); err != nil {
		t.Fatalf("extrapolated read: %v", err)
	}
	c.Advance(time.Millisecond)
	if err := next(); !errors.Is(err, ErrRollback) {
		t.Fatalf("one window after a 10s step back: %v, want ErrRollback", err)
	}
	if c.fullReads <= reads {
		t.Fatal("no full read after the window")
	}
}

// On a real clock, callers of Next at the lead limit spin out the wait for
// the next unit under the lock (spinOut). The IDs stay unique and increasing
// per caller, and none runs more than MaxLead ahead of the clock read after
// it was returned.
func TestNextSpinsAtLeadLimitOnRealClock(t *testing.T) {
	l := Layout{Epoch: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Unit: time.Millisecond,
		TimeBits: 41, WorkerBits: 1, SequenceBits: 6}
	clock := clockguard.NewSystem()
	g, err := New(Config{Layout: l, Clock: clock, Floor: -1, Reserved: NoReservation, MaxLead: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !g.spin {
		t.Fatal("the system clock does not enable spinning")
	}
	const callers, each = 4, 2000
	got := make([][]uint64, callers)
	late := make([]string, callers)
	var wg sync.WaitGroup
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := 0; i < each; i++ {
				id, err := g.Next(ctx)
				if err != nil {
					late[c] = err.Error()
					return
				}
				wall, _ := clock.Now()
				p, _ := l.Decode(id)
				if lead := p.Time.Sub(wall); lead > 2*time.Millisecond && late[c] == "" {
					late[c] = fmt.Sprintf("ID at %v is %v ahead of the clock", p.Time, lead)
				}
				got[c] = append(got[c], id)
			}
		}()
	}
	wg.Wait()
	for c := range late {
		if late[c] != "" {
			t.Fatalf("caller %d: %s", c, late[c])
		}
	}
	seen := map[uint64]bool{}
	for c, ids := range got {
		for i, id := range ids {
			if seen[id] {
				t.Fatalf("ID %d issued twice", id)
			}
			seen[id] = true
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("caller %d: %d after %d", c, id, ids[i-1])
			}
		}
	}
}

// TryBulk stops one unit short of the lead limit and leaves that unit to
// Next; AwaitBulk waits until the clock lets TryBulk produce again, and
// refuses a wait longer than the caller's deadline. The IDs of both stay
// unique and increasing.
func TestBulkLeavesTheLeadEdge(t *testing.T) {
	r := newRig(t, nil)
	leadUnits := int64(tinyLead / tiny.Unit)
	buf := make([]uint64, 4)
	for i := 0; ; i++ {
		n, err := r.g.TryBulk(buf)
		if err != nil {
			t.Fatalf("TryBulk: %v", err)
		}
		if n == 0 {
			break
		}
		for _, id := range buf[:n] {
			r.record(id)
		}
		if i > 10000 {
			t.Fatal("TryBulk never stopped")
		}
	}
	p, _ := tiny.Decode(r.last)
	if got := p.Units - r.now(); got != leadUnits-1 {
		t.Fatalf("bulk stopped %d units ahead, want %d (one short of the lead limit)", got, leadUnits-1)
	}
	// The edge unit is Next's, at once.
	if q := r.mustNext(); q.Units-r.now() != leadUnits {
		t.Fatalf("Next took unit %d ahead, want the edge unit %d", q.Units-r.now(), leadUnits)
	}
	// AwaitBulk: the clock must move before bulk can produce again.
	short, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := r.g.AwaitBulk(short); !errors.Is(err, ErrAhead) {
		t.Fatalf("AwaitBulk with a 1 ms deadline at the bulk limit: %v, want ErrAhead", err)
	}
	done := make(chan error, 1)
	go func() { done <- r.g.AwaitBulk(context.Background()) }()
	for moved := 0; ; moved++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("AwaitBulk: %v", err)
			}
			n, err := r.g.TryBulk(buf)
			if err != nil || n == 0 {
				t.Fatalf("TryBulk after AwaitBulk: %d, %v; want IDs", n, err)
			}
			for _, id := range buf[:n] {
				r.record(id)
			}
			return
		case <-time.After(200 * time.Microsecond):
			if moved > 100 {
				t.Fatal("AwaitBulk did not return as the clock moved")
			}
			r.clock.Advance(time.Millisecond)
		}
	}
}
