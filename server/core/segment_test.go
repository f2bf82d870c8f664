package core

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/segment/source"
	"github.com/firnid/firn/server/admission"
)

// A segment generator whose definition is nearly used up (max 1,000, all
// of it claimed) serves what it holds; a call for more than that can never
// be served, by this node or any other: it is refused with the cause,
// RESERVATION_EXHAUSTED naming max — not COORDINATOR_UNAVAILABLE with a
// retry in 200 ms, which says claims fail (the coordinator answers) and
// sends the caller to retry, here and at every other node, for ever.
func TestSegmentShortOfUsedUpDefinitionNamesItsCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		mc := store.Connect(clockguard.NewSystem())
		defer mc.Close()
		clock := clockguard.NewSystem()
		d := segment.Definition{Start: 1, Max: 1000}
		rt := &Generator{cfg: GeneratorConfig{Name: "small", Segment: &d}, clock: clock,
			state: clockguard.NewServingState("small", clockguard.WithStateClock(clock))}
		src, err := source.New(source.Config{Spec: coordinator.CounterSpec{Generator: "small", Definition: d}, Counters: mc,
			Clock: clock, MinStep: 600, MaxStep: 1 << 20, Notify: rt.segmentState})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Stop(context.Background(), false)
		rt.seg = src
		synctest.Wait()
		if !rt.state.Serving() {
			t.Fatalf("not serving after the first claim: %v", rt.refusal())
		}
		_, err = rt.segmentRuns(context.Background(), 2000)
		var oe *admission.OverloadedError
		if !errors.As(err, &oe) {
			t.Fatalf("NextRange of 2,000 of a definition of 1,000: %v, want a refusal of this call", err)
		}
		if oe.Cause != string(clockguard.CodeReservationExhausted) || oe.RetryAfter != 0 || !strings.Contains(err.Error(), "max=1000") {
			t.Fatalf("NextRange of 2,000 of a definition of 1,000 IDs: cause %q, retry in %v: %v; want RESERVATION_EXHAUSTED naming max=1000",
				oe.Cause, oe.RetryAfter, err)
		}
		// What the node holds is still served.
		runs, err := rt.segmentRuns(context.Background(), 1000)
		if err != nil || len(runs) == 0 || runs[0].First != 1 || runs[len(runs)-1].Last != 1000 {
			t.Fatalf("the 1,000 IDs held: %v %v", runs, err)
		}
	})
}
