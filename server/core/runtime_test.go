package core

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/ringbuffer"
	"github.com/firnid/firn/server/admission"
)

// A layout whose epoch lies more than ~292 years back is refused by the
// node's configuration check, naming the epoch: its generator could not
// issue at today's clock (generator.TestOldEpochServes).
func TestOldEpochRefusedAtConfig(t *testing.T) {
	gc, err := ParseGeneratorDefinition("old", "time=40,dc=0,worker=10,seq=13,unit=1s,epoch=1700-01-01T00:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Generators = []GeneratorConfig{gc}
	err = cfg.Finish(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	if err == nil || !strings.Contains(err.Error(), "epoch") {
		t.Fatalf("Config.Finish = %v, want generator old refused naming its epoch", err)
	}
}

// stampSource makes IDs that are their creation time on clock's
// monotonic reading (kept increasing), at once (TryBatch and NextBatch).
type stampSource struct {
	clock clockguard.Clock
	last  uint64
}

func (s *stampSource) TryBatch(dst []uint64) (int, error) {
	_, m := s.clock.Now()
	now := uint64(m)
	for i := range dst {
		now = max(now, s.last+1)
		dst[i], s.last = now, now
	}
	return len(dst), nil
}
func (s *stampSource) NextBatch(_ context.Context, dst []uint64) (int, error) { return s.TryBatch(dst) }

// A NextIDs the ring holds part of waits for its turn of the fair share
// behind another caller (here 300 ms) and takes from the ring after it:
// no ID handed out may be older than --max-staleness (100 ms) plus one
// tick (25 ms). Before, it took the ring's IDs first and returned them
// with the rest after the wait, 300 ms old.
func TestIssueKeepsRingIDsFresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := clockguard.NewSystem()
		ring, err := ringbuffer.New(ringbuffer.Config{Size: 1024, MaxStaleness: 100 * time.Millisecond, Clock: clock, Chunk: 64})
		if err != nil {
			t.Fatal(err)
		}
		defer ring.Close()
		ring.Reset(&stampSource{clock: clock})
		ring.Start()
		for ring.Len() == 0 { // demand: the filler sizes its target from it
			ring.Take()
			time.Sleep(5 * time.Millisecond)
			synctest.Wait()
		}
		state := clockguard.NewServingState("g", clockguard.WithStateClock(clock))
		if err := state.Ready(); err != nil {
			t.Fatal(err)
		}
		fair := admission.NewFairShare(4_096_000, 4096, 1_000_000)
		rt := &Generator{cfg: GeneratorConfig{Name: "g"}, clock: clock, ring: ring, fair: fair, state: state, refusals: admission.NewRefusals()}

		// Another caller's turn is in progress.
		octx, ocancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ocancel()
		other, err := fair.Admit(octx, "other", 1000, 4_096_000)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fair.Acquire(octx, other, 1000); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(300 * time.Millisecond)
			fair.Release()
			fair.Leave(other, 1000)
		}()

		held := ring.Len()
		dst := make([]uint64, held+100) // more than the ring holds, within one turn
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := rt.issue(ctx, dst); err != nil {
			t.Fatalf("issue: %v", err)
		}
		_, now := clock.Now()
		oldest := now - time.Duration(dst[0])
		if oldest > 125*time.Millisecond {
			t.Fatalf("NextIDs(%d) with %d IDs in the ring: its first ID was made %v before it was handed out (bound 100 ms + a 25 ms tick)",
				len(dst), held, oldest)
		}
	})
}

// A refusal held back for a flow's pace is answered before the caller's
// deadline less the margin (docs/design.md, Overload: "never past the
// caller's deadline less 20 ms"), whatever the node's wall clock reads —
// in virtual time (testing/synctest), so that a loaded machine cannot
// move it. With the node's clock an hour behind (a step back, or the
// fault-injection clock), the time left was measured against the wall
// reading, an hour too long, and the refusal held until the deadline
// itself: DEADLINE_EXCEEDED, without its cause.
func TestPacedRefusalWithinDeadline(t *testing.T) {
	for _, off := range []time.Duration{0, -time.Hour} {
		t.Run(off.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clock := clockguard.NewOffset(clockguard.NewSystem(), off)
				rt := &Generator{cfg: GeneratorConfig{Name: "g"}, clock: clock, refusals: admission.NewRefusals()}
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				key := admission.FlowKey(ctx)
				_, mono := clock.Now()
				for range 300 { // a client refused far faster than the pace
					rt.refusals.Refused(key, mono, 0)
				}
				start := time.Now()
				err := rt.holdPaced(ctx, key, &admission.OverloadedError{Generator: "g", Asked: 1})
				took := time.Since(start)
				if err == nil {
					t.Fatal("no refusal")
				}
				if limit := 200*time.Millisecond - 20*time.Millisecond; took > limit {
					t.Fatalf("clock offset %v: the paced refusal came %v after the call (its deadline 200 ms; the rule: by 180 ms)", off, took)
				}
			})
		})
	}
}

// TestHeldSlotCounted: two holdings of one slot stand for a moment (one
// whose take went through in a session that then ended, beside a
// sibling that took the worker again); the first's end leaves the slot
// held for the second, so that no third holder is offered it.
func TestHeldSlotCounted(t *testing.T) {
	rt := &Generator{}
	s := coordinator.Slot{Worker: 16}
	rt.holdSlot(s, true)
	rt.holdSlot(s, true)
	rt.holdSlot(s, false)
	if !rt.heldSlots()[s] {
		t.Fatalf("held slots %v after one of two holdings of %s ended; want it held", rt.heldSlots(), s)
	}
	rt.holdSlot(s, false)
	if h := rt.heldSlots(); len(h) != 0 {
		t.Fatalf("held slots %v after both holdings ended; want none", h)
	}
}
