package source_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/segment/source"
)

var spec = coordinator.CounterSpec{Generator: "orders", Definition: segment.Default()}

func newSource(t *testing.T, c coordinator.Counters, mod func(*source.Config)) *source.Source {
	t.Helper()
	cfg := source.Config{Spec: spec, Counters: c, Clock: clockguard.NewSystem(), MinStep: 100, MaxStep: 1 << 20,
		Node: coordinator.NodeInfo{Name: "n", InstanceID: "i"}}
	if mod != nil {
		mod(&cfg)
	}
	s, err := source.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = s.Stop(context.Background(), false) })
	return s
}

func take(t *testing.T, s *source.Source, n uint64) []segment.Range {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runs, err := s.Take(ctx, n, nil)
	if err != nil {
		t.Fatalf("take %d: %v", n, err)
	}
	var got uint64
	for _, r := range runs {
		got += r.Len()
	}
	if got != n {
		t.Fatalf("take %d: runs %v hold %d", n, runs, got)
	}
	return runs
}

// TestTakesIncreaseAndNeverRepeat: two sources on one counter, four
// callers each: every ID once, each source's takes in increasing order.
func TestTakesIncreaseAndNeverRepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		clock := clockguard.NewSystem()
		var mu sync.Mutex
		seen := map[uint64]bool{}
		var wg sync.WaitGroup
		for range 2 {
			c := store.Connect(clock)
			defer c.Close()
			s := newSource(t, c, nil)
			var last uint64 // the highest ID this source handed out
			var smu sync.Mutex
			for caller := range 4 {
				wg.Go(func() {
					for i := range 300 {
						n := uint64(1 + (caller*7+i)%23)
						smu.Lock() // one take at a time, to compare with the last
						runs := take(t, s, n)
						for _, r := range runs {
							if r.First <= last && last != 0 {
								t.Errorf("run %v not above %d", r, last)
							}
							last = r.Last
						}
						smu.Unlock()
						mu.Lock()
						for _, r := range runs {
							for id := r.First; id <= r.Last; id++ {
								if seen[id] {
									t.Errorf("ID %d handed out twice", id)
								}
								seen[id] = true
							}
						}
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		if len(seen) == 0 {
			t.Fatal("no IDs")
		}
	})
}

// TestStopHandsBack: a graceful stop returns the unused IDs; the next
// source starts right after the last ID handed out, so nothing is lost.
func TestStopHandsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		a := newSource(t, c, nil)
		if runs := take(t, a, 5); runs[0].First != 1 {
			t.Fatalf("first take %v", runs)
		}
		synctest.Wait() // the prefetch, if any, lands
		back, err := a.Stop(context.Background(), true)
		st := a.Stats()
		if err != nil || back != st.Claimed-5 || st.HandedBack != back {
			t.Fatalf("stop: %d handed back, %v; stats %+v", back, err, st)
		}
		if _, err := a.Take(context.Background(), 1, nil); !errors.Is(err, source.ErrStopped) {
			t.Fatalf("take after stop: %v", err)
		}
		b := newSource(t, c, nil)
		if runs := take(t, b, 3); runs[0] != (segment.Range{First: 6, Last: 8}) {
			t.Fatalf("next source's first take %v, want [6, 8]", runs)
		}
	})
}

// TestNoWaitAtSteadyRate: at a steady rate, after the first claim, no take
// waits for the coordinator (each 100 ms of coordinator latency), and the
// counter is written about once per Interval.
func TestNoWaitAtSteadyRate(t *testing.T) {
	for _, settle := range []time.Duration{0, source.DefaultSettle} {
		t.Run(fmt.Sprintf("settle=%v", settle), func(t *testing.T) { noWaitAtSteadyRate(t, settle) })
	}
}

func noWaitAtSteadyRate(t *testing.T, settle time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		store.Faults().SetLatency(memory.OpCounter, 100*time.Millisecond)
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		s := newSource(t, c, func(cfg *source.Config) {
			cfg.Interval = 2 * time.Second
			if settle > 0 {
				cfg.PollEvery, cfg.Settle = source.DefaultPollEvery, settle
			}
		})
		take(t, s, 1)
		waited := 0
		var ramp source.Stats
		for i := range 20_000 { // 20 s at 1,000 takes of 10 IDs per second
			if i == 4000 {
				ramp = s.Stats()
			}
			start := time.Now()
			take(t, s, 10)
			if i > 4000 && time.Since(start) > 0 { // virtual time: passes only while blocked
				waited++
			}
			time.Sleep(time.Millisecond)
		}
		st := s.Stats()
		if waited > 0 {
			t.Fatalf("%d takes waited for a claim after the first 4 s; stats %+v", waited, st)
		}
		// 10,000 IDs/s and a 2 s interval: steps of about 20,000, so
		// about 8 claims in the 16 s after the ramp.
		if n := st.Claims - ramp.Claims; n > 10 || st.Step < 15_000 || st.Step > 25_000 {
			t.Fatalf("%d claims after the ramp (%d in all), step %d: want about one claim per 2 s at steps near 20,000", n, st.Claims, st.Step)
		}
		if settle > 0 && (st.Polls < 15 || st.Polls > 40) {
			t.Fatalf("%d reads of the counter in 20 s, want about one a second", st.Polls)
		}
	})
}

