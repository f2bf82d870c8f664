package clockguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Source names what holds a generator out of service. A generator serves
// only while no source holds a reason against it.
type Source string

// The sources the node feeds. Others may be used; these are the names the
// node, its metrics and its status page share.
const (
	SourceNTP           Source = "ntp"            // NTP offset beyond the limit, or NTP required and unreachable
	SourceClockRollback Source = "clock-rollback" // backward step beyond max-lead (generator's RollbackError)
	SourceClockRange    Source = "clock-range"    // clock outside the layout's range
	SourceClockStep     Source = "clock-step"     // forward step beyond --max-clock-offset not yet confirmed
	SourcePeers         Source = "peers"          // this node is the clock outlier among its peers
	SourceReservation   Source = "reservation"    // the coordinator cannot confirm a reservation
	SourceLease         Source = "lease"          // worker lease lost or not yet acquired
	SourceInstance      Source = "instance"       // data dir copied/moved, name held by another instance
	SourceCoordinator   Source = "coordinator"    // coordinator state recreated or rolled back
	SourceManual        Source = "manual"         // held by an operator (e.g. --rollback-recovery manual)
	// SourceClockUnchecked: nothing checks the clock (no NTP answering,
	// fewer than three live nodes for the peer check) and the node was not
	// told to serve on it anyway (--unchecked-clock-ok).
	SourceClockUnchecked Source = "clock-unchecked"
)

// State is a generator's serving state.
type State int32

// The states, in life order: starting → checking → serving ⇄ not-serving →
// draining → stopped.
const (
	StateStarting State = iota
	StateChecking
	StateServing
	StateNotServing
	StateDraining
	StateStopped
)

func (s State) String() string {
	switch s {
	case StateStarting:
		return "starting"
	case StateChecking:
		return "checking"
	case StateServing:
		return "serving"
	case StateNotServing:
		return "not-serving"
	case StateDraining:
		return "draining"
	case StateStopped:
		return "stopped"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// ErrInvalidTransition is wrapped by a lifecycle call that the current
// state does not allow (e.g. Ready after Stop).
var ErrInvalidTransition = errors.New("clockguard: invalid state transition")

// Cause is one reason held by one source.
type Cause struct {
	Source Source
	Reason string    // a human sentence, e.g. "clock rolled back 3.2s, limit 1s"
	Since  time.Time // wall reading when the source first set a reason
	Detail           // the machine-readable part (Code always set)
}

// Snapshot is a consistent view of a ServingState.
type Snapshot struct {
	Generator string
	State     State
	// Reason is the human explanation; "" while serving.
	Reason string
	// Causes are the held reasons, oldest first.
	Causes []Cause
	// Since is the wall reading when State was entered.
	Since time.Time
}

// Transition is what subscribers receive: a change of state, or (with From
// == To) a change of the reason while not serving.
type Transition struct {
	Generator string
	From, To  State
	Reason    string // Reason after the change ("" when serving)
	Source    Source // the source whose Set/Clear caused it; "" for lifecycle calls
	At        time.Time
}

// StateOption configures optional collaborators of a ServingState.
type StateOption func(*ServingState)

// WithStateClock sets the clock used to stamp transitions (default
// NewSystem()).
func WithStateClock(c Clock) StateOption { return func(s *ServingState) { s.clock = c } }

// WithStateLogger makes every transition a log line (keys generator, from,
// to, source, reason). Without it the state does not log.
func WithStateLogger(l *slog.Logger) StateOption { return func(s *ServingState) { s.log = l } }

// WithServingGate makes gate follow Serving: it is called, under the
// state's lock, with true just before the state is seen serving and with
// false just after it is seen not serving. So whatever gate opens is open
// whenever Serving reports true, and whatever it closes closes only once
// Serving reports false: a caller that checked Serving and then found the
// gate closed reads, in the state, the cause that closed it. gate must be
// quick and must not call the state. The server holds the generator's
// source with it (docs/design.md, Liveness rules).
func WithServingGate(gate func(serving bool)) StateOption {
	return func(s *ServingState) { s.gate = gate }
}

// ServingState answers, for one generator, "may it serve, and if not,
// why". Sources Set and Clear reasons; lifecycle calls (Check, Ready,
// Drain, Stop) move it through its states. Serving is one atomic load.
// All methods are safe for concurrent use.
type ServingState struct {
	generator string
	clock     Clock
	log       *slog.Logger
	gate      func(serving bool)

	snap atomic.Pointer[Snapshot] // published after every change; read lock-free

	mu      sync.Mutex // guards everything below
	state   State
	since   time.Time
	causes  []Cause
	drain   string
	subs    map[int]func(Transition)
	nextSub int

	// deliver serialises notifications in the order of the changes: it is
	// taken before mu is released, so subscribers see transitions in order.
	deliver sync.Mutex
}

// NewServingState returns the state of one generator, in StateStarting.
func NewServingState(generator string, opts ...StateOption) *ServingState {
	s := &ServingState{generator: generator, subs: map[int]func(Transition){}}
	for _, o := range opts {
		o(s)
	}
	if s.clock == nil {
		s.clock = NewSystem()
	}
	s.since, _ = s.clock.Now()
	s.publishLocked()
	return s
}

// Generator returns the generator's name.
func (s *ServingState) Generator() string { return s.generator }

// Serving reports whether the generator may serve now. It is one atomic
// load, for the request path.
func (s *ServingState) Serving() bool { return s.snap.Load().State == StateServing }

// State returns the current state.
func (s *ServingState) State() State { return s.snap.Load().State }

// Reason returns why the generator does not serve, as a human sentence
// ("" while serving). Held reasons are joined with "; ", oldest first.
func (s *ServingState) Reason() string { return s.snap.Load().Reason }

// Snapshot returns a consistent copy of the whole state.
func (s *ServingState) Snapshot() Snapshot {
	sn := *s.snap.Load()
	sn.Causes = slices.Clone(sn.Causes)
	return sn
}

// Subscribe registers f to be called on every transition, in order, on the
// goroutine that made the change. f may read the state (Serving, Reason,
// Snapshot) but must not call Set, Clear or a lifecycle method on the same
// ServingState (it would deadlock): hand such work to another goroutine.
// The returned function unsubscribes.
func (s *ServingState) Subscribe(f func(Transition)) (unsubscribe func()) {
	s.mu.Lock()
	id := s.nextSub
	s.nextSub++
	s.subs[id] = f
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.subs, id)
		s.mu.Unlock()
	}
}

