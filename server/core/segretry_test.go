package core

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/segment/source"
)

// A segment generator whose claims fail (the coordinator refuses) holds
// no IDs and does not serve: COORDINATOR_UNAVAILABLE. Its source claims
// again every 200 ms, so the refusal carries that as its RetryInfo, as a
// call refused for the same cause while the node still holds some IDs
// (ShortError) does, and as a snowflake generator's reservation written
// again every 200 ms does (Detail.RetryEvery): a retry sooner is refused
// again, one later is served once the coordinator answers.
func TestSegmentClaimsFailingRefusalCarriesRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{})
		store.Faults().SetAvailability(memory.OpCounter, memory.Refusing)
		mc := store.Connect(clockguard.NewSystem())
		defer mc.Close()
		clock := clockguard.NewSystem()
		d := segment.Definition{Start: 1, Max: 1 << 40}
		rt := &Generator{cfg: GeneratorConfig{Name: "seg", Segment: &d}, clock: clock,
			state: clockguard.NewServingState("seg", clockguard.WithStateClock(clock))}
		src, err := source.New(source.Config{Spec: coordinator.CounterSpec{Generator: "seg", Definition: d}, Counters: mc,
			Clock: clock, Notify: rt.segmentState})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Stop(context.Background(), false)
		rt.seg = src
		synctest.Wait()
		if rt.state.Serving() {
			t.Fatal("serving with every claim refused")
		}
		_, err = rt.segmentRuns(context.Background(), 1)
		var ns *NotServingError
		if !errors.As(err, &ns) || ns.Code != clockguard.CodeCoordinatorUnavailable {
			t.Fatalf("a take while claims fail: %v, want COORDINATOR_UNAVAILABLE", err)
		}
		if ns.RetryAfter <= 0 {
			t.Fatalf("a take while claims fail (retried every 200 ms): refused %s with no RetryAfter: %v", ns.Code, err)
		}
		// The coordinator answers again: served after the retry.
		store.Faults().Clear()
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		if !rt.state.Serving() {
			t.Fatalf("not serving once the coordinator answers: %s", rt.state.Reason())
		}
	})
}