// TestSettle: on a shared coordinator a claim's IDs wait Settle and a
// confirming read; a take whose deadline falls before that is refused at
// once, naming the wait.
func TestSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		s := newSource(t, c, func(cfg *source.Config) { cfg.PollEvery, cfg.Settle = time.Second, 2*time.Second })
		synctest.Wait()
		if st := s.Stats(); st.Claims != 1 || st.Settling == 0 || st.Available != 0 {
			t.Fatalf("after the first claim: %+v, want it settling", st)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		start := time.Now()
		_, err := s.Take(ctx, 1, nil)
		cancel()
		var se *source.SettleError
		if !errors.As(err, &se) || time.Since(start) != 0 || se.Wait != 2*time.Second {
			t.Fatalf("take with a 500 ms deadline: %v after %v, want a SettleError of 2 s at once", err, time.Since(start))
		}
		start = time.Now()
		take(t, s, 1)
		if w := time.Since(start); w != 2*time.Second {
			t.Fatalf("the first take waited %v, want the 2 s settle", w)
		}
	})
}

// TestRestoreFoundByPoll: node A claims and hands out IDs; the
// coordinator is restored to a snapshot from before; fresh node B (no
// memory) claims the same IDs. A's next read finds its write missing from
// the counter's history and writes the marker before B's claim settles:
// B never hands out an ID, and A stops. Without Settle, B hands out IDs A
// handed out (the premise: the poll alone would be too late).
func TestRestoreFoundByPoll(t *testing.T) {
	for _, settle := range []bool{true, false} {
		t.Run(fmt.Sprintf("settle=%v", settle), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memory.New(memory.Config{})
				snap := store.Snapshot()
				mark := func(c *memory.Client) func(context.Context, coordinator.RestoreEvidence) error {
					return c.MarkRestored
				}
				shared := func(cfg *source.Config) {
					cfg.PollEvery, cfg.Settle = time.Second, 2*time.Second
				}
				ca, cb := store.Connect(clockguard.NewSystem()), store.Connect(clockguard.NewSystem())
				defer ca.Close()
				defer cb.Close()
				a := newSource(t, ca, func(cfg *source.Config) { shared(cfg); cfg.Mark = mark(ca) })
				got := take(t, a, 10)
				store.Restore(snap)
				b := newSource(t, cb, func(cfg *source.Config) {
					cfg.Node.Name = "b"
					if settle {
						shared(cfg)
					} else {
						cfg.PollEvery = time.Second
					}
					cfg.Mark = mark(cb)
				})
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				runs, err := b.Take(ctx, 10, nil)
				if !settle {
					if err != nil || runs[0] != got[0] {
						t.Fatalf("without Settle: %v %v, want B to hand out %v again (the premise)", runs, err, got)
					}
					return
				}
				if !errors.Is(err, coordinator.ErrRestored) {
					t.Fatalf("B's take after the restore: %v %v, want ErrRestored (A's marker)", runs, err)
				}
				if _, err := a.Take(ctx, 1, nil); !errors.Is(err, coordinator.ErrRolledBack) {
					t.Fatalf("A's take after its read found the restore: %v, want ErrRolledBack", err)
				}
				if st := b.Stats(); st.Issued != 0 {
					t.Fatalf("B issued %d IDs", st.Issued)
				}
				// A bump clears it: both read on, and claim again above
				// everything, without a restart. B raised the marker to
				// what it saw (raiseMarkerLocked, a write of its own
				// goroutine): the bump waits for it. A raise that lands
				// after a bump writes the marker anew, and the generator
				// stops until the next bump (fail closed: the raise was
				// read before the bump, which may not cover it).
				synctest.Wait()
				res, err := ca.BumpCounter(ctx, spec, 1000)
				if err != nil || res.Cleared == nil {
					t.Fatalf("bump: %+v %v", res, err)
				}
				time.Sleep(5 * time.Second)
				for name, src := range map[string]*source.Source{"A": a, "B": b} {
					runs := take(t, src, 5)
					if runs[0].First < res.After.Next {
						t.Fatalf("%s after the bump: %v, want from %d on", name, runs, res.After.Next)
					}
				}
			})
		})
	}
}

