package client

import (
	"context"
	"math"
	"testing"
	"time"
)

// BenchmarkNext measures Next while the buffer holds IDs (the take path):
// the buffer is preloaded, so no RPC runs during the measurement. Run with
// -benchmem: the take path allocates nothing.
//
//	go test -run '^$' -bench . -benchmem -benchtime 2s ./client/
func BenchmarkNext(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		name := map[bool]string{false: "serial", true: "parallel"}[parallel]
		b.Run(name, func(b *testing.B) {
			// No server: the preloaded buffer is all there is.
			c, err := New([]string{"127.0.0.1:1"}, WithLogger(quiet), WithMaxAge(time.Hour),
				WithoutHealthCheck())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			preload(c, b.N+1_000_000)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			if !parallel {
				for range b.N {
					if _, err := c.Next(ctx); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Next(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// preload queues batches holding n IDs in all that never expire. They
// share one slice of IDs: the benchmark measures the take, not uniqueness.
func preload(c *Client, n int) {
	const chunk = 1 << 20
	ids := make([]uint64, chunk)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for ; n > 0; n -= chunk {
		c.queue = append(c.queue, newBatch(ids, math.MaxInt64))
	}
	c.installLocked()
}

// BenchmarkNextServed takes IDs end to end from a test server in this
// process: the figure includes the server, the transport and the refill,
// all on the same CPUs, so it shows the client's sustained rate, not the
// take path's cost.
func BenchmarkNextServed(b *testing.B) {
	_, addr := startService(b, 1, nil)
	c, err := New([]string{addr}, WithLogger(quiet), WithMaxAge(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Next(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Next(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
