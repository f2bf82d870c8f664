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
	"github.com/firnid/firn/server/core"
)

// A stop hands each segment generator's remainders back, each bounded by
// the coordinator timeout — all of them together within that bound, not
// one after the other: Core.Stop runs after the gRPC server's graceful
// stop, outside --shutdown-timeout, and with several segment generators
// on a coordinator that stopped answering it took the bound once per
// generator.
func TestStopHandsSegmentsBackTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quiet := slog.New(slog.DiscardHandler)
		store := memory.New(memory.Config{TTL: 5 * time.Second, Timeout: time.Second, Logger: quiet})
		clock := clockguard.NewSystem()
		cfg := core.DefaultConfig()
		cfg.Cluster = "stop"
		const gens = 4
		for i := range gens {
			d := segment.Default()
			cfg.Generators = append(cfg.Generators, core.GeneratorConfig{Name: fmt.Sprintf("s%d", i), Segment: &d})
		}
		nc := startMemNode(t, cfg, store, clock, core.WithLogger(quiet))
		for i, rt := range nc.Generators() {
			for start := time.Now(); !rt.State().Serving(); time.Sleep(10 * time.Millisecond) {
				if time.Since(start) > 30*time.Second {
					t.Fatalf("s%d not serving 30 s after the start: %s", i, rt.State().Reason())
				}
			}
		}
		store.Faults().SetAvailability(memory.OpAll, memory.Hanging)
		start := time.Now()
		nc.Stop()
		took := time.Since(start)
		bound := 2*cfg.Timing.Timeout + 500*time.Millisecond // one generator's hand-back, and some slack
		if took > bound {
			t.Fatalf("Stop of %d segment generators on a coordinator that does not answer took %v, more than the %v one takes at most (coordinator timeout %v)",
				gens, took, bound, cfg.Timing.Timeout)
		}
		t.Logf("Stop took %v", took)
	})
}
