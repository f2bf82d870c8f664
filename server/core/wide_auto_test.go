package core

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/generator"
)

// --workers auto, in virtual time: a rate above 80 % of the serving
// workers' leases one more at a time up to --max-workers; once the load
// ends, the extras are released together a minute later, down to one.
func TestAutoWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := generator.Preset("snowflake")
		rt := &Generator{cfg: GeneratorConfig{Name: "g", Layout: l}, maxWorkers: 5, auto: true}
		rt.wantW.Store(1)
		var grew []int
		grow := func(k int) {
			grew = append(grew, k)
			rt.wmu.Lock()
			for range k {
				rt.members = append(rt.members, &member{})
			}
			n := len(rt.members)
			rt.wmu.Unlock()
			rt.setLive(make([]*holding, n))
		}
		grow(1)
		var mu sync.Mutex
		var removed []int
		released := func() []int { mu.Lock(); defer mu.Unlock(); return append([]int(nil), removed...) }
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go rt.autoWorkers(ctx, clockguard.NewSystem(), grow, func(n int) {
			mu.Lock()
			removed = append(removed, n)
			mu.Unlock()
			rt.wmu.Lock()
			rt.members = rt.members[:len(rt.members)-n]
			k := len(rt.members)
			rt.wmu.Unlock()
			rt.setLive(make([]*holding, k))
		})
		// Demand of 4.5 workers' rate for 30 s, issued every 10 ms.
		perTick := uint64(4.5 * l.Rate() / 100)
		for range 3000 {
			rt.issued.Add(perTick)
			time.Sleep(10 * time.Millisecond)
		}
		synctest.Wait()
		if n := len(rt.liveHoldings()); n != 5 || rt.wantW.Load() != 5 || !slices.Equal(grew, []int{1, 1, 2, 1}) {
			t.Fatalf("under 4.5 workers' rate: %d workers (wanted %d, grown by %v), want 5 (--max-workers) by doubling: 1, +1, +2, +1",
				n, rt.wantW.Load(), grew)
		}
		// Idle: nothing is released for the first minute, then down to one.
		time.Sleep(50 * time.Second)
		if r := released(); len(r) != 0 {
			t.Fatalf("released %v within 50 s of the load ending", r)
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if n, r := len(rt.liveHoldings()), released(); n != 1 || rt.wantW.Load() != 1 || len(r) != 1 {
			t.Fatalf("70 s idle: %d workers (wanted %d, released %v), want one", n, rt.wantW.Load(), r)
		}
	})
}
