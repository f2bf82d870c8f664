package sim

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/seq"
	"github.com/firnid/firn/seq/sections"
)

// TestSeqStrayAfterRestore is seqBugStrayAfterRestore's reproduction,
// two sections managers on one memory store, nothing else: a serves all
// eight sections alone; the coordinator is snapshotted; b joins and takes
// its share; the coordinator is restored to the snapshot, and the
// operator bumps the counter at once (before a node reads it, so none
// finds the restore). The restore brings back a's owner records of the
// sections b took, bound to the session a still renews: a holds no lease
// of them and leaves them alone, b waits for them to end, and they never
// do. Every section must have a serving owner again within a few seconds.
// Skipped while the bug is excused; FIRN_SEQ_REPRO=1 runs it anyway.
func TestSeqStrayAfterRestore(t *testing.T) {
	if seqBugStrayAfterRestore && os.Getenv("FIRN_SEQ_REPRO") == "" {
		t.Skip("seqBugStrayAfterRestore: a known bug of seq/sections; FIRN_SEQ_REPRO=1 runs its reproduction (it fails until the bug is fixed)")
	}
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Config{TTL: 5 * time.Second, Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
		clock := newSimClock(era, nil)
		def := seq.Definition{Sections: 8}
		spec := coordinator.CounterSpec{Generator: seqName, Definition: def.Counter()}
		type member struct {
			m *sections.Manager
			c *memory.Client
		}
		start := func(name string) member {
			c := store.Connect(clock)
			wall, _ := clock.Now()
			info := coordinator.NodeInfo{Name: name, InstanceID: name + "-instance", Address: name + ":7300", StartTime: wall}
			m, err := sections.New(sections.Config{Generator: seqName, Def: def, Coord: c, Workers: c.Workers, Counters: c,
				Node: info, Clock: clock, Settle: sections.DefaultSettle, Mark: c.MarkRestored, Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return member{m, c}
		}
		serving := func(ms ...member) (served []bool, held map[string][]int) {
			served, held = make([]bool, def.Sections), map[string][]int{}
			for i, x := range ms {
				for _, o := range x.m.Owners() {
					if o.Mine && o.Serving {
						served[o.Section] = true
						held[string(rune('a'+i))] = append(held[string(rune('a'+i))], o.Section)
					}
				}
			}
			return served, held
		}
		a := start("a")
		time.Sleep(3 * time.Second)
		if served, _ := serving(a); !all(served) {
			t.Fatalf("a alone serves %v of the sections", served)
		}
		snap := store.Snapshot()
		b := start("b")
		time.Sleep(3 * time.Second)
		_, held := serving(a, b)
		if len(held["b"]) == 0 {
			t.Fatalf("b took no section: %v", held)
		}
		t.Logf("before the restore: a serves %v, b serves %v", held["a"], held["b"])
		store.Restore(snap)
		admin := store.Connect(clock)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if _, err := admin.BumpCounter(ctx, spec, 1_000_000); err != nil {
			t.Fatal(err)
		}
		cancel()
		admin.Close()
		time.Sleep(30 * time.Second)
		served, held := serving(a, b)
		if !all(served) {
			var owners []string
			for _, h := range store.Holders(seqName) {
				if h.Live && h.Slot.Worker < uint64(def.Sections) {
					owners = append(owners, h.Slot.String()+": "+h.Heartbeat.Node.Name)
				}
			}
			t.Errorf("30 s after the restore and the bump: a serves %v, b serves %v; the store's section owner records: %v", held["a"], held["b"], owners)
		}
		for _, x := range []member{a, b} {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			x.m.Stop(ctx, true)
			cancel()
			x.c.Close()
		}
	})
}

func all(bs []bool) bool {
	for _, b := range bs {
		if !b {
			return false
		}
	}
	return true
}
