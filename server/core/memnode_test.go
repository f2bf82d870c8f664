package core

import (
	"log/slog"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/datadir"
)

// The in-process tests' scaffolding, exported to the package's external
// tests (package core_test) as well.

// StartMemNode finishes cfg (private coordinator) and starts a core named
// n1 on a client of store, with a fresh data dir; the client is closed
// when the test ends. The caller stops the core.
func StartMemNode(t *testing.T, cfg Config, store *memory.Store, clock clockguard.Clock, opts ...Option) *Core {
	t.Helper()
	cfg.PrivateCoordinator = true
	wall, _ := clock.Now()
	if err := cfg.Finish(wall); err != nil {
		t.Fatal(err)
	}
	st, err := datadir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	client := store.Connect(clock)
	t.Cleanup(func() { client.Close() })
	info := coordinator.NodeInfo{Name: "n1", InstanceID: st.InstanceID(), Address: "n1:7300", StartTime: wall}
	nc, err := New(cfg, client, st, clock, info, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Start(); err != nil {
		t.Fatal(err)
	}
	return nc
}

// MemBubble is what the in-process tests in a synctest bubble start
// from: a quiet logger, a memory store (TTL 5 s) and a clock at
// 2026-01-01 (the bubble starts in 2000, before the layouts' epochs).
func MemBubble() (*slog.Logger, *memory.Store, *clockguard.Offset) {
	quiet := slog.New(slog.DiscardHandler)
	store := memory.New(memory.Config{TTL: 5 * time.Second, Timeout: time.Second, Logger: quiet})
	clock := clockguard.NewOffset(clockguard.NewSystem(), time.Until(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	return quiet, store, clock
}
