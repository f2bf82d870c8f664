package generator

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// The liveness rules (docs/design.md, Liveness rules): no wait outlives the clock reading it
// was sized from, a wait longer than the caller's deadline is refused at
// once, and a forward step beyond MaxForwardStep is never stamped on an ID
// until confirmed.

type batchResult struct {
	n   int
	ids []uint64
	err error
}

func batchAsync(g *Generator, ctx context.Context, n int) <-chan batchResult {
	done := make(chan batchResult, 1)
	go func() {
		dst := make([]uint64, n)
		k, err := g.NextBatch(ctx, dst)
		done <- batchResult{k, dst[:k], err}
	}()
	return done
}

// A forward step held back by the reservation (the reservation never
// reaches the stepped time), then corrected: the waiting call re-reads the
// clock and returns IDs of the real time. Before, it waited for a
// reservation an hour ahead.
func TestReservationWaitEndsWhenTheClockComesBack(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Reserved = 0 })
	now := r.now()
	r.g.SetReserved(now + 5)
	r.clock.Step(time.Hour)
	done := batchAsync(r.g, context.Background(), 4)
	select {
	case x := <-done:
		t.Fatalf("returned during the step: %v %v", x.ids, x.err)
	case <-time.After(100 * time.Millisecond):
	}
	r.clock.Step(-time.Hour)
	select {
	case x := <-done:
		if x.err != nil || x.n == 0 {
			t.Fatalf("after the correction: %d IDs, %v", x.n, x.err)
		}
		p, _ := tiny.Decode(x.ids[0])
		if got := tiny.Units(p.Time); got < now || got > now+5 {
			t.Fatalf("ID stamped %d; want the real time %d..%d", got, now, now+5)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the call still waits 2 s after the clock came back (a wait sized from a corrected clock)")
	}
}

// Wake ends a wait at once (virtual time: the wait's own slice never
// passes).
func TestWakeEndsWaitsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, func(c *Config) { c.Reserved = 0 })
		now := r.now()
		r.g.SetReserved(now + 5)
		r.clock.Step(time.Hour)
		done := batchAsync(r.g, context.Background(), 4)
		synctest.Wait()
		select {
		case x := <-done:
			t.Fatalf("returned during the step: %v", x.err)
		default:
		}
		r.clock.Step(-time.Hour)
		r.g.Wake()
		synctest.Wait()
		select {
		case x := <-done:
			if x.err != nil || x.n == 0 {
				t.Fatalf("after Wake: %d IDs, %v", x.n, x.err)
			}
		default:
			t.Fatal("Wake did not end the wait")
		}
	})
}

// A backward step beyond MaxLead caught by the first call of a generator
// (no call since New) fails closed at once: the baseline is taken at New.
// Before, the call slept for the step's size on a timer no correction woke.
func TestBackwardStepBeforeFirstCallFailsAtOnce(t *testing.T) {
	r := newRig(t, nil)
	r.g.SetReserved(NoReservation)
	// The floor puts L ahead: a restarted holder above its own last
	// reservation.
	r2 := newRig(t, func(c *Config) { c.Floor = r.now() + 2 })
	r2.clock.Step(-time.Hour)
	done := batchAsync(r2.g, context.Background(), 1)
	select {
	case x := <-done:
		var rb *RollbackError
		if !errors.As(x.err, &rb) {
			t.Fatalf("got %d IDs, %v; want a RollbackError", x.n, x.err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a call after a 1 h step back waits instead of failing closed")
	}
}

// A clock wait longer than the caller's deadline is refused at once, as
// ErrAhead (the server maps it to OVERLOADED naming max-lead, RetryInfo
// the wait), not waited
// out until the deadline.
// In virtual time (testing/synctest): "at once" is no time at all.
func TestClockWaitBeyondDeadlineRefusedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil)
		r.borrowToLimit()
		r.clock.Step(-tinyLead / 2) // absorbed: the next unit is tinyLead/2 away
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := r.g.Next(ctx)
		var ae *AheadError
		if !errors.As(err, &ae) {
			t.Fatalf("got %v; want ErrAhead", err)
		}
		if ae.Wait <= 5*time.Millisecond || ae.Wait > tinyLead/2 {
			t.Fatalf("%v: Wait %v, want the wait for the clock, in (5ms, %v]", err, ae.Wait, tinyLead/2)
		}
		if el := time.Since(start); el != 0 {
			t.Fatalf("refused after %v of virtual time; want at once (the deadline was 5ms, the wait %v)", el, tinyLead/2)
		}
	})
}

