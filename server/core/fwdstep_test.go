package core_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/server/core"
)

// A forward step of the clock the node accepts (here: alone, without
// NTP, on its own coordinator: nothing to confirm it with, so it is
// accepted unconfirmed, docs/clock-policy.md) must not refuse a call: the
// generator refuses the stepped reading until the policy has seen it, and
// the call goes to the policy and is tried again (docs/design.md,
// Liveness rules: ready means it serves). A call that took part of its
// IDs from the ring before the generator refused got CLOCK_STEP instead,
// while the node said it served and the policy was never told.
func TestForwardStepAcceptedAfterRingIDsServes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quiet, store, clock := core.MemBubble()
		layout, _ := generator.Preset("snowflake")
		cfg := core.DefaultConfig()
		cfg.Cluster = "fwd"
		cfg.RingSize = 128
		cfg.Generators = []core.GeneratorConfig{{Name: "g", Layout: layout}}
		nc := core.StartMemNode(t, cfg, store, clock, core.WithLogger(quiet))
		defer nc.Stop()
		rt := nc.Generators()[0]
		// Demand sizes the ring's target: take IDs until it holds some.
		for start := time.Now(); !rt.State().Serving() || rt.Status(time.Now()).Ring.Available == 0; time.Sleep(10 * time.Millisecond) {
			if rt.State().Serving() {
				nc.NextID(context.Background(), "g")
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("30 s after the start: serving %v (%s), ring %d", rt.State().Serving(), rt.State().Reason(), rt.Status(time.Now()).Ring.Available)
			}
		}
		have := rt.Status(time.Now()).Ring.Available
		// More than the ring holds, within one turn: the ring's IDs first,
		// then the generator's.
		dst := make([]uint64, have+100)
		clock.SetOffset(clock.CurrentOffset() + time.Hour)
		if err := nc.NextIDs(context.Background(), "g", dst); err != nil {
			t.Fatalf("NextIDs(%d) with %d IDs in the ring, right after a forward step of 1h the node accepts (serving %v, %q): %v",
				len(dst), have, rt.State().Serving(), rt.State().Reason(), err)
		}
		if !rt.State().Serving() {
			t.Fatalf("after the accepted step: not serving: %s", rt.State().Reason())
		}
	})
}
