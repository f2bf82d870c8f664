package client

import "time"

// Clock is the client's time source. One call returns two readings taken
// at the same instant: the wall-clock time and a monotonic reading (time
// since an arbitrary origin fixed for the life of the clock). The client
// uses only the monotonic reading: it ages buffered batches and measures
// the caller's rate with it.
//
// The method set is the one firn's clockguard package implements, so its
// clocks (the system clock, the manual test clock) satisfy it without an
// import.
type Clock interface {
	Now() (wall time.Time, mono time.Duration)
}

// systemClock is the default Clock: the machine's clock. It is the only
// place in this package that reads the wall clock (once, for its origin);
// its monotonic reading is time.Since that origin. (Attempts at endpoints
// are timed on the machine's monotonic clock, as the callers' context
// deadlines are, whatever Clock is injected.)
type systemClock struct {
	origin time.Time
}

func newSystemClock() *systemClock { return &systemClock{origin: time.Now()} }

// Now implements Clock.
func (s *systemClock) Now() (time.Time, time.Duration) {
	mono := time.Since(s.origin)
	return s.origin.Add(mono).Round(0), mono
}

// now is the monotonic reading, in nanoseconds, that batches expire by.
// The machine's clock is read directly (time.Since on a monotonic origin
// reads no wall clock); an injected Clock through its interface.
func (c *Client) now() int64 {
	if c.sys != nil {
		return int64(time.Since(c.sys.origin))
	}
	_, mono := c.clock.Now()
	return int64(mono)
}
