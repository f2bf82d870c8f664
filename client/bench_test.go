package client

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

// BenchmarkNext measures Next while the buffer holds IDs (the take path):
// the buffer is preloaded with runs, as refills leave it, so no RPC runs
// during the measurement. run=4096 is a node's run (one millisecond of a
// worker's sequence): every 4096th take installs the next run under the
// lock. Run with -benchmem: the take path allocates nothing.
//
//	go test -run '^$' -bench 'Next$|TakeFloor' -benchmem -cpu 1,4,16 ./client/
//
// From many goroutines, what bounds Next is the one position every caller
// claims from (BenchmarkTakeFloor/parallel): each call moves its cache
// line to its CPU. Next keeps within a few percent of that floor at every
// -cpu. It cannot go below it and keep its order promise: the IDs one
// goroutine gets increase, and a goroutine may move between CPUs between
// two calls, so an ID handed out on any CPU must be above every ID handed
// out before it on any other — a claim all callers share, once per call.
// Callers that want many IDs at once take them with NextN or NextRange:
// one claim for all of them.
func BenchmarkNext(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		for _, runLen := range []int64{4096, 1 << 20} {
			name := fmt.Sprintf("%s/run=%d", map[bool]string{false: "serial", true: "parallel"}[parallel], runLen)
			b.Run(name, func(b *testing.B) {
				c := benchClient(b)
				preload(c, int64(b.N)+1_000_000, runLen)
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
}

// BenchmarkTakeFloor is what a take cannot do without, measured beside
// BenchmarkNext: one monotonic clock read (the freshness check) and one
// atomic add on a counter every caller shares (the claim). Next's ratio
// to it is the cost of the rest of the take path.
//
//	go test -run '^$' -bench 'Next$|TakeFloor' -benchmem ./client/
func BenchmarkTakeFloor(b *testing.B) {
	c := benchClient(b)
	var claim batch
	for _, parallel := range []bool{false, true} {
		b.Run(map[bool]string{false: "serial", true: "parallel"}[parallel], func(b *testing.B) {
			if !parallel {
				var n int64
				for range b.N {
					if c.now() > 0 {
						n += claim.pos.Add(1)
					}
				}
				return
			}
			b.RunParallel(func(pb *testing.PB) {
				var n int64
				for pb.Next() {
					if c.now() > 0 {
						n += claim.pos.Add(1)
					}
				}
			})
		})
	}
}

// BenchmarkNextRange measures NextRange of a few IDs from a preloaded
// buffer of runs: one take, no RPC.
func BenchmarkNextRange(b *testing.B) {
	c := benchClient(b)
	preload(c, 16*int64(b.N)+1_000_000, 4096)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.NextRange(ctx, 16); err != nil {
			b.Fatal(err)
		}
	}
}

// benchClient is a client of no server: the preloaded buffer is all
// there is.
func benchClient(b *testing.B) *Client {
	c, err := New([]string{"127.0.0.1:1"}, WithLogger(quiet), WithMaxAge(time.Hour), WithoutHealthCheck())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// preload queues runs of runLen consecutive IDs, n IDs in all, that never
// expire, with a gap after each run as between a node's milliseconds.
func preload(c *Client, n, runLen int64) { preloadRuns(c, n, runLen, runLen) }

// preloadRuns queues runs of runLen consecutive IDs, n IDs in all, that
// never expire, with gap IDs between one run and the next.
func preloadRuns(c *Client, n, runLen, gap int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for first := uint64(1); n > 0; n -= runLen {
		c.queue = append(c.queue, &batch{first: first, n: runLen, half: -1, expire: math.MaxInt64})
		first += uint64(runLen + gap)
	}
	c.installLocked()
}

// BenchmarkNextSegment measures Next from a segment generator's runs
// while the buffer holds IDs: such a node answers a refill with one run
// of the count asked (a take spans two claims rarely), and one node's
// refills follow each other, so the buffer is preloaded with adjacent
// runs of DefaultMaxBatch (the largest refill), as prefetching leaves it
// at full load. No RPC runs during the measurement; each run installs the
// next under the lock. goroutines=16 is 16 goroutines sharing one client
// (b.N calls split between them), whatever GOMAXPROCS; ops/s is b.N over
// the elapsed time.
//
//	cd client && go test -run '^$' -bench 'NextSegment' -benchmem -benchtime 2s
func BenchmarkNextSegment(b *testing.B) {
	for _, goroutines := range []int{1, 16} {
		name := "serial"
		if goroutines > 1 {
			name = fmt.Sprintf("goroutines=%d", goroutines)
		}
		b.Run(name, func(b *testing.B) {
			c := benchClient(b)
			preloadRuns(c, int64(b.N)+DefaultMaxBatch, DefaultMaxBatch, 0)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			if goroutines == 1 {
				for range b.N {
					if _, err := c.Next(ctx); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				var wg sync.WaitGroup
				for g := range goroutines {
					n := b.N / goroutines
					if g < b.N%goroutines {
						n++
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range n {
							if _, err := c.Next(ctx); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
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
