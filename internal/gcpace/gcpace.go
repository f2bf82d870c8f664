// Package gcpace keeps a process with a small live heap from collecting
// garbage every few megabytes: it raises GOGC so that a collection starts
// no sooner than MinGrowth bytes after the last one, and leaves it at 100
// once the live heap is large enough for that by itself.
//
// A node's live heap is a few megabytes (its coordinator client, metrics,
// gRPC), and each unary call allocates about a kilobyte, so at GOGC 100 it
// collected about every 3,000 calls, marking its whole heap each time:
// about 8 % of its CPU per call. The heap goal is max(2 × live, live +
// MinGrowth), never GOGC's growth without bound: a node holding a large
// live heap (a sequence generator's keys) still collects at GOGC 100.
package gcpace

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// DefaultMinGrowth is the node's: a collection per 64 MiB allocated at
// least (about 60,000 unary calls). Against a no-op gRPC server at the
// same GOGC and live heap, the node's CPU per unary call was 1.17× at
// GOGC 100, 1.08× with 32 MiB and 1.03× with about 80 MiB (2 CPUs, 16
// callers): what is left of its collections' cost is marking its own
// heap, which the growth spreads over more calls. The price is memory:
// the heap reaches its live size plus this before each collection.
const DefaultMinGrowth = 64 << 20

// Percent is the GOGC that grows a heap of live bytes by at least
// minGrowth before the next collection: 100 where that already does, or
// where live is not known yet (0: no collection yet — at a high GOGC the
// runtime's first goal, 4 MB × GOGC / 100, would let start-up grow the
// heap by hundreds of megabytes), at most maxPercent.
func Percent(live, minGrowth uint64) int {
	if live == 0 {
		return 100
	}
	p := (minGrowth*100 + live - 1) / live
	return int(min(max(p, 100), maxPercent))
}

// maxPercent bounds the GOGC set, for a heap that is nearly empty.
const maxPercent = 10000

// Start sets GOGC from the live heap after every collection until ctx
// ends, unless the environment sets GOGC (the operator's choice wins). It
// reports whether it runs.
//
// After every collection, not on a timer: GOGC multiplies the live heap,
// so a GOGC sized for a small heap, kept while the heap grows (a burst of
// calls in flight), would let the next goal grow by the same factor. Set
// as each collection ends, the goal is the live heap just marked plus
// max(it, minGrowth) in every cycle.
func Start(ctx context.Context, minGrowth uint64) bool {
	if _, set := os.LookupEnv("GOGC"); set || minGrowth == 0 {
		return false
	}
	p := &pacer{minGrowth: minGrowth, read: liveHeap, set: debug.SetGCPercent}
	p.adjust()
	p.armAfterGC(ctx)
	return true
}

// armAfterGC runs adjust once the next collection has ended, and arms
// itself again: the cleanup of an object dropped at once runs after the
// collection that finds it unreachable. The object is 64 bytes, never
// one the tiny allocator packs with others (their cleanups may not run).
func (p *pacer) armAfterGC(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	runtime.AddCleanup(new([8]uint64), func(ctx context.Context) {
		p.adjust()
		p.armAfterGC(ctx)
	}, ctx)
}

// pacer is Start's state: the GOGC last set.
type pacer struct {
	minGrowth uint64
	read      func() uint64
	set       func(int) int
	percent   int
}

// adjust sets GOGC for the live heap read now, when it moved by more than
// a tenth (each SetGCPercent recomputes the runtime's goal). Only the
// cleanup goroutine calls it after Start.
func (p *pacer) adjust() {
	want := Percent(p.read(), p.minGrowth)
	if p.percent != 0 && want*10 >= p.percent*9 && want*10 <= p.percent*11 {
		return
	}
	p.set(want)
	p.percent = want
}

// liveHeap is the heap marked live by the last collection.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
