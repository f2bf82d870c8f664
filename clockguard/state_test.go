package clockguard_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
)

type recorder struct {
	mu sync.Mutex
	tr []clockguard.Transition
}

func (r *recorder) add(t clockguard.Transition) {
	r.mu.Lock()
	r.tr = append(r.tr, t)
	r.mu.Unlock()
}

func (r *recorder) take() []clockguard.Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.tr
	r.tr = nil
	return out
}

func newState(t *testing.T) (*clockguard.ServingState, *recorder, *clockguard.Fake) {
	t.Helper()
	clock := clockguard.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	s := clockguard.NewServingState("default", clockguard.WithStateClock(clock))
	rec := &recorder{}
	s.Subscribe(rec.add)
	return s, rec, clock
}

type want struct {
	from, to clockguard.State
	reason   string
	source   clockguard.Source
}

func expect(t *testing.T, step string, rec *recorder, w ...want) {
	t.Helper()
	got := rec.take()
	if len(got) != len(w) {
		t.Fatalf("%s: %d transitions %+v, want %d %+v", step, len(got), got, len(w), w)
	}
	for i := range w {
		g := got[i]
		if g.From != w[i].from || g.To != w[i].to || g.Reason != w[i].reason || g.Source != w[i].source || g.Generator != "default" {
			t.Fatalf("%s: transition %d = %+v, want %+v", step, i, g, w[i])
		}
	}
}

func TestServingStateLifecycle(t *testing.T) {
	s, rec, clock := newState(t)
	const (
		st, ch, sv, ns, dr, sp = clockguard.StateStarting, clockguard.StateChecking, clockguard.StateServing,
			clockguard.StateNotServing, clockguard.StateDraining, clockguard.StateStopped
	)
	steps := []struct {
		name    string
		do      func() error
		serving bool
		state   clockguard.State
		reason  string
		trs     []want
	}{
		{"new", func() error { return nil }, false, st, "starting", nil},
		{"begin checks", s.Check, false, ch, "checking", []want{{st, ch, "checking", ""}}},
		{"checks again: no-op", s.Check, false, ch, "checking", nil},
		{"NTP pending during checks", func() error { s.Set(clockguard.SourceNTP, "NTP not checked yet"); return nil },
			false, ch, "checking: NTP not checked yet", []want{{ch, ch, "checking: NTP not checked yet", "ntp"}}},
		{"ready with a reason held", s.Ready, false, ns, "NTP not checked yet",
			[]want{{ch, ns, "NTP not checked yet", ""}}},
		{"rollback too", func() error { s.Set(clockguard.SourceClockRollback, "clock rolled back 3.2s, limit 1s"); return nil },
			false, ns, "NTP not checked yet; clock rolled back 3.2s, limit 1s",
			[]want{{ns, ns, "NTP not checked yet; clock rolled back 3.2s, limit 1s", "clock-rollback"}}},
		{"same reason again: no-op", func() error { s.Set(clockguard.SourceClockRollback, "clock rolled back 3.2s, limit 1s"); return nil },
			false, ns, "NTP not checked yet; clock rolled back 3.2s, limit 1s", nil},
		{"NTP reason replaced in place", func() error { s.Set(clockguard.SourceNTP, "clock offset +1.5s from NTP, limit 250ms"); return nil },
			false, ns, "clock offset +1.5s from NTP, limit 250ms; clock rolled back 3.2s, limit 1s",
			[]want{{ns, ns, "clock offset +1.5s from NTP, limit 250ms; clock rolled back 3.2s, limit 1s", "ntp"}}},
		{"clear NTP", func() error { s.Clear(clockguard.SourceNTP); return nil },
			false, ns, "clock rolled back 3.2s, limit 1s", []want{{ns, ns, "clock rolled back 3.2s, limit 1s", "ntp"}}},
		{"clear absent source: no-op", func() error { s.Clear(clockguard.SourcePeers); return nil },
			false, ns, "clock rolled back 3.2s, limit 1s", nil},
		{"clear rollback: serving", func() error { s.Clear(clockguard.SourceClockRollback); return nil },
			true, sv, "", []want{{ns, sv, "", "clock-rollback"}}},
		{"ready again: no-op", s.Ready, true, sv, "", nil},
		{"lease lost via Update", func() error { s.Update(clockguard.SourceLease, errors.New("lease lost")); return nil },
			false, ns, "lease lost", []want{{sv, ns, "lease lost", "lease"}}},
		{"lease back via Update(nil)", func() error { s.Update(clockguard.SourceLease, nil); return nil },
			true, sv, "", []want{{ns, sv, "", "lease"}}},
		{"empty reason shows the source", func() error { s.Set(clockguard.SourceManual, ""); return nil },
			false, ns, "manual", []want{{sv, ns, "manual", "manual"}}},
		{"drain", func() error { return s.Drain("shutting down") }, false, dr, "draining: shutting down",
			[]want{{ns, dr, "draining: shutting down", ""}}},
		{"clear while draining does not serve", func() error { s.Clear(clockguard.SourceManual); return nil },
			false, dr, "draining: shutting down", nil},
		{"ready after drain refused", s.Ready, false, dr, "draining: shutting down", nil},
		{"stop", func() error { s.Stop(); return nil }, false, sp, "stopped", []want{{dr, sp, "stopped", ""}}},
		{"stop again: no-op", func() error { s.Stop(); return nil }, false, sp, "stopped", nil},
	}
	for _, step := range steps {
		clock.Advance(time.Second)
		err := step.do()
		if strings.Contains(step.name, "refused") {
			if !errors.Is(err, clockguard.ErrInvalidTransition) {
				t.Fatalf("%s: err = %v, want ErrInvalidTransition", step.name, err)
			}
		} else if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if s.Serving() != step.serving || s.State() != step.state || s.Reason() != step.reason {
			t.Fatalf("%s: serving=%v state=%v reason=%q; want %v %v %q",
				step.name, s.Serving(), s.State(), s.Reason(), step.serving, step.state, step.reason)
		}
		expect(t, step.name, rec, step.trs...)
	}
	for _, f := range []func() error{s.Check, s.Ready, func() error { return s.Drain("x") }} {
		if err := f(); !errors.Is(err, clockguard.ErrInvalidTransition) {
			t.Fatalf("after Stop: err = %v, want ErrInvalidTransition", err)
		}
	}
}

