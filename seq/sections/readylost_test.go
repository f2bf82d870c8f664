package sections

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/segment"
)

// TestNotReadyWhileServingNothing: a ready node loses every section's
// lease at once (its session ended) and its takes fail from then on (its
// data dir refuses the take's mark). It answers for none of its sections
// and refuses every call: its serving state must say so, naming the
// failure (as at its start, TestTakeFailureNamed), not go on telling it
// serves. Once its takes land it serves again.
func TestNotReadyWhileServingNothing(t *testing.T) {
	st := memory.New(memory.Config{TTL: 2 * time.Second})
	const why = "data dir: no space left on device"
	var failing atomic.Bool
	type note struct {
		err     error
		serving int
	}
	ch := make(chan note, 1000)
	var mp atomic.Pointer[Manager]
	m, c := start(t, st, "a", 2, 0, 0, func(cfg *Config) {
		cfg.Record = func(segment.Mark) error {
			if failing.Load() {
				return errors.New(why)
			}
			return nil
		}
		cfg.Notify = func(err error) {
			n := note{err: err}
			if m := mp.Load(); m != nil {
				n.serving = m.Stats().Serving
			}
			ch <- n
		}
	})
	mp.Store(m)
	waitServing(t, m, 2)
	failing.Store(true)
	c.Expire()
	for timeout := time.After(5 * time.Second); ; {
		select {
		case n := <-ch:
			var se *StartingError
			if errors.As(n.err, &se) && se.Err != nil && strings.Contains(n.err.Error(), why) {
				t.Logf("told: %v", n.err)
				goto told
			}
		case <-timeout:
			t.Fatalf("5 s after losing its leases, with every take failing: %+v, still told it serves (%q); want the take's failure", m.Stats(), m.notified)
		}
	}
told:
	failing.Store(false)
	for timeout := time.After(10 * time.Second); ; {
		select {
		case n := <-ch:
			if n.err == nil {
				if n.serving != 2 {
					t.Fatalf("told it serves while it answers for %d of its 2 sections", n.serving)
				}
				return
			}
		case <-timeout:
			t.Fatalf("not serving again: %+v", m.Stats())
		}
	}
}
