package core_test

import (
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/segment"
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
	releasedTogether(t, seq.Definition{Sections: 4}.Counter(), "Drain", "sequence", func(nc *core.Core) { nc.Drain("shutting down") })
}

// A stop hands each segment generator's remainders back, each bounded by
// the coordinator timeout — all of them together within that bound, not
// one after the other: Core.Stop runs after the gRPC server's graceful
// stop, outside --shutdown-timeout, and with several segment generators
// on a coordinator that stopped answering it took the bound once per
// generator.
func TestStopHandsSegmentsBackTogether(t *testing.T) {
	releasedTogether(t, segment.Default(), "Stop", "segment", func(nc *core.Core) { nc.Stop() })
}

// releasedTogether starts four generators of def, makes the coordinator
// hang once they serve, and checks that act (named what, for generators
// of kind) ends within one generator's bound: twice the coordinator
// timeout, and some slack.
func releasedTogether(t *testing.T, def segment.Definition, what, kind string, act func(*core.Core)) {
	synctest.Test(t, func(t *testing.T) {
		quiet := slog.New(slog.DiscardHandler)
		store := memory.New(memory.Config{TTL: 5 * time.Second, Timeout: time.Second, Logger: quiet})
		clock := clockguard.NewSystem()
		cfg := core.DefaultConfig()
		cfg.Cluster = "release"
		const gens = 4
		for i := range gens {
			d := def
			cfg.Generators = append(cfg.Generators, core.GeneratorConfig{Name: fmt.Sprintf("s%d", i), Segment: &d})
		}
		nc := core.StartMemNode(t, cfg, store, clock, core.WithLogger(quiet))
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
		act(nc)
		took := time.Since(start)
		bound := 2*cfg.Timing.Timeout + 500*time.Millisecond
		if took > bound {
			t.Fatalf("%s of %d %s generators on a coordinator that does not answer took %v, more than the %v one takes at most (coordinator timeout %v)",
				what, gens, kind, took, bound, cfg.Timing.Timeout)
		}
		t.Logf("%s took %v", what, took)
	})
}