// TestRestoreStopsTheSource: a counter restored below what the source saw
// acknowledged stops it at its next claim, with the marker written, and
// takes are refused at once with the cause.
func TestRestoreStopsTheSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		snap := store.Snapshot()
		marked := make(chan coordinator.RestoreEvidence, 1)
		s := newSource(t, c, func(cfg *source.Config) {
			cfg.Mark = func(ctx context.Context, ev coordinator.RestoreEvidence) error {
				marked <- ev
				return c.MarkRestored(ctx, ev)
			}
		})
		take(t, s, 1)
		synctest.Wait()
		store.Restore(snap)
		// Use up what was claimed: the next claim finds the counter lower.
		var err error
		for err == nil {
			_, err = s.Take(context.Background(), 50, nil)
		}
		if !errors.Is(err, coordinator.ErrRolledBack) {
			t.Fatalf("take after the restore: %v, want ErrRolledBack", err)
		}
		ev := <-marked
		if ev.Generator != "orders" || ev.Acked <= ev.Shown || ev.Node.Name != "n" {
			t.Fatalf("evidence %+v", ev)
		}
		other := store.Connect(clockguard.NewSystem())
		defer other.Close()
		if _, err := other.ReadCounter(context.Background(), spec); !errors.Is(err, coordinator.ErrRestored) {
			t.Fatalf("another node's read after the marker: %v, want ErrRestored", err)
		}
	})
}

// TestRefusesAtOnceWithTheCause: with the coordinator refusing, a take
// with nothing claimed is refused at once naming the cause, and serves
// once the coordinator is back.
func TestRefusesAtOnceWithTheCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		store.Faults().SetAvailability(memory.OpAll, memory.Refusing)
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		s := newSource(t, c, nil)
		synctest.Wait()
		start := time.Now()
		_, err := s.Take(context.Background(), 1, nil)
		if !errors.Is(err, coordinator.ErrUnavailable) || !strings.Contains(err.Error(), "orders") || time.Since(start) != 0 {
			t.Fatalf("take while the coordinator refuses: %v after %v, want ErrUnavailable at once", err, time.Since(start))
		}
		store.Faults().SetAvailability(memory.OpAll, memory.Available)
		time.Sleep(time.Second)
		take(t, s, 1)
	})
}

// TestExhaustion: the last IDs up to max are handed out, then takes are
// refused with segment.ErrExhausted.
func TestExhaustion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		small := coordinator.CounterSpec{Generator: "small", Definition: segment.Definition{Start: 1, Max: 250}}
		s := newSource(t, c, func(cfg *source.Config) { cfg.Spec = small })
		var got uint64
		var err error
		for err == nil {
			var runs []segment.Range
			runs, err = s.Take(context.Background(), 7, nil)
			for _, r := range runs {
				got += r.Len()
			}
		}
		if !errors.Is(err, segment.ErrExhausted) || got < 250-6 {
			t.Fatalf("after %d IDs: %v, want ErrExhausted near 250", got, err)
		}
	})
}

// TestLargeTakeOneClaim: a take far larger than the step is covered by
// one claim, not a claim per step.
func TestLargeTakeOneClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		s := newSource(t, c, nil) // MinStep 100
		take(t, s, 1)
		synctest.Wait()
		before := s.Stats().Claims
		take(t, s, 1_000_000)
		if got := s.Stats().Claims - before; got > 2 {
			t.Fatalf("a take of 1,000,000 at a step of 100 made %d claims, want at most 2", got)
		}
	})
}

// TestCrashCountedAsSkipped: a source records, before it hands out a
// claim, what it then holds unused; after a crash (no hand-back) the next
// process from the same record adds that to the counter's skipped IDs at
// its first claim, and a graceful stop records nothing held.
func TestCrashCountedAsSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		var mark segment.Mark
		var held uint64
		var records int
		record := func(cfg *source.Config) {
			cfg.Record = func(m segment.Mark, h uint64) error { mark, held = m, h; records++; return nil }
		}
		a := newSource(t, c, record)
		take(t, a, 30)
		synctest.Wait()
		if st := a.Stats(); records != int(st.Claims) || held != st.Claimed || held == 0 {
			t.Fatalf("records %d, held %d after the claims; stats %+v", records, held, st)
		}
		crashHeld := held
		if _, err := a.Stop(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		if records != int(a.Stats().Claims) {
			t.Fatalf("a crash recorded something")
		}
		b := newSource(t, c, func(cfg *source.Config) { record(cfg); cfg.Known, cfg.Lost = mark, crashHeld })
		take(t, b, 1)
		if sk := b.Stats().Counter.Skipped; sk != crashHeld {
			t.Fatalf("counter skipped %d after the restart, want what the crashed process held at its last claim (%d)", sk, crashHeld)
		}
		if _, err := b.Stop(context.Background(), true); err != nil {
			t.Fatal(err)
		}
		if held != 0 {
			t.Fatalf("a graceful stop recorded %d held", held)
		}
		rec, err := c.ReadCounter(context.Background(), spec)
		if err != nil || rec.State.Skipped != crashHeld || rec.State.Follows(mark) != nil {
			t.Fatalf("counter %+v %v: want skipped %d, and the last record's mark in its history", rec.State, err, crashHeld)
		}
	})
}

