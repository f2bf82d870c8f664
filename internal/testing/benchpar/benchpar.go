// Package benchpar runs a benchmark's body from every P at once, as
// testing.B.RunParallel does, with each goroutine counting its own calls
// in a register: RunParallel's per-goroutine counters are allocated side
// by side and can share a cache line, which two CPUs then write on every
// call — in a body of a few nanoseconds, that costs more than the body and
// hides how the body itself scales.
package benchpar

import (
	"runtime"
	"sync"
	"testing"
)

// Run calls f b.N times in all, split over GOMAXPROCS goroutines.
func Run(b *testing.B, f func()) {
	procs := runtime.GOMAXPROCS(0)
	b.ResetTimer()
	var wg sync.WaitGroup
	for p := range procs {
		n := b.N / procs
		if p < b.N%procs {
			n++
		}
		wg.Go(func() {
			for range n {
				f()
			}
		})
	}
	wg.Wait()
}
