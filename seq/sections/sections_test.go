package sections

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/internal/seqcheck"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/seq"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// start runs a manager of generator "chats" (sections S) on a client of
// store st.
func start(t testing.TB, st *memory.Store, name string, sections int, settle time.Duration, budget int, opts ...func(*Config)) (*Manager, *memory.Client) {
	t.Helper()
	clock := clockguard.NewSystem()
	c := st.Connect(clock)
	cfg := Config{
		Generator: "chats", Def: seq.Definition{Sections: sections}, Coord: c, Workers: c.Workers, Counters: c,
		Node:  coordinator.NodeInfo{Name: name, InstanceID: "inst-" + name, Address: name + ":7300"},
		Clock: clock, Timeout: 500 * time.Millisecond, PollEvery: 50 * time.Millisecond, Settle: settle,
		Budget: budget, Mark: c.MarkRestored, Log: quiet,
	}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Stop(ctx, true)
		c.Close()
	})
	return m, c
}

// waitServing waits until m answers for every section it owns and owns
// want of them.
func waitServing(t testing.TB, m *Manager, want int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st := m.Stats(); st.Serving == want && st.Owned == want {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("after 10 s: %+v, want %d sections serving", m.Stats(), want)
		}
	}
}

// TestNextAndCurrent: one node owns every section; a key's values follow
// each other from 1; Current reads without advancing; a second key has
// its own sequence; the write ahead keeps the persisted maxima above
// every value.
func TestNextAndCurrent(t *testing.T) {
	st := memory.New(memory.Config{TTL: 2 * time.Second})
	m, _ := start(t, st, "a", 8, 0, 0)
	waitServing(t, m, 8)
	ctx := context.Background()
	for want := uint64(1); want < 3000; want += 3 {
		first, err := m.Next(ctx, []byte("conv-1"), 3)
		if err != nil || first != want {
			t.Fatalf("Next(conv-1, 3) = %d, %v; want %d", first, err, want)
		}
	}
	if cur, err := m.Current(ctx, []byte("conv-1")); err != nil || cur != 3000 {
		t.Fatalf("Current(conv-1) = %d, %v; want 3000", cur, err)
	}
	if first, err := m.Next(ctx, []byte("conv-2"), 1); err != nil || first != 1 {
		t.Fatalf("Next(conv-2) = %d, %v; want 1", first, err)
	}
	if cur, err := m.Current(ctx, []byte("never")); err != nil || cur != 0 {
		t.Fatalf("Current(never) = %d, %v; want 0", cur, err)
	}
	if s := m.Stats(); s.Raises < 2 || s.Keys != 2 || s.Issued != 3001 {
		t.Fatalf("stats %+v: want at least one raise beyond the take, 2 keys, 3001 issued", s)
	}
}

