package core_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/server/admission"
	"github.com/firnid/firn/server/core"
)

// A call that waits for its turn of the fair share behind a turn that
// waits for the clock (a coarse layout at its lead limit: a lead of two
// 1 s units keeps no unit back from bulk) is refused with its cause
// while its caller still listens — as a clock wait longer than the
// deadline is refused at once, and a paced refusal is answered no later
// than the deadline less 20 ms (docs/design.md, Liveness rules,
// Overload). Before, it waited in the fair share to the deadline itself
// and ended with the bare context error: DEADLINE_EXCEEDED, no cause, no
// RetryInfo. In virtual time (testing/synctest).
func TestTurnWaitRefusedBeforeDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quiet, store, clock := core.MemBubble()
		gc, err := core.ParseGeneratorDefinition("g", "time=41,dc=0,worker=10,seq=2,unit=1s,epoch=2020-01-01T00:00:00Z")
		if err != nil {
			t.Fatal(err)
		}
		cfg := core.DefaultConfig()
		cfg.Cluster = "turn"
		cfg.Generators = []core.GeneratorConfig{gc}
		nc := core.StartMemNode(t, cfg, store, clock, core.WithLogger(quiet))
		defer nc.Stop()
		rt := nc.Generators()[0]
		for !rt.State().Serving() {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(1500 * time.Millisecond) // mid-unit: the next one starts in 500 ms
		flow := func(host string) context.Context {
			return admission.WithHTTPFlowKey(context.Background(), &http.Request{RemoteAddr: host + ":1"})
		}
		// A flood takes the whole lead.
		for {
			ctx, cancel := context.WithTimeout(flow("10.0.0.1"), 10*time.Millisecond)
			_, err := nc.IDs(ctx, "g", int64(rt.MaxBatch()))
			cancel()
			if err != nil {
				break
			}
		}
		// A's single ID waits (within its deadline) for the clock, holding
		// the turn.
		done := make(chan struct{})
		go func() {
			defer close(done)
			ctx, cancel := context.WithTimeout(flow("10.0.0.2"), 5*time.Second)
			defer cancel()
			if _, err := nc.NextID(ctx, "g"); err != nil {
				t.Errorf("A: %v", err)
			}
		}()
		time.Sleep(10 * time.Millisecond)
		// B's single ID, from another client, cannot have its turn within
		// its 300 ms.
		ctx, cancel := context.WithTimeout(flow("10.0.0.3"), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = nc.NextID(ctx, "g")
		took := time.Since(start)
		if err == nil || errors.Is(err, context.DeadlineExceeded) || took >= 300*time.Millisecond {
			t.Fatalf("B's NextID behind a turn waiting 490 ms for the clock: %v after %v, want a refusal with its cause before the 300 ms deadline", err, took)
		}
		if !errors.Is(err, admission.ErrOverloaded) {
			t.Fatalf("B's NextID: %v, want OVERLOADED", err)
		}
		<-done
	})
}
