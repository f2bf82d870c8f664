package core

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/generator"
)

// While none of a wide generator's workers serves, its refusal's
// RetryInfo says when it serves again: when the first of them does
// (docs/design.md, Errors: a hold that knows when it ends carries it).
// Each worker here waits for the clock to reach its floor after losing
// its lease, the first (slot 0) about 2 s longer than the second. The
// refusal carried the first worker's wait alone, ~4 s, while the
// generator served again ~2 s sooner; a client honouring RetryInfo (the
// Go client asks the node nothing until it passes) stayed away that much
// longer. In virtual time (testing/synctest).
func TestWideRefusalRetriesWhenTheFirstWorkerServes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quiet, store, clock := MemBubble()
		layout, _ := generator.Preset("snowflake")
		cfg := DefaultConfig()
		cfg.Cluster = "wide"
		cfg.Workers = 2
		cfg.Generators = []GeneratorConfig{{Name: "g", Layout: layout}}
		nc := StartMemNode(t, cfg, store, clock, WithLogger(quiet))
		defer nc.Stop()
		rt := nc.Generators()[0]
		for len(rt.liveHoldings()) < 2 {
			time.Sleep(10 * time.Millisecond)
		}
		expire := func(slot int) {
			rt.wmu.Lock()
			m := rt.members[slot]
			rt.wmu.Unlock()
			h := m.hd.cur.Load()
			if h == nil || !store.ExpireLease(h.lease) {
				t.Fatalf("member %d: no lease to expire", slot)
			}
		}
		// Each takes a worker again above the node's last reservation (a
		// window ahead), and waits for the clock to come within max-lead.
		expire(1)
		time.Sleep(2 * time.Second)
		expire(0)
		time.Sleep(100 * time.Millisecond)
		_, err := nc.NextID(context.Background(), "g")
		var ns *NotServingError
		if !errors.As(err, &ns) {
			t.Fatalf("NextID with no worker serving: %v, want not serving", err)
		}
		start := time.Now()
		for !rt.State().Serving() {
			time.Sleep(10 * time.Millisecond)
		}
		served := time.Since(start)
		if ns.RetryAfter > served+200*time.Millisecond {
			t.Fatalf("refused %q with RetryAfter %v; the generator served again %v later", ns.Reason, ns.RetryAfter, served)
		}
	})
}