// TestStopsServingBeforeRunningOut: with the coordinator lost, a source
// keeps handing out what it holds, and says it cannot serve (Notify with
// the cause) while it still holds IDs — ServeMargin of its rate — so
// readiness turns before calls would fail; a claim landing later says it
// serves again.
func TestStopsServingBeforeRunningOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		var mu sync.Mutex
		var told []error
		s := newSource(t, c, func(cfg *source.Config) {
			cfg.Notify = func(err error) { mu.Lock(); told = append(told, err); mu.Unlock() }
		})
		for range 3000 { // 3 s at 10,000 IDs/s
			take(t, s, 10)
			time.Sleep(time.Millisecond)
		}
		store.Faults().SetAvailability(memory.OpAll, memory.Refusing)
		mu.Lock()
		told = nil
		mu.Unlock()
		var leftWhenTold uint64
		for i := 0; ; i++ {
			mu.Lock()
			n := len(told)
			mu.Unlock()
			if n > 0 {
				leftWhenTold = s.Stats().Available
				break
			}
			if i > 100_000 {
				t.Fatal("the source never said it cannot serve")
			}
			take(t, s, 10) // every take before the news succeeds
			time.Sleep(time.Millisecond)
		}
		if !errors.Is(told[0], coordinator.ErrUnavailable) || leftWhenTold == 0 || leftWhenTold > 6_000 {
			t.Fatalf("told %v with %d IDs left; want ErrUnavailable with some IDs left, at most about 500 ms of 10,000/s", told[0], leftWhenTold)
		}
		store.Faults().SetAvailability(memory.OpAll, memory.Available)
		time.Sleep(time.Second)
		mu.Lock()
		defer mu.Unlock()
		if last := told[len(told)-1]; last != nil {
			t.Fatalf("after the coordinator came back: last news %v, want nil (serving)", last)
		}
	})
}

// TestClaimInDoubtResolved: a claim whose write landed but whose reply
// was lost is recognised by its write ID at the next claim, and its IDs
// are handed out — none skipped; the counter moved only once for it.
func TestClaimInDoubtResolved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		store.Faults().LoseReplies(memory.OpCounter, 1)
		s := newSource(t, c, nil)
		time.Sleep(time.Second) // the claim's retry, 200 ms after the lost reply
		runs := take(t, s, 1)
		if runs[0].First != 1 {
			t.Fatalf("first ID %d after the lost reply, want 1 (the claim in doubt landed and is this node's)", runs[0].First)
		}
		rec, err := c.ReadCounter(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); rec.State.Seq != 1 || st.Claims != 1 || st.Claimed != rec.State.Next-1 {
			t.Fatalf("counter %+v, stats %+v: want one write, all of it this node's", rec.State, st)
		}
	})
}

// TestStopKeepsUnconfirmedClaimAfterBump: node C claims and hands out IDs
// 1..10; the coordinator is restored to a snapshot from before; fresh
// node A claims the same IDs (settling). C's read finds the restore and
// writes the marker; the operator bumps before A's next read; A stops
// gracefully. A's claim was never confirmed and the bump started the
// counter's history again: A must not hand it back (its IDs are skipped),
// or fresh node D would claim that range and hand out C's IDs again.
func TestStopKeepsUnconfirmedClaimAfterBump(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		snap := store.Snapshot()
		shared := func(cfg *source.Config) { cfg.PollEvery, cfg.Settle = time.Second, 2*time.Second }
		cc, ca, cd := store.Connect(clockguard.NewSystem()), store.Connect(clockguard.NewSystem()), store.Connect(clockguard.NewSystem())
		defer cc.Close()
		defer ca.Close()
		defer cd.Close()
		c := newSource(t, cc, func(cfg *source.Config) { shared(cfg); cfg.Node.Name = "c"; cfg.Mark = cc.MarkRestored })
		issuedC := take(t, c, 10) // t = 2 s: the first claim settled
		store.Restore(snap)
		time.Sleep(500 * time.Millisecond) // t = 2.5 s
		var lost uint64
		a := newSource(t, ca, func(cfg *source.Config) {
			shared(cfg)
			cfg.Node.Name, cfg.Mark = "a", ca.MarkRestored
			cfg.Record = func(_ segment.Mark, held uint64) error { lost = held; return nil }
		})
		synctest.Wait()
		if st := a.Stats(); st.Settling == 0 {
			t.Fatalf("A holds no settling claim: %+v", st)
		}
		time.Sleep(600 * time.Millisecond) // t = 3.1 s: C read at 3 s; A reads at 3.5 s
		synctest.Wait()
		if _, err := cd.ReadCounter(context.Background(), spec); !errors.Is(err, coordinator.ErrRestored) {
			t.Fatalf("read after C's: %v, want the restore marker", err)
		}
		if res, err := cd.BumpCounter(context.Background(), spec, 1000); err != nil || res.Cleared == nil {
			t.Fatalf("bump: %+v %v", res, err)
		}
		claimed := a.Stats().Claimed
		back, err := a.Stop(context.Background(), true) // A never read since its claim
		if st := a.Stats(); err != nil || back != 0 || st.HandedBack != 0 || st.Dropped != claimed || lost != claimed {
			t.Errorf("A's stop: %d handed back (%v), %d recorded lost; stats %+v; want its unconfirmed claim of %d kept back and recorded lost",
				back, err, lost, st, claimed)
		}
		d := newSource(t, cd, func(cfg *source.Config) { shared(cfg); cfg.Node.Name, cfg.Mark = "d", cd.MarkRestored })
		for _, r := range take(t, d, 10) {
			for _, q := range issuedC {
				if r.First <= q.Last && q.First <= r.Last {
					t.Errorf("D issued %v, overlapping %v that C issued before the restore", r, q)
				}
			}
		}
	})
}