// Set makes source hold reason against serving, replacing the source's
// previous reason (an empty reason is shown as the source's name). Reasons
// are recorded in every state; they decide serving once Ready has been
// called.
func (s *ServingState) Set(source Source, reason string) {
	s.set(source, reason, Detail{})
}

func (s *ServingState) set(source Source, reason string, d Detail) {
	if reason == "" {
		reason = string(source)
	}
	if d.Code == "" {
		d.Code = defaultCode(source)
	}
	s.mu.Lock()
	i := slices.IndexFunc(s.causes, func(c Cause) bool { return c.Source == source })
	switch {
	case i >= 0 && s.causes[i].Reason == reason && s.causes[i].Detail == d:
		s.mu.Unlock()
		return
	case i >= 0:
		s.causes[i].Reason, s.causes[i].Detail = reason, d
	default:
		now, _ := s.clock.Now()
		s.causes = append(s.causes, Cause{Source: source, Reason: reason, Since: now, Detail: d})
	}
	s.changedLocked(source)
}

// Clear removes source's reason, if any.
func (s *ServingState) Clear(source Source) {
	s.mu.Lock()
	i := slices.IndexFunc(s.causes, func(c Cause) bool { return c.Source == source })
	if i < 0 {
		s.mu.Unlock()
		return
	}
	s.causes = slices.Delete(s.causes, i, i+1)
	s.changedLocked(source)
}

// Update is Set(source, err.Error()) for a non-nil err and Clear(source)
// for nil: the node feeds it the latest error of each source.
func (s *ServingState) Update(source Source, err error) {
	if err == nil {
		s.Clear(source)
		return
	}
	s.Set(source, err.Error())
}

// Holds reports whether source holds a reason, and which.
func (s *ServingState) Holds(source Source) (string, bool) {
	for _, c := range s.snap.Load().Causes {
		if c.Source == source {
			return c.Reason, true
		}
	}
	return "", false
}

// Check moves starting → checking (the node's start checks: instance, NTP,
// peers, reservation). It is a no-op in checking and an error later.
func (s *ServingState) Check() error {
	s.mu.Lock()
	switch s.state {
	case StateStarting:
		s.moveLocked(StateChecking)
		return nil
	case StateChecking:
		s.mu.Unlock()
		return nil
	}
	return s.refuseLocked(StateChecking)
}

