package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/server/core"
)

// A snowflake generator whose restore marker stands (a node found its
// coordinator restored: an embedded store put back from a backup beside
// a newer data dir, or a snapshot restore) is refused RESTORE_DETECTED,
// the cause the runbook's fix is looked up by and the one the segment and
// sequence generators report — not STARTING ("start checks not yet
// passed"), which tells a caller to wait rather than an operator to bump.
func TestRestoreMarkerRefusedAsRestoreDetected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quiet, store, clock := core.MemBubble()
		wall, _ := clock.Now()
		other := store.Connect(clock)
		defer other.Close()
		ev := coordinator.RestoreEvidence{Generator: "g", Slot: coordinator.Slot{Worker: 0}, Acked: 1000, Shown: -1, At: wall,
			Node: coordinator.NodeInfo{Name: "n0", InstanceID: strings.Repeat("a", 32), Address: "n0:7300", StartTime: wall}}
		if err := other.MarkRestored(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
		layout, _ := generator.Preset("snowflake")
		cfg := core.DefaultConfig()
		cfg.Generators = []core.GeneratorConfig{{Name: "g", Layout: layout}}
		nc := core.StartMemNode(t, cfg, store, clock, core.WithLogger(quiet))
		defer nc.Stop()
		rt := nc.Generators()[0]
		for start := time.Now(); !strings.Contains(rt.State().Reason(), "restored from an older snapshot"); time.Sleep(10 * time.Millisecond) {
			if time.Since(start) > 30*time.Second {
				t.Fatalf("30 s after the start: %s, want the restore marker named", rt.State().Reason())
			}
		}
		// The start checks of a private coordinator's node pass meanwhile
		// (the peers' first reading): only the marker holds it out then.
		time.Sleep(5 * time.Second)
		_, err := nc.NextID(context.Background(), "g")
		var ns *core.NotServingError
		if !errors.As(err, &ns) || ns.Code != clockguard.CodeRestoreDetected {
			t.Fatalf("NextID while the restore marker stands: %v (code %v), want RESTORE_DETECTED", err, codeOf(ns))
		}
	})
}

func codeOf(ns *core.NotServingError) clockguard.Code {
	if ns == nil {
		return ""
	}
	return ns.Code
}
