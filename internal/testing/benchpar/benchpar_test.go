package benchpar

import (
	"sync/atomic"
	"testing"
)

// Run calls the body b.N times in all.
func TestRunCallsN(t *testing.T) {
	var calls atomic.Int64
	var n int
	testing.Benchmark(func(b *testing.B) {
		calls.Store(0)
		n = b.N
		Run(b, func() { calls.Add(1) })
	})
	if got := calls.Load(); got != int64(n) || n == 0 {
		t.Fatalf("%d calls for b.N %d", got, n)
	}
}