// TestStopHandsBackSettlingClaim: a claim still settling at a graceful
// stop, whose write the counter's history still holds, is handed back
// like a confirmed one: the next source starts from it.
func TestStopHandsBackSettlingClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		settle := func(cfg *source.Config) { cfg.PollEvery, cfg.Settle = time.Second, 2*time.Second }
		a := newSource(t, c, settle)
		synctest.Wait()
		st := a.Stats()
		if st.Settling == 0 || st.Available != 0 {
			t.Fatalf("want a settling claim only: %+v", st)
		}
		if back, err := a.Stop(context.Background(), true); err != nil || back != st.Claimed {
			t.Fatalf("stop: %d handed back, %v; want the %d claimed", back, err, st.Claimed)
		}
		b := newSource(t, c, settle)
		if runs := take(t, b, 3); runs[0] != (segment.Range{First: 1, Last: 3}) {
			t.Fatalf("next source's first take %v, want [1, 3]", runs)
		}
	})
}

// TestExhaustionServesWhatIsHeld: the claim that finds the definition used
// up (max 1,000, the prefetch claiming ahead) ends the claims but drops
// nothing: every ID up to max is handed out, the settling claims once
// confirmed, and only then are takes refused with segment.ErrExhausted,
// which Notify tells once, after the last ID.
func TestExhaustionServesWhatIsHeld(t *testing.T) {
	for _, settle := range []time.Duration{0, source.DefaultSettle} {
		t.Run(fmt.Sprint("settle=", settle), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { exhaustionServesWhatIsHeld(t, settle) })
		})
	}
}

func exhaustionServesWhatIsHeld(t *testing.T, settle time.Duration) {
	store := memory.New(memory.Config{})
	c := store.Connect(clockguard.NewSystem())
	defer c.Close()
	small := coordinator.CounterSpec{Generator: "small", Definition: segment.Definition{Start: 1, Max: 1000}}
	var mu sync.Mutex
	var told []error
	s := newSource(t, c, func(cfg *source.Config) {
		cfg.Spec = small
		cfg.Notify = func(err error) { mu.Lock(); told = append(told, err); mu.Unlock() }
		if settle > 0 {
			cfg.PollEvery, cfg.Settle, cfg.FirstStep = time.Second, settle, 100
		}
	})
	var got uint64
	next := uint64(1)
	var err error
	for err == nil {
		var runs []segment.Range
		runs, err = s.Take(context.Background(), 1, nil)
		for _, r := range runs {
			if r.First != next {
				t.Fatalf("took %v, want %d next", r, next)
			}
			got += r.Len()
			next = r.Last + 1
		}
		mu.Lock()
		for _, e := range told {
			if errors.Is(e, segment.ErrExhausted) && err == nil && got < 1000 {
				t.Fatalf("told %v after %d of 1,000 IDs, while the source still holds some", e, got)
			}
		}
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	st := s.Stats()
	if !errors.Is(err, segment.ErrExhausted) || got != 1000 || st.Dropped != 0 {
		t.Fatalf("after %d IDs of 1,000: %v; stats %+v; want every ID handed out, then ErrExhausted", got, err, st)
	}
	if !strings.Contains(err.Error(), "max=1000") {
		t.Fatalf("refusal %q does not name max", err)
	}
	if e := s.Err(); !errors.Is(e, segment.ErrExhausted) {
		t.Fatalf("Err after the last ID: %v, want ErrExhausted", e)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) == 0 || !errors.Is(told[len(told)-1], segment.ErrExhausted) {
		t.Fatalf("told %v, want ErrExhausted last", told)
	}
}

// TestSettleRefusalCountsTheConfirmingRead: a take that lacks IDs while a
// claim settles waits for that claim when it is confirmed before the
// take's deadline. The claim is confirmed by the read the source makes at
// its settle time (t = 4.5 s), whatever the period's next read (5 s): a
// take at 4.1 s with 600 ms left must be served at 4.5 s, not refused at
// once as "usable in 900ms, after the call's deadline".
func TestSettleRefusalCountsTheConfirmingRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		s := newSource(t, c, func(cfg *source.Config) { cfg.PollEvery, cfg.Settle = time.Second, 2*time.Second })
		synctest.Wait()                     // t = 0: the first claim (1,000 IDs) lands; confirmed at 2 s
		time.Sleep(2500 * time.Millisecond) // t = 2.5 s
		take(t, s, 1000)                    // all of it: the next claim lands now, confirmed at 4.5 s
		synctest.Wait()
		if st := s.Stats(); st.Available != 0 || st.Settling < 500 {
			t.Fatalf("want no IDs available and a claim of at least 500 settling: %+v", st)
		}
		time.Sleep(1600 * time.Millisecond) // t = 4.1 s; reads at 3 s and 4 s, the next period's at 5 s
		ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
		defer cancel()
		if _, err := s.Take(ctx, 500, nil); err != nil {
			t.Fatalf("take of 500 at t = 4.1 s with 600 ms left, the claim covering it confirmed at 4.5 s: %v", err)
		}
	})
}

