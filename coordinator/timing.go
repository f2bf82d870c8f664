package coordinator

import (
	"fmt"
	"time"
)

// Timing holds the durations every backend and the Reserver share. The
// relations Validate checks protect availability only (one frozen
// coordinator member or a leader change is ridden out with no failed
// call); safety never depends on them.
type Timing struct {
	// LeaseTTL is how long ownership outlives its holder's silence (etcd
	// lease TTL; the ZooKeeper backend uses it as the session timeout).
	// Default 5 s; at least 2 s (etcd's smallest TTL).
	LeaseTTL time.Duration
	// ReservationWindow is how far ahead of max(L, now) the Reserver keeps
	// the reservation. Default 5 s.
	ReservationWindow time.Duration
	// Timeout bounds each coordinator call. Default 1 s.
	Timeout time.Duration
	// RefreshInterval is how often the Reserver writes (reservation plus
	// heartbeat). Default 1 s.
	RefreshInterval time.Duration
	// AllowShortWindow lifts the window relations below. Test-only: tests
	// that need a tiny window (every holder waiting on its reservation)
	// set it; a production configuration never does.
	AllowShortWindow bool
}

// DefaultTiming returns the defaults: TTL 5 s, window 5 s, timeout 1 s,
// refresh 1 s.
func DefaultTiming() Timing {
	return Timing{
		LeaseTTL:          5 * time.Second,
		ReservationWindow: 5 * time.Second,
		Timeout:           time.Second,
		RefreshInterval:   time.Second,
	}
}

// WindowSlack is the margin added to the longest coordinator stall a
// window must ride out.
const WindowSlack = 1500 * time.Millisecond

// MinWindow is the shortest reservation window Validate accepts for a
// coordinator whose longest stall without a failed call is stall (etcd:
// twice the call timeout, a timed-out call and its retry; ZooKeeper: two
// thirds of the negotiated session timeout).
func MinWindow(stall time.Duration) time.Duration { return stall + WindowSlack }

// Validate refuses out-of-range values and bad relations, naming the field.
// Errors match ErrInvalidSpec.
func (t Timing) Validate() error {
	switch {
	case t.LeaseTTL < 2*time.Second:
		return fmt.Errorf("%w: lease TTL %v must be at least 2s", ErrInvalidSpec, t.LeaseTTL)
	case t.LeaseTTL%time.Second != 0:
		return fmt.Errorf("%w: lease TTL %v must be whole seconds", ErrInvalidSpec, t.LeaseTTL)
	case t.Timeout <= 0:
		return fmt.Errorf("%w: coordinator timeout %v must be positive", ErrInvalidSpec, t.Timeout)
	case t.Timeout >= t.LeaseTTL:
		return fmt.Errorf("%w: coordinator timeout %v must be below the lease TTL %v", ErrInvalidSpec, t.Timeout, t.LeaseTTL)
	case t.RefreshInterval <= 0:
		return fmt.Errorf("%w: refresh interval %v must be positive", ErrInvalidSpec, t.RefreshInterval)
	case t.ReservationWindow <= 0:
		return fmt.Errorf("%w: reservation window %v must be positive", ErrInvalidSpec, t.ReservationWindow)
	case t.AllowShortWindow:
		return nil
	case t.ReservationWindow <= t.RefreshInterval:
		return fmt.Errorf("%w: reservation window %v must exceed the refresh interval %v", ErrInvalidSpec, t.ReservationWindow, t.RefreshInterval)
	case t.ReservationWindow < MinWindow(2*t.Timeout):
		return fmt.Errorf("%w: reservation window %v is shorter than 2 × coordinator timeout %v + %v = %v",
			ErrInvalidSpec, t.ReservationWindow, t.Timeout, WindowSlack, MinWindow(2*t.Timeout))
	}
	return nil
}