// TestMovesKeepOrder: keys hammered on the first node while a second and
// a third join and take their sections from it: every key's values never
// repeat and increase in real time (the checker), across the moves. The
// weakened build firn_weakseq (a new owner starting one step below the
// persisted maximum) fails it.
func TestMovesKeepOrder(t *testing.T) {
	st := memory.New(memory.Config{TTL: 2 * time.Second})
	var mu sync.Mutex
	// A short write ahead (rate × 20 ms, at least 100): the persisted
	// maximum a take replaces lies barely above the section's highest
	// values, so a new owner that starts below it (firn_weakseq: at half)
	// repeats the values of the section's busiest keys however fast this
	// machine runs them. With the default 2 s the test's second of load
	// left the step above every value on a loaded machine, half of the
	// maximum above them all, and the weakened build passed.
	short := func(c *Config) { c.Interval, c.MinStep = 20*time.Millisecond, 100 }
	a, _ := start(t, st, "a", 8, 150*time.Millisecond, 0, short)
	ms := []*Manager{a}
	nodes := func() []*Manager {
		mu.Lock()
		defer mu.Unlock()
		return ms
	}
	waitServing(t, a, 8)
	var rec seqcheck.Recorder
	t0 := time.Now()
	stop := make(chan struct{})
	done := make(chan error, 4)
	for c := range 4 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				key := fmt.Sprintf("k%d", rng.IntN(50))
				n := uint64(1 + rng.IntN(3))
				for _, m := range nodes() {
					s := time.Since(t0)
					first, err := m.Next(context.Background(), []byte(key), n)
					if err == nil {
						rec.Add(seqcheck.Call{Key: key, First: first, Count: n, Start: s, End: time.Since(t0)})
						break
					}
					var wn *WrongNodeError
					var mv *MovingError
					if !errors.As(err, &wn) && !errors.As(err, &mv) {
						done <- err
						return
					}
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	for _, name := range []string{"b", "c"} {
		m, _ := start(t, st, name, 8, 150*time.Millisecond, 0, short)
		mu.Lock()
		ms = append(slices.Clone(ms), m)
		mu.Unlock()
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if v := seqcheck.Check(rec.Calls(), 10); len(v) > 0 {
		t.Fatalf("%d calls: %v", rec.Len(), v)
	}
	if a.Stats().Releases == 0 {
		t.Fatalf("no section moved from a: %+v", a.Stats())
	}
	t.Logf("%d calls through the moves; a: %+v", rec.Len(), a.Stats())
}

// TestUnassuredRefuses: an owner whose lease renewals go unanswered (its
// client frozen, as SIGSTOP would) refuses once its lease is no longer
// assured for more than the margin, before the store could let another
// node take its sections.
func TestUnassuredRefuses(t *testing.T) {
	st := memory.New(memory.Config{TTL: 2 * time.Second})
	m, c := start(t, st, "a", 4, 0, 0)
	waitServing(t, m, 4)
	if _, err := m.Next(context.Background(), []byte("k"), 1); err != nil {
		t.Fatal(err)
	}
	c.Freeze()
	defer c.Thaw()
	frozen := time.Now()
	var mv *MovingError
	for {
		_, err := m.Next(context.Background(), []byte("k"), 1)
		if errors.As(err, &mv) {
			break
		}
		if err != nil {
			t.Fatalf("Next while frozen: %v", err)
		}
		if time.Since(frozen) > 2*time.Second-DefaultMargin {
			t.Fatalf("still answering %v after the renewals stopped (TTL 2 s, margin %v)", time.Since(frozen), DefaultMargin)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("refused %v after the freeze: %v", time.Since(frozen).Round(time.Millisecond), mv)
}

// TestNodeJoiningSaysItsSectionsMove: b joined while a, which holds
// every section, cannot give any up yet (frozen, its lease still
// running). For a section that moves to b, b answers SECTION_MOVING,
// naming a: named back to a, which names b once it gave the section up,
// a call would go between the two until b reads the owners again (a
// round can take seconds on a loaded machine) and fail with nothing but
// redirects. For a section that stays with a, b names a (WRONG_NODE).
func TestNodeJoiningSaysItsSectionsMove(t *testing.T) {
	st := memory.New(memory.Config{TTL: 2 * time.Second})
	a, ca := start(t, st, "a", 4, 0, 0)
	waitServing(t, a, 4)
	ca.Freeze()
	frozen := time.Now()
	defer ca.Thaw()
	b, _ := start(t, st, "b", 4, 0, 0)
	for end := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		read := true
		for _, o := range b.Owners() {
			read = read && o.Node.Name == "a"
		}
		if read && b.Stats().Members == 2 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("b has not read a as every section's owner after 1 s: %+v", b.Owners())
		}
	}
	assigned := seq.Assign(4, []string{"inst-a", "inst-b"})
	moving := 0
	for s := range 4 {
		_, err := b.Next(context.Background(), keyOf(b, s), 1)
		var mv *MovingError
		var wn *WrongNodeError
		switch {
		case assigned[s] == "inst-b":
			moving++
			if !errors.As(err, &mv) || !strings.Contains(mv.Why, `node "a"`) {
				t.Errorf("section %d, moving to b: b answered %v; want SECTION_MOVING naming a", s, err)
			}
		case !errors.As(err, &wn) || wn.Owner.Name != "a":
			t.Errorf("section %d, a's: b answered %v; want WRONG_NODE naming a", s, err)
		}
	}
	if moving == 0 || moving == 4 {
		t.Fatalf("b is assigned %d sections of 4: the test needs both kinds", moving)
	}
	if since := time.Since(frozen); since > 2*time.Second-DefaultMargin {
		t.Fatalf("checked %v after a froze: its lease may have ended, and b's map with it", since)
	}
}

// TestBudgetForgets: past its budget a node forgets keys, and a
// forgotten key starts again above everything its section handed out.
func TestBudgetForgets(t *testing.T) {
	st := memory.New(memory.Config{TTL: 2 * time.Second})
	m, _ := start(t, st, "a", 1, 0, 10)
	waitServing(t, m, 1)
	ctx := context.Background()
	var rec seqcheck.Recorder
	t0 := time.Now()
	for i := range 200 {
		key := fmt.Sprintf("k%d", i%37)
		s := time.Since(t0)
		first, err := m.Next(ctx, []byte(key), 2)
		if err != nil {
			t.Fatal(err)
		}
		rec.Add(seqcheck.Call{Key: key, First: first, Count: 2, Start: s, End: time.Since(t0)})
	}
	if v := seqcheck.Check(rec.Calls(), 5); len(v) > 0 {
		t.Fatal(v)
	}
	if s := m.Stats(); s.Keys > 10 || s.Evicted == 0 {
		t.Fatalf("stats %+v: want at most 10 keys in memory and some forgotten", s)
	}
}

// BenchmarkNextManyKeys measures memory per key and Next's latency with
// many keys in memory: FIRN_SEQ_KEYS (default 10^6) keys first, each
// handed a value, then Next on random ones of them (docs/performance.md).
func BenchmarkNextManyKeys(b *testing.B) {
	n := 1_000_000
	if v, err := fmt.Sscan(getenv("FIRN_SEQ_KEYS"), &n); v != 1 || err != nil {
		n = 1_000_000
	}
	st := memory.New(memory.Config{TTL: 5 * time.Second})
	m, _ := start(b, st, "a", 64, 0, n+1)
	waitServing(b, m, 64)
	ctx := context.Background()
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "conversation-%d", i)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, k := range keys {
		if _, err := m.Next(ctx, k, 1); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
	rng := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for range b.N {
		if _, err := m.Next(ctx, keys[rng.IntN(n)], 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(perKey, "B/key") // after ResetTimer, which drops reported metrics
	b.ReportMetric(float64(m.Stats().Keys), "keys")
}

func getenv(k string) string { return os.Getenv(k) }

// TestRaisePendingBeforeDeadline: a call that needs its section's maximum
// raised, while the coordinator does not answer, is refused shortly before
// its deadline with ErrRaisePending (COORDINATOR_UNAVAILABLE to the
// caller), not left to time out without a reason.
func TestRaisePendingBeforeDeadline(t *testing.T) {
	st := memory.New(memory.Config{TTL: 5 * time.Second})
	m, c := start(t, st, "a", 1, 0, 0)
	waitServing(t, m, 1)
	ctx := context.Background()
	// Up to the acknowledged maximum, with the coordinator stopped: the
	// raise this starts hangs.
	c.Freeze()
	defer c.Thaw()
	m.mu.Lock()
	sec := m.sec[0].Load()
	m.mu.Unlock()
	sec.mu.Lock()
	acked := sec.acked
	sec.mu.Unlock()
	for left := acked; left > 0; {
		n := min(left, seq.MaxCount)
		if _, err := m.Next(ctx, []byte("k"), n); err != nil {
			t.Fatalf("Next below the acknowledged maximum %d: %v", acked, err)
		}
		left -= n
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := m.Next(cctx, []byte("k"), 1)
	took := time.Since(began)
	var re *RaiseError
	if !errors.As(err, &re) || !errors.Is(err, ErrRaisePending) || cctx.Err() != nil {
		t.Fatalf("Next past the maximum, coordinator stopped: %v after %v (context: %v); want ErrRaisePending before the deadline", err, took, cctx.Err())
	}
	t.Logf("refused after %v: %v", took.Round(time.Millisecond), err)
}

// TestRecordedMarkNeverFallsBack: a take (the round loop) and the raises
// (raiseLoop) record their writes' marks from two goroutines, and the
// data dir keeps the last call. Here the take is held back after its
// write, before its Record or inside it, while the raises that follow
// its write hand out values, then let go. The data dir must end at the
// highest write recorded: after a crash and a coordinator restored to a
// snapshot holding the take's write but not the raises, a restart from
// the data dir's mark must find the restore, not start the section at
// the snapshot's maximum, below values handed out before the crash.
// Without the order (the take's lower mark recorded last) the restarted
// node repeats them.
func TestRecordedMarkNeverFallsBack(t *testing.T) {
	// before: the take held after its write is acknowledged, before it
	// records it (the raises record theirs first); in: held inside its
	// Record (the raises wait for it, or record theirs meanwhile).
	for _, where := range []string{"before", "in"} {
		t.Run(where, func(t *testing.T) { testRecordOrder(t, where) })
	}
}

func testRecordOrder(t *testing.T, where string) {
	st := memory.New(memory.Config{TTL: 2 * time.Second})
	var (
		mu      sync.Mutex
		disk    segment.Mark // the data dir: the last Record call wins (datadir.Gen.RecordCounter)
		highest segment.Mark
		takeSeq uint64
		armed   atomic.Bool
		held    = make(chan struct{})
		letGo   = make(chan struct{})
		snap    *memory.Snapshot
		mgr     atomic.Pointer[Manager]
	)
	// hold holds the take's goroutine back once, the coordinator's state
	// kept as it stands then: the take's write and nothing after it.
	hold := func() {
		if armed.Load() && calledFrom("sections.(*Manager).take(") {
			armed.Store(false)
			snap = st.Snapshot()
			m := mgr.Load()
			rec, err := m.cfg.Counters.ReadCounter(context.Background(), m.cspec)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			takeSeq = rec.State.Mark().Seq
			mu.Unlock()
			close(held)
			<-letGo
		}
	}
	hook := func(c *Config) {
		c.MinStep = 10
		c.Record = func(mk segment.Mark) error {
			if where == "in" {
				hold()
			}
			mu.Lock()
			disk = mk
			if mk.Seq > highest.Seq {
				highest = mk
			}
			mu.Unlock()
			return nil
		}
		c.Observe = func(op string, _ time.Duration, err error) {
			if where == "before" && op == "raise" && err == nil {
				hold()
			}
		}
	}
	a, ca := start(t, st, "a", 2, 0, 0, hook)
	mgr.Store(a)
	b, _ := start(t, st, "b", 2, 0, 0)
	waitServing(t, a, 1)
	waitServing(t, b, 1)
	mine := -1
	for s := range 2 {
		if a.sec[s].Load() != nil {
			mine = s
		}
	}
	key := keyOf(a, mine)
	ctx := context.Background()
	armed.Store(true)
	b.Stop(ctx, true) // a takes b's section
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatalf("a did not take b's section: %+v", a.Stats())
	}
	// Values of a's own section, through raises (a step of 10): they run
	// while the take is held back, or wait for its Record.
	handed := make(chan uint64, 1)
	go func() {
		var last uint64
		for range 100 {
			first, err := a.Next(ctx, key, 5)
			if err != nil {
				t.Error(err)
				break
			}
			last = first + 4
		}
		handed <- last
	}()
	var last uint64
	select {
	case last = <-handed:
	case <-time.After(time.Second):
	}
	close(letGo)
	if last == 0 {
		select {
		case last = <-handed:
		case <-time.After(10 * time.Second):
			t.Fatal("the calls did not finish once the take was let go")
		}
	}
	waitServing(t, a, 2)
	mu.Lock()
	d, h, ts := disk, highest, takeSeq
	mu.Unlock()
	t.Logf("take wrote seq %d; raises recorded up to seq %d; the data dir holds seq %d; key %q handed out up to %d", ts, h.Seq, d.Seq, key, last)
	if h.Seq <= ts {
		t.Fatalf("no raise after the take's write (highest recorded seq %d): the test did not reach the race", h.Seq)
	}
	if d.Seq < h.Seq {
		t.Errorf("the data dir holds seq %d, below seq %d recorded before it: a take's late Record overwrote a later raise's", d.Seq, h.Seq)
	}

	// Crash, restore to the snapshot, restart from the data dir's mark.
	a.Stop(ctx, false)
	ca.Kill()
	st.Restore(snap)
	notes := make(chan error, 100)
	a2, _ := start(t, st, "a2", 2, 150*time.Millisecond, 0, func(c *Config) {
		c.Known = d
		c.Notify = func(err error) {
			select {
			case notes <- err:
			default:
			}
		}
	})
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if first, err := a2.Next(ctx, key, 1); err == nil {
			if first <= last {
				t.Fatalf("restarted node (the data dir's mark, seq %d) hands out %d for %q: already handed out (up to %d) before the crash", d.Seq, first, key, last)
			}
			t.Fatalf("restarted node hands out %d on the snapshot's record, which lacks its data dir's write", first)
		}
		select {
		case err := <-notes:
			if errors.Is(err, coordinator.ErrRolledBack) || errors.Is(err, coordinator.ErrRestored) {
				t.Logf("restarted node found the restore: %v", err)
				// Whichever path found it, the node's reason is the
				// marker's: the restore, and the bump that clears it
				// (before, a rolled-back counter gave its own wording,
				// naming no bump, and /readyz flipped between the two).
				if !errors.Is(err, coordinator.ErrRestored) || !strings.Contains(err.Error(), "firn coordinator bump") {
					t.Fatalf("the restore notified as %q: want the restore marker's reason, naming the bump", err)
				}
				return
			}
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("restarted node neither serves nor finds the restore after 10 s: %+v", a2.Stats())
		}
	}
}

// calledFrom reports whether fn (package-qualified, with its opening
// parenthesis) is on the calling goroutine's stack.
func calledFrom(fn string) bool { return strings.Contains(string(debug.Stack()), fn) }

// keyOf is a key of section s of m's generator.
func keyOf(m *Manager, s int) []byte {
	for i := 0; ; i++ {
		if k := fmt.Appendf(nil, "k%d", i); m.cfg.Def.Section(seq.Hash(k)) == s {
			return k
		}
	}
}

// notes makes a Config's Notify send what it is told on the channel
// returned (nil: serving), dropping what the channel has no room for.
func notes(c *Config) <-chan error {
	ch := make(chan error, 100)
	c.Notify = func(err error) {
		select {
		case ch <- err:
		default:
		}
	}
	return ch
}

// waitNote waits up to 5 s for a notification that ok accepts.
func waitNote(t *testing.T, ch <-chan error, what string, ok func(error) bool) error {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-ch:
			if ok(err) {
				return err
			}
		case <-timeout:
			t.Fatalf("no notification within 5 s: %s", what)
		}
	}
}

// TestTakeFailureNamed: a node whose takes fail (here its data dir
// refuses the take's mark) does not serve, and says why at once: its
// serving state is told the failure (COORDINATOR_UNAVAILABLE at the node,
// not a bare STARTING), and a call for a section it should own is
// refused naming it. Once its takes land it serves.
func TestTakeFailureNamed(t *testing.T) {
	st := memory.New(memory.Config{TTL: 2 * time.Second})
	var failing atomic.Bool
	failing.Store(true)
	const why = "data dir: no space left on device"
	var ch <-chan error
	m, _ := start(t, st, "a", 4, 0, 0, func(c *Config) {
		ch = notes(c)
		c.Record = func(segment.Mark) error {
			if failing.Load() {
				return errors.New(why)
			}
			return nil
		}
	})
	err := waitNote(t, ch, "the take's failure", func(err error) bool {
		var se *StartingError
		return errors.As(err, &se) && se.Err != nil && strings.Contains(err.Error(), why)
	})
	t.Logf("told: %v", err)
	_, err = m.Next(context.Background(), []byte("k"), 1)
	var mv *MovingError
	if !errors.As(err, &mv) || !strings.Contains(err.Error(), why) {
		t.Fatalf("Next while the takes fail: %v; want SECTION_MOVING naming the take's failure", err)
	}
	if s := m.Stats(); s.Owned != 0 {
		t.Fatalf("stats %+v: sections kept whose first write was not recorded", s)
	}
	failing.Store(false)
	waitServing(t, m, 4)
	waitNote(t, ch, "serving", func(err error) bool { return err == nil })
}

// TestRestartWaitNamed: a process restarted after a crash waits for its
// predecessor's leases to end (no take-back on a shared coordinator) and
// says so meanwhile (STARTING, naming the wait), then serves.
func TestRestartWaitNamed(t *testing.T) {
	st := memory.New(memory.Config{TTL: 2 * time.Second})
	began := time.Now()
	a, ca := start(t, st, "a", 2, 0, 0, func(c *Config) { c.Node.StartTime = began })
	waitServing(t, a, 2)
	a.Stop(context.Background(), false)
	ca.Kill()
	var ch <-chan error
	a2, _ := start(t, st, "a", 2, 0, 0, func(c *Config) {
		c.Node.StartTime = began.Add(time.Second)
		ch = notes(c)
	})
	err := waitNote(t, ch, "the wait for the old leases", func(err error) bool {
		var se *StartingError
		return errors.As(err, &se) && se.Held && se.Err == nil
	})
	t.Logf("told: %v", err)
	waitServing(t, a2, 2)
	waitNote(t, ch, "serving", func(err error) bool { return err == nil })
}