// MaxForwardStep: a forward step beyond it is refused (no ID carries the
// stepped time) until ConfirmClock; a correction back serves the real time
// without confirmation; a step forward that only undoes an absorbed step
// back is no step.
func TestForwardStepGate(t *testing.T) {
	const limit = 50 * time.Millisecond
	r := newRig(t, func(c *Config) { c.MaxForwardStep = limit })
	before := r.mustNext()

	r.clock.Step(time.Hour)
	for range 3 {
		_, err := r.try()
		var fs *ForwardStepError
		if !errors.As(err, &fs) || fs.Step < time.Hour-time.Millisecond || fs.Limit != limit {
			t.Fatalf("after +1h: %v; want a ForwardStepError of 1h", err)
		}
		if !errors.Is(err, ErrForwardStep) {
			t.Fatalf("%v does not match ErrForwardStep", err)
		}
	}
	r.clock.Step(-time.Hour)
	r.clock.Advance(time.Millisecond)
	if p := r.mustNext(); p.Time.Sub(before.Time) > time.Second {
		t.Fatalf("after the correction the ID is stamped %v, %v after the one before the step", p.Time, p.Time.Sub(before.Time))
	}

	r.clock.Step(time.Hour)
	if _, err := r.try(); !errors.Is(err, ErrForwardStep) {
		t.Fatalf("second step: %v", err)
	}
	r.g.ConfirmClock()
	if p := r.mustNext(); p.Time.Sub(before.Time) < time.Hour-time.Second {
		t.Fatalf("after ConfirmClock the ID is stamped %v; want the stepped clock", p.Time)
	}

	// Back 100ms (absorbed within the 200ms lead), then forward 100ms: the
	// clock returns to an offset already adopted.
	r.clock.Step(-100 * time.Millisecond)
	r.clock.Advance(150 * time.Millisecond)
	r.mustNext()
	r.clock.Step(100 * time.Millisecond)
	r.mustNext()
}

// Reserved -1: nothing is issued before the first reservation, even at
// time 0 (a layout whose epoch lies within the current unit).
func TestNothingBeforeTheFirstReservation(t *testing.T) {
	l := Layout{Epoch: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Unit: time.Hour,
		TimeBits: 32, WorkerBits: 4, SequenceBits: 6}
	c := &manualClock{wall: l.Epoch.Add(time.Minute)}
	g, err := New(Config{Layout: l, Worker: 1, Clock: c, Floor: -1, Reserved: -1, MaxLead: 2 * time.Hour})
	if err != nil {
		t.Fatalf("New with Reserved -1: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if id, err := g.Next(ctx); !errors.Is(err, ErrReservation) {
		t.Fatalf("before any reservation: id %d, %v; want ErrReservation", id, err)
	}
	g.SetReserved(0)
	id, err := g.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := l.Decode(id); l.Units(p.Time) != 0 {
		t.Fatalf("time %v", p.Time)
	}
}

// Hold ends every wait at once with ErrHeld (the node holds a generator
// whose state stopped serving), and refuses new calls that would wait or
// batch, until released.
func TestHoldEndsWaits(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Reserved = 0 })
	r.g.SetReserved(r.now() + 5)
	r.clock.Step(time.Hour) // needs a reservation that will not come
	done := batchAsync(r.g, context.Background(), 4)
	awaitWaits(t, r.g, 1) // the batch waits (else Hold would only refuse it)
	r.g.Hold(true)
	select {
	case x := <-done:
		if !errors.Is(x.err, ErrHeld) {
			t.Fatalf("got %v; want ErrHeld", x.err)
		}
	case <-time.After(time.Second):
		t.Fatal("Hold did not end the wait")
	}
	r.clock.Step(-time.Hour)
	if _, err := r.g.NextBatch(context.Background(), make([]uint64, 4)); !errors.Is(err, ErrHeld) {
		t.Fatalf("while held: %v", err)
	}
	r.g.Hold(false)
	if n, err := r.g.NextBatch(context.Background(), make([]uint64, 4)); err != nil || n == 0 {
		t.Fatalf("after release: %d, %v", n, err)
	}
}

// awaitWaits returns once g has counted n waits on its reservation: a call
// started in a goroutine is then inside its wait.
func awaitWaits(t *testing.T, g *Generator, n uint64) {
	t.Helper()
	for start := time.Now(); g.ReservationWaits() < n; time.Sleep(time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%d reservation waits after 5 s, want %d", g.ReservationWaits(), n)
		}
	}
}