func TestServingStateSnapshot(t *testing.T) {
	s, _, clock := newState(t)
	t0, _ := clock.Now()
	s.Set(clockguard.SourcePeers, "clock 1.4s off the peer median, limit 1s")
	clock.Advance(5 * time.Second)
	s.Set(clockguard.SourceReservation, "reservation not confirmed")
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	sn := s.Snapshot()
	if sn.Generator != "default" || sn.State != clockguard.StateNotServing || len(sn.Causes) != 2 {
		t.Fatalf("snapshot = %+v", sn)
	}
	if sn.Causes[0].Source != clockguard.SourcePeers || !sn.Causes[0].Since.Equal(t0) ||
		sn.Causes[1].Source != clockguard.SourceReservation || !sn.Causes[1].Since.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("causes = %+v", sn.Causes)
	}
	if !sn.Since.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("since = %v", sn.Since)
	}
	sn.Causes[0].Reason = "mutated"
	if r, ok := s.Holds(clockguard.SourcePeers); !ok || r == "mutated" {
		t.Fatalf("Holds = %q, %v: a snapshot's caller changed the state", r, ok)
	}
	if _, ok := s.Holds(clockguard.SourceLease); ok {
		t.Fatal("Holds(lease) = true")
	}
}

func TestServingStateUnsubscribeAndLog(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	s := clockguard.NewServingState("orders", clockguard.WithStateLogger(logger))
	n := 0
	unsub := s.Subscribe(func(clockguard.Transition) { n++ })
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	unsub()
	s.Set(clockguard.SourceNTP, "clock offset +1s from NTP, limit 250ms")
	if n != 1 {
		t.Fatalf("subscriber called %d times, want 1 (before unsubscribe)", n)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, w := range []string{"generator=orders", "from=starting", "to=serving", "level=WARN",
		"to=not-serving", "source=ntp", `reason="clock offset +1s from NTP, limit 250ms"`} {
		if !strings.Contains(out, w) {
			t.Errorf("log lacks %q:\n%s", w, out)
		}
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestServingStateConcurrent: many sources set and clear at once while
// readers poll; transitions reach the subscriber in order (each starts
// where the previous ended) and the final state is exact.
func TestServingStateConcurrent(t *testing.T) {
	s := clockguard.NewServingState("default")
	var mu sync.Mutex
	var trs []clockguard.Transition
	s.Subscribe(func(tr clockguard.Transition) {
		mu.Lock()
		trs = append(trs, tr)
		mu.Unlock()
		_ = s.Serving() // reading from a subscriber is allowed
		_ = s.Snapshot()
	})
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Serving and Reason are two loads and may straddle a
				// change; one Snapshot must be consistent in itself.
				sn := s.Snapshot()
				if (sn.State == clockguard.StateServing) != (sn.Reason == "") || (sn.State == clockguard.StateServing) != (len(sn.Causes) == 0) {
					t.Errorf("inconsistent snapshot %+v", sn)
					return
				}
			}
		})
	}
	var writers sync.WaitGroup
	for i := range 8 {
		src := clockguard.Source(fmt.Sprintf("src-%d", i))
		writers.Go(func() {
			for j := range 300 {
				s.Set(src, fmt.Sprintf("%s round %d", src, j))
				s.Clear(src)
			}
		})
	}
	writers.Wait()
	close(stop)
	wg.Wait()

	if !s.Serving() || s.Reason() != "" {
		t.Fatalf("final: serving=%v reason=%q", s.Serving(), s.Reason())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(trs) < 2 {
		t.Fatalf("only %d transitions", len(trs))
	}
	for i := 1; i < len(trs); i++ {
		if trs[i].From != trs[i-1].To {
			t.Fatalf("transition %d %+v does not start where %d %+v ended", i, trs[i], i-1, trs[i-1])
		}
	}
	if last := trs[len(trs)-1]; last.To != clockguard.StateServing {
		t.Fatalf("last transition %+v", last)
	}
}

