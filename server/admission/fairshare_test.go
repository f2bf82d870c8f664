package admission

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// takeTurn waits for f's turn in the background; the turn's size arrives
// on the returned channel (or -1 with the error).
func takeTurn(ctx context.Context, fs *FairShare, f *Flow, want int) <-chan int {
	ch := make(chan int, 1)
	go func() {
		g, err := fs.Acquire(ctx, f, want)
		if err != nil {
			g = -1
		}
		ch <- g
	}()
	return ch
}

// waiting blocks until n callers wait for a turn.
func waiting(t *testing.T, fs *FairShare, n int) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		fs.mu.Lock()
		w := 0
		for _, f := range fs.flows {
			w += len(f.waiters)
		}
		fs.mu.Unlock()
		if w == n {
			return
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%d callers wait for a turn, want %d", w, n)
		}
	}
}

func admitT(t *testing.T, fs *FairShare, key string, n int) *Flow {
	t.Helper()
	f, err := fs.Admit(context.Background(), key, n, 1e6)
	if err != nil {
		t.Fatalf("admit %s %d: %v", key, n, err)
	}
	return f
}

func gotTurn(t *testing.T, what string, ch <-chan int, want int) {
	t.Helper()
	select {
	case g := <-ch:
		if g != want {
			t.Fatalf("%s: turn of %d, want %d", what, g, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no turn", what)
	}
}

func noTurn(t *testing.T, what string, ch <-chan int) {
	t.Helper()
	select {
	case g := <-ch:
		t.Fatalf("%s: got a turn of %d before its time", what, g)
	case <-time.After(20 * time.Millisecond):
	}
}

// A caller asking for one ID while a large batch is being produced gets the
// next turn: the batch is cut into turns of at most a quantum, and a flow
// that was idle goes before the busy ones.
func TestFairShareSingleIDGoesNext(t *testing.T) {
	fs := NewFairShare(4e6, 4096, 1<<20) // snowflake: quantum 1000
	if fs.Turn() != 1000 {
		t.Fatalf("quantum %d, want 1000 (250 µs at 4 M IDs/s)", fs.Turn())
	}
	big1, big2 := admitT(t, fs, "big1", 100_000), admitT(t, fs, "big2", 100_000)
	g, err := fs.Acquire(context.Background(), big1, 100_000)
	if err != nil || g != 1000 {
		t.Fatalf("first turn %d, %v; want 1000", g, err)
	}
	// big2 and big1's next turn wait; then the single ID arrives.
	t2 := takeTurn(context.Background(), fs, big2, 100_000)
	waiting(t, fs, 1)
	t1 := takeTurn(context.Background(), fs, big1, 99_000)
	waiting(t, fs, 2)
	small := admitT(t, fs, "small", 1)
	ts := takeTurn(context.Background(), fs, small, 1)
	waiting(t, fs, 3)

	// big2 arrived idle too (fresh, ahead of the single ID), then the
	// single ID, then big1 (old: it had a turn).
	fs.Release()
	gotTurn(t, "big2", t2, 1000)
	noTurn(t, "single ID", ts)
	fs.Release()
	gotTurn(t, "single ID", ts, 1)
	noTurn(t, "big1", t1)
	fs.Release()
	gotTurn(t, "big1", t1, 1000)
	fs.Release()
	fs.Leave(small, 1)
	fs.Leave(big1, 100_000)
	fs.Leave(big2, 100_000)
	if fs.busy || len(fs.flows) != 0 || fs.queued.Load() != 0 {
		t.Fatalf("after every turn: busy %v, %d flows, %d queued; want none", fs.busy, len(fs.flows), fs.queued.Load())
	}
}

// Busy flows share round-robin: each waiting Flow gets one turn before any
// gets a second.
func TestFairShareRoundRobin(t *testing.T) {
	fs := NewFairShare(4e6, 4096, 1<<20)
	a, b, c := admitT(t, fs, "a", 5000), admitT(t, fs, "b", 5000), admitT(t, fs, "c", 5000)
	if _, err := fs.Acquire(context.Background(), a, 5000); err != nil {
		t.Fatal(err)
	}
	tb := takeTurn(context.Background(), fs, b, 5000)
	waiting(t, fs, 1)
	tc := takeTurn(context.Background(), fs, c, 5000)
	waiting(t, fs, 2)
	ta := takeTurn(context.Background(), fs, a, 4000)
	waiting(t, fs, 3)
	order := []struct {
		name string
		ch   <-chan int
	}{{"b", tb}, {"c", tc}, {"a", ta}}
	for _, o := range order {
		fs.Release()
		gotTurn(t, o.name, o.ch, 1000)
	}
	// b comes back before a has its third turn.
	tb = takeTurn(context.Background(), fs, b, 4000)
	waiting(t, fs, 1)
	ta = takeTurn(context.Background(), fs, a, 3000)
	waiting(t, fs, 2)
	fs.Release()
	gotTurn(t, "b again", tb, 1000)
	fs.Release()
	gotTurn(t, "a again", ta, 1000)
	fs.Release()
	if fs.busy {
		t.Fatal("a turn is out after the last release")
	}
}

// A waiter whose deadline passes leaves without its turn; one granted as it
// gave up passes the turn on; interrupt ends every wait.
func TestFairShareCancelAndInterrupt(t *testing.T) {
	fs := NewFairShare(4e6, 4096, 1<<20)
	a, b, c := admitT(t, fs, "a", 1), admitT(t, fs, "b", 1), admitT(t, fs, "c", 1)
	if _, err := fs.Acquire(context.Background(), a, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb := takeTurn(ctx, fs, b, 1)
	waiting(t, fs, 1)
	tc := takeTurn(context.Background(), fs, c, 1)
	waiting(t, fs, 2)
	cancel()
	gotTurn(t, "cancelled b", tb, -1)
	fs.Release()
	gotTurn(t, "c after b gave up", tc, 1)

	errs := make(chan error, 1)
	go func() { _, err := fs.Acquire(context.Background(), b, 1); errs <- err }()
	waiting(t, fs, 1)
	fs.Interrupt()
	select {
	case err := <-errs:
		if !errors.Is(err, ErrInterrupted) {
			t.Fatalf("interrupted wait: %v, want ErrInterrupted", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("interrupt did not end the wait")
	}
	fs.Release()
	if fs.busy {
		t.Fatal("a turn is out after the last release")
	}
}

// Admission: past the bound a request is refused at once, unless it is a
// single turn's worth from a flow with nothing queued; a deadline that
// falls before the IDs ahead are produced is refused too.
func TestFairShareAdmission(t *testing.T) {
	fs := NewFairShare(4e6, 4096, 10_000)
	admitT(t, fs, "big", 10_000)
	_, err := fs.Admit(context.Background(), "big2", 1001, 4e6)
	var oe *OverloadedError
	if !errors.As(err, &oe) || oe.Deadline || oe.Queued != 10_000 || oe.Limit != 10_000 || oe.RetryAfter != 2500*time.Microsecond {
		t.Fatalf("past the bound: %v (%+v), want queue_full with 10000 ahead, retry in 2.5ms", err, oe)
	}
	small := admitT(t, fs, "small", 1000)
	if _, err := fs.Admit(context.Background(), "small", 1, 4e6); !errors.As(err, &oe) {
		t.Fatalf("a second request of a Flow with IDs queued past the bound: %v, want refused", err)
	}
	fs.Leave(small, 1000)

	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	fs2 := NewFairShare(4e6, 4096, 1<<20)
	admitT(t, fs2, "big", 100_000) // 25 ms ahead
	if _, err := fs2.Admit(ctx, "late", 5000, 4e6); !errors.As(err, &oe) || !oe.Deadline {
		t.Fatalf("deadline before the turn: %v, want refused for the deadline", err)
	}
	if fs.shed[ShedQueueFull].Load() != 2 || fs2.shed[ShedDeadline].Load() != 1 {
		t.Fatalf("shed counts %d, %d; want 2 queue_full, 1 deadline", fs.shed[ShedQueueFull].Load(), fs2.shed[ShedDeadline].Load())
	}
}

// --client-rate: a bucket per client, refilled at the rate up to the burst;
// a request larger than the burst can never pass.
func TestClientLimits(t *testing.T) {
	var now time.Duration
	l := NewClientLimits(1000, 100, func() time.Duration { return now })
	if _, ok := l.Take("a", 100); !ok {
		t.Fatal("a full bucket refused its burst")
	}
	wait, ok := l.Take("a", 10)
	if ok || wait != 10*time.Millisecond {
		t.Fatalf("empty bucket: ok %v, wait %v; want refused, 10ms", ok, wait)
	}
	if _, ok := l.Take("b", 50); !ok {
		t.Fatal("another client's bucket was spent by the first")
	}
	now += 10 * time.Millisecond
	if _, ok := l.Take("a", 10); !ok {
		t.Fatal("10 IDs refused 10 ms after at 1000/s")
	}
	if wait, ok := l.Take("a", 101); ok || wait >= 0 {
		t.Fatalf("beyond the burst: ok %v, wait %v; want never (wait < 0)", ok, wait)
	}
	for i := range maxIdleBuckets {
		l.Take(fmt.Sprint("client", i), 1)
	}
	// An hour later every bucket has refilled: the next new client finds
	// the map full and the refilled ones are forgotten.
	now += time.Hour
	l.Take("late", 1)
	if len(l.buckets) != 1 {
		t.Fatalf("%d buckets kept after the sweep, want 1 (the new client's)", len(l.buckets))
	}
}
