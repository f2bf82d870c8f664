package client

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/firnid/firn/client/clienttest"
	firnv1 "github.com/firnid/firn/client/firnv1"
)

// TestRefusedAtOnceWithinTheRefillBackoff: after a failed refill round the
// refiller waits before the next (50 ms, doubling to 1 s) when the node
// sent no RetryInfo (LEASE_LOST, COORDINATOR_UNAVAILABLE). A caller whose
// deadline ends before that next round gets no refill in its time: it is
// refused at once with the last round's refusal, the node's reason in it,
// not left to end in a bare deadline.
//
// With a long max age the refiller's tick is long too (max age / 8): the
// round after the backoff must start when the backoff ends, not at the
// next tick, or a caller whose deadline falls between the two waits it out.
func TestRefusedAtOnceWithinTheRefillBackoff(t *testing.T) {
	for _, maxAge := range []time.Duration{0, 4 * time.Second} {
		t.Run(fmt.Sprintf("maxAge=%v", maxAge), func(t *testing.T) { refusedWithinBackoff(t, maxAge) })
	}
}

func refusedWithinBackoff(t *testing.T, maxAge time.Duration) {
	svc := clienttest.NewService(1)
	svc.Refuse(firnv1.ErrorReason_LEASE_LOST, "lease lost (clienttest)", 0)
	opts := []Option{WithLogger(quiet), WithoutHealthCheck()}
	if maxAge > 0 {
		opts = append(opts, WithMaxAge(maxAge))
	}
	c, err := New([]string{serveIDs(t, svc, nil)}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var reasons []string
	bare := 0
	for range 10 {
		_, err := c.Next(ctxFor(t, 300*time.Millisecond))
		r := Reason(err)
		reasons = append(reasons, r.String())
		if r != firnv1.ErrorReason_LEASE_LOST {
			bare++
		}
		if err == nil || errors.Is(err, ErrClosed) {
			t.Fatalf("Next: %v, want the node's refusal", err)
		}
	}
	if bare > 0 {
		t.Fatalf("the reasons of 10 calls in a row: %s (%d ended without the node's refusal)", strings.Join(reasons, " "), bare)
	}
}
