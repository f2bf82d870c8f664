package core_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/server/core"
)

// Ready means it serves (docs/design.md, Liveness rules), also once a
// flood has taken the generator's lead to its max-lead: with the
// coordinator not confirming writes, the reservation runs out for a
// generator a lead L ahead of the clock L sooner, and the expiry timer
// must take it out before that. The timer was sized from the lead at its
// last arming (an acknowledged write, before the flood): the generator
// said ready for about max-lead less the margin (here ~600 ms) while
// every call waited for a reservation to its deadline and was refused
// RESERVATION_EXHAUSTED. In virtual time (testing/synctest).
func TestExpiryFollowsTheLead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quiet, store, clock := memBubble()
		// 4 IDs per 10 ms unit: max-lead (1 s) holds 400 IDs, one batch.
		gc, err := core.ParseGeneratorDefinition("g", "time=41,dc=0,worker=10,seq=2,unit=10ms,epoch=2020-01-01T00:00:00Z")
		if err != nil {
			t.Fatal(err)
		}
		cfg := core.DefaultConfig()
		cfg.Cluster = "lead"
		cfg.Generators = []core.GeneratorConfig{gc}
		nc := startMemNode(t, cfg, store, clock, core.WithLogger(quiet))
		defer nc.Stop()
		rt := nc.Generators()[0]
		for !rt.State().Serving() {
			time.Sleep(10 * time.Millisecond)
		}
		// Just after an acknowledged write (the timer armed at lead 0),
		// the coordinator stops confirming, and a flood takes the lead.
		wall, _ := clock.Now()
		before := rt.Status(wall).ReservedUntil
		for rt.Status(wall).ReservedUntil.Equal(before) {
			time.Sleep(10 * time.Millisecond)
			wall, _ = clock.Now()
		}
		store.Faults().SetAvailability(memory.OpReserve, memory.Refusing)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if _, err := nc.IDs(ctx, "g", int64(rt.MaxBatch())); err != nil {
			t.Fatalf("flood: %v", err)
		}
		cancel()
		wall, _ = clock.Now()
		if lead := rt.Status(wall).ClockLead; lead < 900*time.Millisecond {
			t.Fatalf("lead after the flood: %v, want about max-lead (1s)", lead)
		}
		// While it says ready, a call gets an ID (or, the moment it stops,
		// the refusal with its cause), never a wait to its deadline.
		for range 1000 {
			wall, _ = clock.Now()
			st := rt.Status(wall)
			if !st.Serving {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			_, err := nc.NextID(ctx, "g")
			cancel()
			var ns *core.NotServingError
			if err != nil && !errors.As(err, &ns) {
				t.Fatalf("ready with %v of reservation left at a lead of %v: NextID = %v", st.ReservedUntil.Sub(wall), st.ClockLead, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("still serving 10 s into the outage")
	})
}
