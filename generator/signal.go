package generator

import (
	"sync"
	"sync/atomic"
)

// signal wakes waiters: a wait takes the current channel (wait) before
// the clock reading it is sized from, and fire closes that channel and
// puts a new one in its place, so that no wake-up between the reading and
// the wait is lost. The zero value is ready to use.
type signal struct {
	mu sync.Mutex
	ch atomic.Pointer[chan struct{}]
}

// wait returns the channel the next fire closes.
func (s *signal) wait() <-chan struct{} {
	if p := s.ch.Load(); p != nil {
		return *p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch.Load() == nil {
		ch := make(chan struct{})
		s.ch.Store(&ch)
	}
	return *s.ch.Load()
}

// fire wakes every wait taken so far.
func (s *signal) fire() {
	ch := make(chan struct{})
	s.mu.Lock()
	if old := s.ch.Swap(&ch); old != nil {
		close(*old)
	}
	s.mu.Unlock()
}
