package sections

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
)

// TestNotReadyAfterRestoreUntilServing: a node that gave every section up
// for a restore (here the marker another node wrote) and sees the bump
// that clears it takes its sections again; it serves again once they
// serve (their takes settled), as at its start and as a segment generator
// does after a bump. Its serving state must not say it serves while it
// answers for none of its sections: every call would be refused
// SECTION_MOVING by a node whose /readyz says ready.
func TestNotReadyAfterRestoreUntilServing(t *testing.T) {
	st := memory.New(memory.Config{TTL: 5 * time.Second})
	type note struct {
		err     error
		serving int // sections answered for when told
		owned   int
	}
	ch := make(chan note, 1000)
	var mp atomic.Pointer[Manager]
	m, c := start(t, st, "a", 2, 300*time.Millisecond, 0, func(cfg *Config) {
		cfg.Notify = func(err error) {
			n := note{err: err}
			if m := mp.Load(); m != nil {
				s := m.Stats()
				n.serving, n.owned = s.Serving, s.Owned
			}
			ch <- n
		}
	})
	mp.Store(m)
	waitServing(t, m, 2)
	ctx := context.Background()
	wall, _ := m.cfg.Clock.Now()
	if err := c.MarkRestored(ctx, coordinator.RestoreEvidence{Generator: "chats", Acked: 10, Shown: 1, At: wall,
		Node: coordinator.NodeInfo{Name: "x", InstanceID: "inst-x"}, Counter: true}); err != nil {
		t.Fatal(err)
	}
	for timeout := time.After(5 * time.Second); ; {
		select {
		case n := <-ch:
			if errors.Is(n.err, coordinator.ErrRestored) {
				goto restored
			}
		case <-timeout:
			t.Fatalf("the marker not seen within 5 s: %+v", m.Stats())
		}
	}
restored:
	if _, err := c.BumpCounter(ctx, m.cspec, 1000); err != nil {
		t.Fatal(err)
	}
	for timeout := time.After(10 * time.Second); ; {
		select {
		case n := <-ch:
			if n.err != nil {
				t.Logf("told: %v", n.err)
				continue
			}
			if n.serving != 2 {
				t.Fatalf("after the bump the generator was told it serves while it answers for %d of its 2 sections (%d held): ready but refusing their keys", n.serving, n.owned)
			}
			t.Logf("serving again with %d sections answered for", n.serving)
			return
		case <-timeout:
			t.Fatalf("not serving again within 10 s of the bump: %+v", m.Stats())
		}
	}
}