// TestMarkerRaisedByANodeThatSawMore: node A writes after a snapshot, then
// cannot read the counter for a few seconds; meanwhile node B claims above
// A's last write and hands out IDs. The coordinator is restored to the
// snapshot. A reads first, finds the restore and writes the marker with
// what it saw (next below B's IDs); B's next read finds the marker. B saw
// the counter at a higher next: the marker must come to say so
// (RestoreEvidence.Covers: a marker is replaced by evidence of a higher
// value, the one a bump must reach), so that the bump the marker asks for
// (coordinator.CounterMinBump) lifts the counter above B's IDs. Before,
// only the first finder's evidence stood, the bump it asked for was
// accepted, and the counter gave B's IDs out again.
func TestMarkerRaisedByANodeThatSawMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		ca, cb, cop := store.Connect(clockguard.NewSystem()), store.Connect(clockguard.NewSystem()), store.Connect(clockguard.NewSystem())
		defer ca.Close()
		defer cb.Close()
		defer cop.Close()
		shared := func(cfg *source.Config) { cfg.PollEvery, cfg.Settle = time.Second, 2*time.Second }
		a := newSource(t, ca, func(cfg *source.Config) { shared(cfg); cfg.Node.Name, cfg.Mark = "a", ca.MarkRestored })
		take(t, a, 1) // t = 2 s: A's first claim settled
		snap := store.Snapshot()
		take(t, a, 600) // A claims again: writes the snapshot lacks
		synctest.Wait()
		ca.Faults().SetAvailability(memory.OpAll, memory.Refusing) // A cannot read for a while
		b := newSource(t, cb, func(cfg *source.Config) { shared(cfg); cfg.Node.Name, cfg.Mark = "b", cb.MarkRestored })
		issuedB := take(t, b, 10) // t = 4 s: B's claim, above A's, settled
		store.Restore(snap)
		ca.Faults().SetAvailability(memory.OpAll, memory.Available)
		time.Sleep(1100 * time.Millisecond) // A has read (and written the marker), then B
		synctest.Wait()
		_, err := cop.ReadCounter(context.Background(), spec)
		var re *coordinator.RestoredError
		if !errors.As(err, &re) {
			t.Fatalf("read after the restore: %v, want the restore marker", err)
		}
		// The operator bumps by what the marker asks for.
		by := coordinator.CounterMinBump(spec, segment.Counter{Next: uint64(re.Evidence.Shown)}, &re.Evidence)
		if res, err := cop.BumpCounter(context.Background(), spec, by); err != nil || res.Cleared == nil {
			t.Fatalf("bump by %d: %+v %v", by, res, err)
		}
		time.Sleep(3 * time.Second) // both read the bumped counter, claim again, and their claims settle
		for _, s := range []*source.Source{a, b} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			runs, err := s.Take(ctx, 10, nil)
			cancel()
			if err != nil {
				t.Errorf("take after the bump by %d: %v", by, err)
			}
			for _, r := range runs {
				for _, q := range issuedB {
					if r.First <= q.Last && q.First <= r.Last {
						t.Errorf("%v handed out after the bump by %d (marker: node %q saw next %d), overlapping %v that B handed out before the restore",
							r, by, re.Evidence.Node.Name, re.Evidence.Acked, q)
					}
				}
			}
		}
	})
}

// TestSlowClaimRefusedBeforeTheDeadlineWithoutSettle: on a coordinator
// nothing else writes (no Settle: the node's embedded coordinator) that
// answers slowly (here 1 s a call, a claim 2 s), a take for more than the
// source holds, whose deadline falls before the claim that would cover
// it can land, is refused at once naming the wait (SettleError: the
// coordinator's recent latency), not left to run into its deadline and
// answered DEADLINE_EXCEEDED, with no cause.
func TestSlowClaimRefusedBeforeTheDeadlineWithoutSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		store.Faults().SetLatency(memory.OpCounter, time.Second)
		s := newSource(t, c, nil)
		take(t, s, 1) // t = 2 s: the first claim (a read and a swap) landed
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := s.Take(ctx, s.Stats().Available+1, nil)
		var se *source.SettleError
		if !errors.As(err, &se) || ctx.Err() != nil {
			t.Fatalf("take for more than is held, 500 ms left, a claim taking 2 s: %v (the caller's deadline %v); want a refusal naming the wait, before the deadline",
				err, ctx.Err())
		}
	})
}

