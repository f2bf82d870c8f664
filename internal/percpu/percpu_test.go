package percpu

import (
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/firnid/firn/internal/testing/benchpar"
)

type cell struct {
	n atomic.Uint64
	_ [CacheLine - 8]byte
}

func sum(s *Set[cell]) uint64 {
	var n uint64
	all := s.All()
	for i := range all {
		n += all[i].n.Load()
	}
	return n
}

// Adds from many goroutines, each to the copy at hand, all count once
// in the sum of the copies.
func TestSetCounts(t *testing.T) {
	s := NewSet[cell]()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for range 10000 {
				c := s.Get()
				c.n.Add(uint64(g + 1))
				s.Put(c)
			}
		})
	}
	wg.Wait()
	if got, want := sum(s), uint64(10000*16*17/2); got != want {
		t.Fatalf("sum = %d, want %d", got, want)
	}
}

// Each copy is on lines of its own: copies written on different CPUs
// share none.
func TestSetLines(t *testing.T) {
	all := NewSet[cell]().All()
	if len(all) == 0 || len(all)&(len(all)-1) != 0 {
		t.Fatalf("%d copies, want a power of two", len(all))
	}
	for i := range all {
		if a := uintptr(unsafe.Pointer(&all[i])); a%CacheLine != 0 {
			t.Fatalf("copy %d at %#x, not on a line of its own", i, a)
		}
	}
}

// A T that would share lines is refused when the set is made.
func TestSetRefusesUnpadded(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewSet of a 24-byte type: no panic")
		}
	}()
	NewSet[[3]uint64]()
}

// BenchmarkSet is a count added to the copy at hand from every CPU at
// once, against one shared atomic counter:
//
//	go test -run '^$' -bench Set -cpu 1,2 ./internal/percpu/
func BenchmarkSet(b *testing.B) {
	b.Run("percpu", func(b *testing.B) {
		s := NewSet[cell]()
		benchpar.Run(b, func() {
			c := s.Get()
			c.n.Add(1)
			s.Put(c)
		})
	})
	b.Run("shared", func(b *testing.B) {
		var c struct {
			_ [CacheLine]byte
			n atomic.Uint64
			_ [CacheLine]byte
		}
		benchpar.Run(b, func() { c.n.Add(1) })
	})
}