// Ready ends the start checks: from then on the state is serving exactly
// while no source holds a reason. It is a no-op once serving or
// not-serving, and an error after Drain or Stop.
func (s *ServingState) Ready() error {
	s.mu.Lock()
	switch s.state {
	case StateStarting, StateChecking:
		s.moveLocked(s.openStateLocked())
		return nil
	case StateServing, StateNotServing:
		s.mu.Unlock()
		return nil
	}
	return s.refuseLocked(StateServing)
}

// Drain stops serving for good (shutdown has begun); reason says why. It is
// a no-op when already draining and an error after Stop.
func (s *ServingState) Drain(reason string) error {
	s.mu.Lock()
	switch s.state {
	case StateDraining:
		s.mu.Unlock()
		return nil
	case StateStopped:
		return s.refuseLocked(StateDraining)
	}
	s.drain = reason
	s.moveLocked(StateDraining)
	return nil
}

// Stop moves to the final state, from any state. Later calls are no-ops.
func (s *ServingState) Stop() {
	s.mu.Lock()
	if s.state == StateStopped {
		s.mu.Unlock()
		return
	}
	s.moveLocked(StateStopped)
}

// openStateLocked is the state after Ready, given the held reasons.
func (s *ServingState) openStateLocked() State {
	if len(s.causes) == 0 {
		return StateServing
	}
	return StateNotServing
}

// changedLocked follows a change of the held reasons; it releases mu.
func (s *ServingState) changedLocked(source Source) {
	from := s.state
	to := from
	if from == StateServing || from == StateNotServing {
		to = s.openStateLocked()
	}
	old := s.snap.Load().Reason
	if to != from {
		s.state = to
		s.since, _ = s.clock.Now()
	}
	s.publishLocked()
	if to == from && s.snap.Load().Reason == old {
		s.mu.Unlock()
		return
	}
	s.notifyLocked(from, to, source)
}

// moveLocked enters state to; it releases mu.
func (s *ServingState) moveLocked(to State) {
	from := s.state
	s.state = to
	s.since, _ = s.clock.Now()
	s.publishLocked()
	s.notifyLocked(from, to, "")
}

// refuseLocked returns the error for a transition the state does not allow;
// it releases mu.
func (s *ServingState) refuseLocked(to State) error {
	from := s.state
	s.mu.Unlock()
	return fmt.Errorf("%w: generator %q cannot go from %s to %s", ErrInvalidTransition, s.generator, from, to)
}

// publishLocked stores a fresh snapshot for the lock-free readers, opening
// the gate before a serving snapshot and closing it after the first one
// that does not serve.
func (s *ServingState) publishLocked() {
	sn := &Snapshot{Generator: s.generator, State: s.state, Causes: slices.Clone(s.causes), Since: s.since}
	sn.Reason = s.reasonLocked()
	was := false
	if old := s.snap.Load(); old != nil {
		was = old.State == StateServing
	}
	now := sn.State == StateServing
	if s.gate != nil && now && !was {
		s.gate(true)
	}
	s.snap.Store(sn)
	if s.gate != nil && !now && was {
		s.gate(false)
	}
}

func (s *ServingState) reasonLocked() string {
	held := make([]string, len(s.causes))
	for i, c := range s.causes {
		held[i] = c.Reason
	}
	joined := strings.Join(held, "; ")
	switch s.state {
	case StateServing:
		return ""
	case StateNotServing:
		return joined
	case StateDraining:
		if s.drain != "" {
			return "draining: " + s.drain
		}
		return "draining"
	case StateStopped:
		return "stopped"
	}
	if joined != "" {
		return s.state.String() + ": " + joined
	}
	return s.state.String()
}

// notifyLocked hands the transition to the logger and the subscribers, in
// change order; it releases mu.
func (s *ServingState) notifyLocked(from, to State, source Source) {
	sn := s.snap.Load()
	tr := Transition{Generator: s.generator, From: from, To: to, Reason: sn.Reason, Source: source, At: sn.Since}
	if from == to {
		tr.At, _ = s.clock.Now()
	}
	subs := make([]func(Transition), 0, len(s.subs))
	for _, id := range slices.Sorted(maps.Keys(s.subs)) {
		subs = append(subs, s.subs[id]) // in subscription order
	}
	s.deliver.Lock()
	s.mu.Unlock()
	defer s.deliver.Unlock()
	if s.log != nil {
		level := slog.LevelInfo
		if to == StateNotServing {
			level = slog.LevelWarn
		}
		s.log.Log(context.Background(), level, "clockguard: generator state", "generator", s.generator,
			"from", from.String(), "to", to.String(), "source", string(source), "reason", tr.Reason)
	}
	for _, f := range subs {
		f(tr)
	}
}