// A source that stopped serving while its claims failed serves again once
// a claim lands, even when nothing is taken meanwhile: the node refuses
// while the source says it cannot serve, so no take asks for a claim, and
// the rate the failed claims measure falls until the IDs held are above
// the low-water mark. The claims are retried until one lands all the
// same: otherwise the failure stands and the generator never serves
// again (the simulator's seed 9039, -seqevery 1).
func TestServesAgainAfterFailedClaimsWithNoTakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		var mu sync.Mutex
		var told []error
		s := newSource(t, c, func(cfg *source.Config) {
			cfg.Settle, cfg.PollEvery = 500*time.Millisecond, 500*time.Millisecond
			cfg.Notify = func(err error) { mu.Lock(); told = append(told, err); mu.Unlock() }
		})
		for range 3000 { // 3 s at 10,000 IDs/s
			take(t, s, 10)
			time.Sleep(time.Millisecond)
		}
		store.Faults().SetAvailability(memory.OpAll, memory.Refusing)
		mu.Lock()
		told = nil
		mu.Unlock()
		for i := 0; ; i++ {
			mu.Lock()
			n := len(told)
			mu.Unlock()
			if n > 0 {
				break
			}
			if i > 100_000 {
				t.Fatal("the source never said it cannot serve")
			}
			take(t, s, 10)
			time.Sleep(time.Millisecond)
		}
		// Not serving: the node takes nothing. The claims go on failing.
		time.Sleep(10 * time.Second)
		store.Faults().SetAvailability(memory.OpAll, memory.Available)
		time.Sleep(5 * time.Second)
		mu.Lock()
		defer mu.Unlock()
		if last := told[len(told)-1]; last != nil {
			t.Fatalf("5 s after the coordinator came back, with nothing taken: last news %v, want nil (serving); %+v", last, s.Stats())
		}
	})
}

// TestUsedUpTakeRefusedWhenSettlingClaimDropped: the definition is used
// up (max 200) while the source holds 99 confirmed IDs and its last claim
// [101, 200] settles; a take of 150 waits for that claim. A bump before
// the claim's confirming read starts the counter's history again, so the
// read drops the claim (skipped): no claim can bring more, and the
// waiting take must be refused then with the cause (used up), not left
// waiting until its deadline and refused as a deadline.
func TestUsedUpTakeRefusedWhenSettlingClaimDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		c := store.Connect(clockguard.NewSystem())
		defer c.Close()
		small := coordinator.CounterSpec{Generator: "small", Definition: segment.Definition{Start: 1, Max: 200}}
		s := newSource(t, c, func(cfg *source.Config) {
			cfg.Spec = small
			cfg.PollEvery, cfg.Settle, cfg.FirstStep = time.Second, 2*time.Second, 100
		})
		take(t, s, 1) // t = 2 s: [1, 100] confirmed, 99 held
		type result struct {
			err error
			at  time.Time
		}
		waiting := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := s.Take(ctx, 150, nil) // a claim [101, 200] covers it
			waiting <- result{err, time.Now()}
		}()
		time.Sleep(500 * time.Millisecond) // t = 2.5 s: the take's claim made
		if st := s.Stats(); st.Settling != 100 || st.Available != 99 {
			t.Fatalf("stats %+v: want 99 held and [101, 200] settling", st)
		}
		if _, err := s.Take(context.Background(), 250, nil); !errors.Is(err, segment.ErrExhausted) {
			t.Fatalf("take of 250: %v, want used up", err) // the claim that found the definition used up
		}
		synctest.Wait()
		if st := s.Stats(); st.Settling != 100 || st.Available != 99 {
			t.Fatalf("stats %+v: want 99 held and [101, 200] settling", st)
		}
		if _, err := c.BumpCounter(context.Background(), small, 1); err != nil {
			t.Fatal(err)
		}
		bumped := time.Now()
		time.Sleep(5 * time.Second) // the settling claim's read, and more
		synctest.Wait()
		if st := s.Stats(); st.Settling != 0 || st.Dropped != 100 {
			t.Fatalf("stats %+v: want the settling claim dropped", st)
		}
		select {
		case r := <-waiting:
			if !errors.Is(r.err, segment.ErrExhausted) {
				t.Fatalf("take of 150 refused %v after the bump: %v; want used up", r.at.Sub(bumped), r.err)
			}
		default:
			r := <-waiting
			t.Fatalf("take of 150 still waiting 5 s after its claim was dropped (no claim can come: used up); refused %v after the bump: %v",
				r.at.Sub(bumped), r.err)
		}
	})
}

