package clientnode

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/firnid/firn/client"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newClient(t *testing.T, endpoints []string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(endpoints, append([]client.Option{client.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond every 10 ms for up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > d {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}

func checkDistinct(t *testing.T, ids []uint64) {
	t.Helper()
	s := slices.Clone(ids)
	slices.Sort(s)
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			t.Fatalf("ID %d handed out twice (of %d)", s[i], len(s))
		}
	}
}
