package sections

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/segment"
)

// tooNew is a node's counters as an older binary sees a record a newer
// one wrote: every read refused.
type tooNew struct{ coordinator.Counters }

func (tooNew) ReadCounter(context.Context, coordinator.CounterSpec) (coordinator.CounterRecord, error) {
	return coordinator.CounterRecord{}, fmt.Errorf("%w: counter record of schema 9", segment.ErrCounter)
}

// TestUnreadableCounterMemberLeaves: node b joined and owns its share;
// then its counter reads fail for a reason of its own (a newer binary's
// record it cannot decode, as in a rolling upgrade). b can raise no
// maximum and is not ready, yet kept its sections' leases and its place
// among the members, so a refused b's share (WRONG_NODE naming b) for as
// long as b ran: its share must go to a, and come back once b reads the
// record again.
func TestUnreadableCounterMemberLeaves(t *testing.T) {
	st := memory.New(memory.Config{TTL: 2 * time.Second})
	a, _ := start(t, st, "a", 4, 0, 0)
	waitServing(t, a, 4)
	var bad atomicBool
	b, _ := start(t, st, "b", 4, 0, 0, func(c *Config) {
		inner := c.Counters
		c.Counters = switching{inner, &bad}
	})
	for end := time.Now().Add(10 * time.Second); a.Stats().Owned == 4; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("b never took its share")
		}
	}
	bad.set(true)
	ctx := context.Background()
	for s := range 4 {
		k := keyOf(a, s)
		for end := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, err := a.Next(ctx, k, 1)
			if err == nil {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("after 15 s, a (stats %+v) still refuses section %d: %v", a.Stats(), s, err)
			}
		}
	}
	bad.set(false) // b reads the record again: it joins and takes its share
	for end := time.Now().Add(10 * time.Second); b.Stats().Serving == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("b reads the counter again and serves nothing: %+v", b.Stats())
		}
	}
}

type atomicBool struct{ v atomic.Bool }

func (b *atomicBool) set(v bool) { b.v.Store(v) }

type switching struct {
	coordinator.Counters
	bad *atomicBool
}

func (s switching) ReadCounter(ctx context.Context, spec coordinator.CounterSpec) (coordinator.CounterRecord, error) {
	if s.bad.v.Load() {
		return tooNew{}.ReadCounter(ctx, spec)
	}
	return s.Counters.ReadCounter(ctx, spec)
}