// TestStopWritesTheMarkerOfARestoreItFinds: node A claims and hands out
// IDs 1..10; the coordinator is restored to a snapshot from before, and
// A is stopped gracefully before its next read. Its hand-back reads the
// counter and finds the restore (the history lacks A's write): A must
// write the restore marker as any read that finds one does, or fresh
// node B claims from the restored counter, finds no marker when its claim
// settles, and hands out A's IDs again.
func TestStopWritesTheMarkerOfARestoreItFinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		snap := store.Snapshot()
		shared := func(cfg *source.Config) { cfg.PollEvery, cfg.Settle = time.Second, 2*time.Second }
		ca, cb := store.Connect(clockguard.NewSystem()), store.Connect(clockguard.NewSystem())
		defer ca.Close()
		defer cb.Close()
		a := newSource(t, ca, func(cfg *source.Config) { shared(cfg); cfg.Node.Name, cfg.Mark = "a", ca.MarkRestored })
		issuedA := take(t, a, 10) // t = 2 s: the first claim settled
		polls := a.Stats().Polls
		store.Restore(snap)
		_, err := a.Stop(context.Background(), true)
		if a.Stats().Polls != polls {
			t.Fatalf("A read the counter between the restore and its stop")
		}
		if !errors.Is(err, coordinator.ErrRolledBack) {
			t.Fatalf("A's stop: %v, want the hand-back refused as a restore", err)
		}
		synctest.Wait()
		b := newSource(t, cb, func(cfg *source.Config) { shared(cfg); cfg.Node.Name, cfg.Mark = "b", cb.MarkRestored })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		runs, err := b.Take(ctx, 10, nil)
		for _, r := range runs {
			for _, q := range issuedA {
				if r.First <= q.Last && q.First <= r.Last {
					t.Errorf("B handed out %v, overlapping %v that A handed out before the restore A's stop found", r, q)
				}
			}
		}
		if err == nil || !errors.Is(err, coordinator.ErrRestored) {
			t.Fatalf("B's take after A's stop found the restore: %v, want RESTORE (the marker A writes)", err)
		}
	})
}

// TestStopRaisesTheMarkerOfANodeThatSawMore: as
// TestMarkerRaisedByANodeThatSawMore, but B is stopped gracefully after A
// wrote the marker (recording the lower next A saw) and before B's next
// read: B's hand-back is refused by the marker, and B must raise it to
// what it saw, or the bump the marker asks for lies below IDs B handed out
// and a fresh node hands them out again.
func TestStopRaisesTheMarkerOfANodeThatSawMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		ca, cb, cd, cop := store.Connect(clockguard.NewSystem()), store.Connect(clockguard.NewSystem()), store.Connect(clockguard.NewSystem()), store.Connect(clockguard.NewSystem())
		defer ca.Close()
		defer cb.Close()
		defer cd.Close()
		defer cop.Close()
		shared := func(cfg *source.Config) { cfg.PollEvery, cfg.Settle = time.Second, 2*time.Second }
		a := newSource(t, ca, func(cfg *source.Config) { shared(cfg); cfg.Node.Name, cfg.Mark = "a", ca.MarkRestored })
		take(t, a, 1) // t = 2 s: A's first claim settled
		snap := store.Snapshot()
		take(t, a, 600) // A claims again: writes the snapshot lacks
		synctest.Wait()
		ca.Faults().SetAvailability(memory.OpAll, memory.Refusing) // A cannot read for a while
		b := newSource(t, cb, func(cfg *source.Config) { shared(cfg); cfg.Node.Name, cfg.Mark = "b", cb.MarkRestored })
		issuedB := take(t, b, 10) // B's claim, above A's, settled
		polls := b.Stats().Polls
		store.Restore(snap)
		ca.Faults().SetAvailability(memory.OpAll, memory.Available)
		time.Sleep(300 * time.Millisecond) // A has read and written the marker; B has not read
		synctest.Wait()
		var re *coordinator.RestoredError
		if _, err := cop.ReadCounter(context.Background(), spec); !errors.As(err, &re) || re.Evidence.Node.Name != "a" {
			t.Fatalf("read after the restore: %v, want A's restore marker", err)
		}
		if b.Stats().Polls != polls {
			t.Fatalf("B read the counter after the restore")
		}
		if _, err := b.Stop(context.Background(), true); !errors.Is(err, coordinator.ErrRestored) {
			t.Fatalf("B's stop: %v, want its hand-back refused by the marker", err)
		}
		if _, err := cop.ReadCounter(context.Background(), spec); !errors.As(err, &re) {
			t.Fatalf("read after B's stop: %v, want the restore marker", err)
		}
		// The operator bumps by what the marker asks for.
		by := coordinator.CounterMinBump(spec, segment.Counter{Next: uint64(re.Evidence.Shown)}, &re.Evidence)
		if res, err := cop.BumpCounter(context.Background(), spec, by); err != nil || res.Cleared == nil {
			t.Fatalf("bump by %d: %+v %v", by, res, err)
		}
		d := newSource(t, cd, func(cfg *source.Config) { shared(cfg); cfg.Node.Name, cfg.Mark = "d", cd.MarkRestored })
		for _, r := range take(t, d, 2000) {
			for _, q := range issuedB {
				if r.First <= q.Last && q.First <= r.Last {
					t.Errorf("D handed out %v after the bump by %d (marker: node %q saw next %d), overlapping %v that B handed out before the restore",
						r, by, re.Evidence.Node.Name, re.Evidence.Acked, q)
				}
			}
		}
	})
}
