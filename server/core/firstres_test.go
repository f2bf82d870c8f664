package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/server/core"
)

// A snowflake generator whose first reservation the coordinator does not
// confirm is held, COORDINATOR_UNAVAILABLE, and the holder writes again
// every 200 ms (docs/design.md, Liveness rules): a caller retrying sooner
// is refused again, so the refusal carries that as RetryInfo, as one for
// a reservation run out (written again every 200 ms: Detail.RetryEvery)
// does.
func TestFirstReservationUnconfirmedRefusalCarriesRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quiet, store, clock := core.MemBubble()
		store.Faults().SetAvailability(memory.OpReserve, memory.Refusing)
		layout, _ := generator.Preset("snowflake")
		cfg := core.DefaultConfig()
		cfg.Cluster = "first"
		cfg.Generators = []core.GeneratorConfig{{Name: "g", Layout: layout}}
		nc := core.StartMemNode(t, cfg, store, clock, core.WithLogger(quiet))
		defer nc.Stop()
		rt := nc.Generators()[0]
		for start := time.Now(); !strings.Contains(rt.State().Reason(), "first reservation not confirmed"); time.Sleep(10 * time.Millisecond) {
			if time.Since(start) > 30*time.Second {
				t.Fatalf("30 s after the start: %s, want the first reservation unconfirmed", rt.State().Reason())
			}
		}
		_, err := nc.NextID(context.Background(), "g")
		var ns *core.NotServingError
		if !errors.As(err, &ns) || ns.Code != clockguard.CodeCoordinatorUnavailable {
			t.Fatalf("NextID with the first reservation unconfirmed: %v, want COORDINATOR_UNAVAILABLE", err)
		}
		if ns.RetryAfter <= 0 {
			t.Fatalf("NextID with the first reservation unconfirmed (written again every 200 ms): refused %s with no RetryAfter: %v", ns.Code, err)
		}
		store.Faults().Clear()
		time.Sleep(time.Second)
		if _, err := nc.NextID(context.Background(), "g"); err != nil {
			t.Fatalf("NextID once the coordinator confirms: %v", err)
		}
	})
}
