// Package percpu keeps values that calls on every CPU write — the gRPC
// metrics' counts on the request path — as a set of copies, each P
// keeping one at hand: a write goes to the copy of the P it runs on,
// found in that CPU's cache, instead of moving one shared cache line
// between the CPUs on every call. A read sums the copies.
package percpu

import (
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// CacheLine is the size values are padded to, so that copies written on
// different CPUs never share a line.
const CacheLine = 64

// Set is n copies of a T, handed out one per P. sync.Pool keeps an
// object per P at hand: a copy got and put back on one P stays that P's.
// A copy the pool drops (it empties itself over two collections) is
// handed out again, round-robin; the copies themselves are never dropped.
// Two callers may hold one copy at once (a caller that waits lets others
// on its P take the next copy), so a T is written atomically. A T's size
// is a multiple of CacheLine; the copies are then each on lines of their
// own.
type Set[T any] struct {
	all  []T
	pool sync.Pool
	next atomic.Uint32
}

// NewSet returns a Set with several copies per CPU (GOMAXPROCS when it is
// made), a power of two, at most 256. It panics when a T's size is not a
// multiple of CacheLine.
func NewSet[T any]() *Set[T] {
	if size := unsafe.Sizeof(*new(T)); size == 0 || size%CacheLine != 0 {
		panic(fmt.Sprintf("percpu: a %T is %d bytes, not a multiple of %d", *new(T), size, CacheLine))
	}
	n := 1 << bits.Len(uint(min(4*runtime.GOMAXPROCS(0), 256)-1))
	s := &Set[T]{all: make([]T, n)}
	s.pool.New = func() any { return &s.all[s.next.Add(1)&uint32(n-1)] }
	return s
}

// Get returns the copy at hand on the caller's P; Put it back when done.
func (s *Set[T]) Get() *T { return s.pool.Get().(*T) }

// Put returns a copy Get gave.
func (s *Set[T]) Put(v *T) { s.pool.Put(v) }

// All is every copy, for reading (atomically) and summing.
func (s *Set[T]) All() []T { return s.all }
