package coordinator

import (
	"fmt"
	"time"
)

// Timing holds the durations every backend, the Reserver and a node's
// holders share. Validate is the one place their ranges and relations are
// checked (firn serve and the admin commands, server.Config.Finish and
// every backend's Config.Validate call it). The relations protect
// availability only (one frozen coordinator member or a leader change is
// ridden out with no failed call); safety never depends on them.
type Timing struct {
	// LeaseTTL is how long ownership outlives its holder's silence (etcd
	// lease TTL; the ZooKeeper backend uses it as the session timeout).
	// Default 5 s; at least 2 s (etcd's smallest TTL), whole seconds.
	LeaseTTL time.Duration
	// ReservationWindow is how far ahead of max(L, now) the Reserver keeps
	// the reservation. Default 5 s.
	ReservationWindow time.Duration
	// Timeout bounds each coordinator call. Default 1 s.
	Timeout time.Duration
	// RefreshInterval is how often the Reserver writes (reservation plus
	// heartbeat). Default 1 s.
	RefreshInterval time.Duration
	// AllowShortWindow lifts the window relations below, for tests that
	// need a tiny window (every holder waiting on its reservation); no
	// flag of the binary sets it.
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
// thirds of the negotiated session timeout, SessionStall).
func MinWindow(stall time.Duration) time.Duration { return stall + WindowSlack }

// SessionStall is how long a session-based coordinator (ZooKeeper) can go
// without a server answering before its client gives up on that server
// and fails over: two thirds of the session timeout (the client's receive
// timeout).
func SessionStall(session time.Duration) time.Duration { return session * 2 / 3 }

// TimingNames are the names a refusal calls the fields by. A program that
// reads the timing from flags passes its flag names, so that every refusal
// names the flag to change.
type TimingNames struct {
	LeaseTTL, ReservationWindow, Timeout, RefreshInterval string
}

// DefaultTimingNames are the names Validate uses.
var DefaultTimingNames = TimingNames{
	LeaseTTL:          "lease TTL",
	ReservationWindow: "reservation window",
	Timeout:           "coordinator timeout",
	RefreshInterval:   "refresh interval",
}

// A TimingError is a refused Timing. It matches ErrInvalidSpec.
type TimingError struct {
	// Field is the name (from the TimingNames used) of the field at fault.
	Field string
	// Reason says what is wrong with its value and the bound, naming the
	// other fields by the same names.
	Reason string
}

func (e *TimingError) Error() string {
	return fmt.Sprintf("%v: %s %s", ErrInvalidSpec, e.Field, e.Reason)
}

func (e *TimingError) Is(target error) bool { return target == ErrInvalidSpec }

// Validate refuses out-of-range values and bad relations, naming the
// fields by DefaultTimingNames. Errors are *TimingError.
func (t Timing) Validate() error { return t.ValidateNamed(DefaultTimingNames) }

// ValidateNamed is Validate with the fields called by n:
//
//   - the lease TTL is whole seconds, at least 2 s;
//   - the call timeout is positive and below the lease TTL;
//   - the refresh interval and the window are positive;
//   - unless AllowShortWindow: the window exceeds the refresh interval
//     and rides out two timed-out calls (MinWindow(2 × timeout)).
func (t Timing) ValidateNamed(n TimingNames) error {
	bad := func(field, format string, args ...any) error {
		return &TimingError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case t.LeaseTTL < 2*time.Second:
		return bad(n.LeaseTTL, "%v must be whole seconds, at least 2s", t.LeaseTTL)
	case t.LeaseTTL%time.Second != 0:
		return bad(n.LeaseTTL, "%v must be whole seconds, at least 2s", t.LeaseTTL)
	case t.Timeout <= 0:
		return bad(n.Timeout, "%v must be positive and below the %s %v", t.Timeout, n.LeaseTTL, t.LeaseTTL)
	case t.Timeout >= t.LeaseTTL:
		return bad(n.Timeout, "%v must be positive and below the %s %v", t.Timeout, n.LeaseTTL, t.LeaseTTL)
	case t.RefreshInterval <= 0:
		return bad(n.RefreshInterval, "%v must be positive", t.RefreshInterval)
	case t.ReservationWindow <= 0:
		return bad(n.ReservationWindow, "%v must be positive", t.ReservationWindow)
	case t.AllowShortWindow:
		return nil
	case t.ReservationWindow <= t.RefreshInterval:
		return bad(n.ReservationWindow, "%v must exceed the %s %v", t.ReservationWindow, n.RefreshInterval, t.RefreshInterval)
	case t.ReservationWindow < MinWindow(2*t.Timeout):
		return bad(n.ReservationWindow, "%v is shorter than 2 × %s %v + %v = %v",
			t.ReservationWindow, n.Timeout, t.Timeout, WindowSlack, MinWindow(2*t.Timeout))
	}
	return nil
}

// ValidateSession adds the relation of a session-based coordinator
// (ZooKeeper): the window rides out one frozen server, which the client
// waits SessionStall(session) for before it fails over. session is the
// session timeout, called sessionName in the refusal (for example
// "requested ZooKeeper session timeout"); the window is called
// n.ReservationWindow. AllowShortWindow lifts it. Errors are *TimingError.
func (t Timing) ValidateSession(session time.Duration, sessionName string, n TimingNames) error {
	if t.AllowShortWindow {
		return nil
	}
	if min := MinWindow(SessionStall(session)); t.ReservationWindow < min {
		return &TimingError{Field: n.ReservationWindow, Reason: fmt.Sprintf("%v is shorter than 2/3 of the %s %v + %v = %v",
			t.ReservationWindow, sessionName, session, WindowSlack, min)}
	}
	return nil
}