func TestStateString(t *testing.T) {
	want := []string{"starting", "checking", "serving", "not-serving", "draining", "stopped"}
	for i, w := range want {
		if got := clockguard.State(i).String(); got != w {
			t.Errorf("State(%d) = %q, want %q", i, got, w)
		}
	}
	if got := clockguard.State(42).String(); got != "State(42)" {
		t.Errorf("State(42) = %q", got)
	}
}

// The serving gate opens before the state is seen serving and closes
// after it is seen not serving: whatever it guards is open whenever
// Serving reports true.
func TestServingGateOrder(t *testing.T) {
	var s *clockguard.ServingState
	var calls []string
	s = clockguard.NewServingState("g", clockguard.WithServingGate(func(serving bool) {
		calls = append(calls, fmt.Sprintf("gate(%v) while Serving()=%v", serving, s.Serving()))
	}))
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	s.Set(clockguard.SourceNTP, "off")
	s.Set(clockguard.SourcePeers, "off too") // no change of Serving: no call
	s.Clear(clockguard.SourceNTP)
	s.Clear(clockguard.SourcePeers)
	if err := s.Drain("bye"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"gate(true) while Serving()=false",
		"gate(false) while Serving()=false",
		"gate(true) while Serving()=false",
		"gate(false) while Serving()=false",
	}
	if !slices.Equal(calls, want) {
		t.Fatalf("gate calls %q, want %q", calls, want)
	}
}
