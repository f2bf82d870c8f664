package core_test

import (
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/seq"
	"github.com/firnid/firn/server/core"
)

// A drain is prompt (docs/design.md, Liveness rules: "completes within
// the calls in flight plus about 2 s"): a node whose coordinator stopped
// answering frees its sequence generators' sections as the drain begins,
// each bounded by the coordinator timeout — but all of them together
// within that bound, not one after the other: with several sequence
// generators Drain (which Node.Shutdown runs before it ends the health
// watches and the gRPC server's graceful stop, and outside
// --shutdown-timeout) took the bound once per generator.
func TestDrainFreesSequenceGeneratorsTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quiet := slog.New(slog.DiscardHandler)
		store := memory.New(memory.Config{TTL: 5 * time.Second, Timeout: time.Second, Logger: quiet})
		clock := clockguard.NewSystem()
		cd := seq.Definition{Sections: 4}.Counter()
		cfg := core.DefaultConfig()
		cfg.Cluster = "drain"
		const gens = 4
		for i := range gens {
			d := cd
			cfg.Generators = append(cfg.Generators, core.GeneratorConfig{Name: fmt.Sprintf("s%d", i), Segment: &d})
		}
		nc := startMemNode(t, cfg, store, clock, core.WithLogger(quiet))
		defer nc.Stop()
		for i, rt := range nc.Generators() {
			for start := time.Now(); !rt.State().Serving(); time.Sleep(10 * time.Millisecond) {
				if time.Since(start) > 30*time.Second {
					t.Fatalf("s%d not serving 30 s after the start: %s", i, rt.State().Reason())
				}
			}
		}
		store.Faults().SetAvailability(memory.OpAll, memory.Hanging)
		start := time.Now()
		nc.Drain("shutting down")
		took := time.Since(start)
		bound := 2*cfg.Timing.Timeout + 500*time.Millisecond // one generator's stopSeq, and some slack
		if took > bound {
			t.Fatalf("Drain of %d sequence generators on a coordinator that does not answer took %v, more than the %v one takes at most (coordinator timeout %v)",
				gens, took, bound, cfg.Timing.Timeout)
		}
		t.Logf("Drain took %v", took)
	})
}
