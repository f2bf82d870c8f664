package generator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the clock the generator reads: the wall reading (no monotonic
// component) and a monotonic reading taken at the same instant. The
// clockguard package's clocks satisfy it.
type Clock interface {
	Now() (wall time.Time, mono time.Duration)
}

// Errors returned by a Generator. Typed errors below also match these with
// errors.Is.
var (
	// ErrRetired: the generator's lease is over; build a new generator
	// from a fresh acquisition.
	ErrRetired = errors.New("generator: retired")
	// ErrRollback: the clock stepped back further than MaxLead.
	ErrRollback = errors.New("generator: clock rolled back")
	// ErrClockRange: the clock lies outside the layout's range.
	ErrClockRange = errors.New("generator: clock outside layout range")
	// ErrReservation: the next time needed lies past the reservation and
	// the reservation did not move in time.
	ErrReservation = errors.New("generator: reservation exhausted")
	// ErrAhead: the logical time is further ahead of the clock than
	// MaxLead allows and the wait would outlast the caller's deadline.
	ErrAhead = errors.New("generator: logical time ahead of the clock")
	// ErrForwardStep: the clock stepped forward further than
	// MaxForwardStep and the step was not confirmed (ConfirmClock).
	ErrForwardStep = errors.New("generator: clock stepped forward")
	// ErrHeld: the owner holds the generator out of service (Hold); a
	// call that would produce or wait returns it at once.
	ErrHeld = errors.New("generator: held out of service")
	// ErrConfig marks a refused Config.
	ErrConfig = errors.New("generator: invalid config")
)

// RollbackError reports a backward step of the wall clock larger than
// MaxLead. The generator returns it until its logical time is within Limit
// of the clock again.
type RollbackError struct {
	Step  time.Duration // size of the backward step(s) detected
	Limit time.Duration // MaxLead
	// RetryAfter is how long the clock, running on from this reading,
	// takes to bring the last issued time back within MaxLead, when the
	// generator serves again by itself (zero: unknown).
	RetryAfter time.Duration
}

func (e *RollbackError) Error() string {
	return fmt.Sprintf("clock rolled back %v, limit %v", e.Step.Round(time.Millisecond), e.Limit)
}

// Is makes errors.Is(err, ErrRollback) true.
func (e *RollbackError) Is(target error) bool { return target == ErrRollback }

// RangeError reports a clock reading outside the layout's range.
type RangeError struct {
	Clock      time.Time
	Epoch, End time.Time
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("clock outside layout range: %s not in [%s, %s)",
		formatTime(e.Clock), formatTime(e.Epoch), formatTime(e.End))
}

// Is makes errors.Is(err, ErrClockRange) true.
func (e *RangeError) Is(target error) bool { return target == ErrClockRange }

// ReservationError reports that the time needed lies past the reservation.
type ReservationError struct {
	Need, Reserved int64 // time-field values
	Err            error // why the wait ended (the context's error)
}

func (e *ReservationError) Error() string {
	return fmt.Sprintf("reservation exhausted: need time %d, reserved up to %d", e.Need, e.Reserved)
}

// Is makes errors.Is(err, ErrReservation) true.
func (e *ReservationError) Is(target error) bool { return target == ErrReservation }

// Unwrap returns the context error that ended the wait.
func (e *ReservationError) Unwrap() error { return e.Err }

// AheadError reports a wait for the clock that would outlast the
// caller's deadline (or that its context ended): the generator has used
// its lead — more IDs asked of it than its layout issues in the time, or a
// clock that stepped back within max-lead — and the IDs asked for come
// only as the clock advances. Lead is how far the logical time already
// issued stands ahead of the clock, Limit the max-lead, Wait the wait the
// call would have needed.
type AheadError struct {
	Lead, Limit, Wait time.Duration
	Err               error
}

func (e *AheadError) Error() string {
	if e.Wait > 0 && errors.Is(e.Err, context.DeadlineExceeded) {
		return fmt.Sprintf("logical time %v ahead of the clock (max-lead %v): the IDs asked for need %v more of the clock, past the caller's deadline",
			e.Lead.Round(time.Millisecond), e.Limit, e.Wait.Round(time.Microsecond))
	}
	return fmt.Sprintf("logical time %v ahead of the clock (max-lead %v): waiting for the clock: %v", e.Lead.Round(time.Millisecond), e.Limit, e.Err)
}

// Is makes errors.Is(err, ErrAhead) true.
func (e *AheadError) Is(target error) bool { return target == ErrAhead }

// Unwrap returns the context error.
func (e *AheadError) Unwrap() error { return e.Err }

// ForwardStepError reports a forward step of the wall clock larger than
// MaxForwardStep that nobody confirmed yet. The generator issues no ID
// stamped with the stepped clock: it returns this error until ConfirmClock
// adopts the new reading, or the clock comes back within the limit of the
// reading before the step.
type ForwardStepError struct {
	Step  time.Duration // size of the forward step, > 0
	Limit time.Duration // MaxForwardStep
}

func (e *ForwardStepError) Error() string {
	return fmt.Sprintf("clock stepped forward %v, beyond %v: not confirmed by NTP or the peer median", e.Step.Round(time.Millisecond), e.Limit)
}

// Is makes errors.Is(err, ErrForwardStep) true.
func (e *ForwardStepError) Is(target error) bool { return target == ErrForwardStep }

// FastClock is an optional Clock extension: a monotonic-only reading that
// costs one clock read instead of two. ok is false when the clock cannot
// offer it (then the generator reads the clock in full every time).
type FastClock interface {
	FastMono() (mono time.Duration, ok bool)
}

// NoReservation is a Reserved bound that never binds, for uses with no
// coordinator (benchmarks, tests of pure generation).
const NoReservation int64 = math.MaxInt64

// Config configures one Generator, which serves one lease for life.
type Config struct {
	// Layout of the IDs. Required; must pass Validate.
	Layout Layout
	// Worker and Datacenter fill their fields. Required to fit them.
	Worker, Datacenter uint64
	// Clock is read once per call. Required.
	Clock Clock
	// Floor: the generator never emits a time <= Floor (the reservation
	// of the previous holder of this worker, or the node's own). -1 when
	// there is none.
	Floor int64
	// Reserved is the largest time the coordinator has durably reserved
	// for this holder; the generator never passes it. Raise it with
	// SetReserved. -1 means nothing is reserved yet: no ID is issued
	// before the first SetReserved. Use NoReservation only where no
	// coordinator exists.
	Reserved int64
	// MaxLead bounds how far the logical time may run ahead of the clock
	// (borrowing on sequence exhaustion, and absorbing backward steps).
	// Zero means the default: max(1s, 2 units). At least 2 units.
	MaxLead time.Duration
	// MaxForwardStep, when positive, is the largest forward step of the
	// wall clock (against the monotonic clock) the generator follows by
	// itself. A larger one is refused with *ForwardStepError until
	// ConfirmClock is called or the clock comes back. Zero follows every
	// forward step.
	MaxForwardStep time.Duration
}

// DefaultMaxLead is max(1s, 2 units) for the layout.
func DefaultMaxLead(l Layout) time.Duration { return max(time.Second, 2*l.Unit) }

// Generator issues IDs for one worker (one lease). It is safe for
// concurrent use. The zero value is not usable: create one with New.
type Generator struct {
	layout    Layout
	clock     Clock
	worker    uint64
	dc        uint64
	floor     int64
	maxLead   time.Duration
	maxFwd    time.Duration
	leadUnits int64
	maxSeq    uint64
	maxTime   int64
	end       time.Time
	retired   atomic.Bool

	// The fields a call writes under mu follow it, together, and the
	// read-only ones (retired included: an atomic written once) come
	// before: under contention each hand-off of the mutex moves what the
	// last holder wrote to the next holder's core, and fields written by
	// a call scattered over more cache lines cost more per hand-off.
	// Grouped so, Next from 64 goroutines on two CPUs keeps 100.2 % of the
	// layout's limit (94.7–97.4 % before; test/bench BenchmarkNextID).
	mu   sync.Mutex
	last int64         // L: the logical time of the last ID issued
	seq  uint64        // next sequence number within last
	base time.Duration // wall − mono at the last reading within the lead (first: at New)
	top  time.Duration // the largest wall − mono adopted: forward steps are measured from it

	reserved atomic.Int64
	issued   uint64
	full     bool // the last read was a full one (not extrapolated)
	// unit cache for units(): the time-field value whose unit began at
	// unitStart (Unix ns).
	unit, unitStart int64
	haveUnit        bool
	// anchor: the last full clock reading; within monoWindow of it, a
	// monotonic-only reading extrapolates the wall clock (fast clocks only).
	anchorWall int64 // Unix ns
	anchorMono time.Duration
	haveAnchor bool

	fast       FastClock // nil unless the clock offers cheap monotonic reads
	spin       bool      // the fast clock is a real one: short clock waits spin
	monoWindow time.Duration
	epochNs    int64
	unitNs     int64
	timeShift  uint8
	seqShift   uint8  // position of the sequence field (0 unless the layout puts it above the node bits)
	nodeBits   uint64 // the datacenter and worker fields, in place

	held  atomic.Bool   // Hold: refuse what would produce or wait (ErrHeld)
	waits atomic.Uint64 // waits on the reservation

	// wake is closed and replaced on every raise of the reservation, every
	// Wake (a clock step, a change of serving) and on Retire: every wait
	// watches the channel current when its clock reading was taken, and
	// re-reads the clock when it closes.
	wake    signal
	retireC chan struct{}
	// owner is the Wide this generator is a member of: its waiters wake
	// with the member's, and its hold is the member's (heldNow).
	owner atomic.Pointer[Wide]
}

// New returns a generator for one lease. It returns an error wrapping
// ErrConfig (or ErrLayout) when the layout is invalid for the clock's
// current reading, Worker or Datacenter do not fit, Clock is nil, MaxLead is
// below 2 units, or Floor and Reserved lie outside the layout's range.
func New(cfg Config) (*Generator, error) {
	if cfg.Clock == nil {
		return nil, fmt.Errorf("%w: Clock is nil", ErrConfig)
	}
	wall, mono := cfg.Clock.Now()
	l := cfg.Layout
	if err := l.Validate(wall); err != nil {
		return nil, err
	}
	if cfg.Worker > maxOf(l.WorkerBits) {
		return nil, fmt.Errorf("%w: worker %d exceeds %d (%d bits)", ErrConfig, cfg.Worker, maxOf(l.WorkerBits), l.WorkerBits)
	}
	if cfg.Datacenter > maxOf(l.DatacenterBits) {
		return nil, fmt.Errorf("%w: datacenter %d exceeds %d (%d bits)", ErrConfig, cfg.Datacenter, maxOf(l.DatacenterBits), l.DatacenterBits)
	}
	lead := cfg.MaxLead
	if lead == 0 {
		lead = DefaultMaxLead(l)
	}
	if lead < 2*l.Unit {
		return nil, fmt.Errorf("%w: max-lead %v is below 2 time units (%v)", ErrConfig, lead, 2*l.Unit)
	}
	if cfg.Floor < -1 || cfg.Floor >= l.MaxTime() {
		return nil, fmt.Errorf("%w: floor %d outside [-1, %d)", ErrConfig, cfg.Floor, l.MaxTime())
	}
	if cfg.Reserved < -1 {
		return nil, fmt.Errorf("%w: reserved %d is below -1 (nothing reserved)", ErrConfig, cfg.Reserved)
	}
	if cfg.MaxForwardStep < 0 {
		return nil, fmt.Errorf("%w: max forward step %v is negative", ErrConfig, cfg.MaxForwardStep)
	}
	g := &Generator{
		layout:    l,
		clock:     cfg.Clock,
		worker:    cfg.Worker,
		dc:        cfg.Datacenter,
		floor:     cfg.Floor,
		maxLead:   lead,
		maxFwd:    cfg.MaxForwardStep,
		leadUnits: int64(lead / l.Unit),
		maxSeq:    l.MaxSequence(),
		maxTime:   l.MaxTime(),
		end:       l.End(),
		last:      -1,
		seq:       0,
		retireC:   make(chan struct{}),
	}
	// The reading taken here is the first baseline: a step between New
	// and the first call is measured against it.
	g.base = time.Duration(wall.UnixNano()) - mono
	g.top = g.base
	g.reserved.Store(cfg.Reserved)
	g.epochNs, g.unitNs = l.Epoch.UnixNano(), int64(l.Unit)
	g.timeShift = l.DatacenterBits + l.WorkerBits + l.SequenceBits
	g.seqShift = l.seqShift()
	g.nodeBits = l.encode(0, cfg.Datacenter, cfg.Worker, 0)
	if fc, ok := cfg.Clock.(FastClock); ok {
		g.fast = fc
		g.monoWindow = min(l.Unit, time.Millisecond)
		// A clock whose monotonic reading moves by itself: short waits for
		// it are spun out (see next).
		_, g.spin = fc.FastMono()
	}
	return g, nil
}

// Layout returns the generator's layout.
func (g *Generator) Layout() Layout { return g.layout }

// Worker returns the worker field value.
func (g *Generator) Worker() uint64 { return g.worker }

// Datacenter returns the datacenter field value.
func (g *Generator) Datacenter() uint64 { return g.dc }

// Floor returns the floor the generator was built with.
func (g *Generator) Floor() int64 { return g.floor }

// MaxLead returns the lead limit in force.
func (g *Generator) MaxLead() time.Duration { return g.maxLead }

// Highest is the time field of the last ID issued, or -1 before the first.
// After Retire returns, it is final: no later ID exists.
func (g *Generator) Highest() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last
}

// Logical is the logical time L the generator stands at: the time of the
// last ID, or, before the first, the floor. Reservations are kept ahead of
// max(Logical, now).
func (g *Generator) Logical() int64 { return max(g.Highest(), g.floor) }

// Issued counts the IDs issued.
func (g *Generator) Issued() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.issued
}

// ReservationWaits counts the calls that waited on the reservation.
func (g *Generator) ReservationWaits() uint64 { return g.waits.Load() }

// Reserved returns the reservation bound in force.
func (g *Generator) Reserved() int64 { return g.reserved.Load() }

// Lead returns how far the logical time stands ahead of the given wall
// reading (negative when behind).
func (g *Generator) Lead(wall time.Time) time.Duration {
	return g.layout.UnitStart(g.Logical()).Sub(wall)
}

// SetReserved raises the reservation bound to r, waking waiters. A lower r
// is ignored: a reservation never moves back under a running generator.
func (g *Generator) SetReserved(r int64) {
	for {
		cur := g.reserved.Load()
		if r <= cur {
			return
		}
		if g.reserved.CompareAndSwap(cur, r) {
			break
		}
	}
	g.Wake()
}

// Wake makes every waiting call re-read the clock and decide again. The
// owner calls it on any change a wait may have been sized from: a step of
// the clock either way, a change of the serving state. (A raise of the
// reservation and Retire wake waiters by themselves.)
func (g *Generator) Wake() {
	g.wake.fire()
	if w := g.owner.Load(); w != nil {
		w.Wake()
	}
}

// Hold holds the generator out of service (on) or lets it serve again.
// While held, a call that cannot be answered by Next's fast path — one
// that would wait, or a batch — returns ErrHeld, and every waiting call
// wakes and returns it: the owner holds a generator whose node stopped
// serving, so that nothing waits on its behalf (docs/design.md, Liveness
// rules). A member of a Wide is held by the Wide's Hold as well.
func (g *Generator) Hold(on bool) {
	g.held.Store(on)
	g.Wake()
}

// waker returns the channel the next Wake closes. A wait takes it before
// its clock reading, so that no wake-up between the reading and the wait
// is lost.
func (g *Generator) waker() <-chan struct{} { return g.wake.wait() }

// ConfirmClock adopts the clock's current reading as the baseline for
// steps: after a forward step beyond MaxForwardStep was confirmed (by NTP
// or the peer median), the generator follows it. Waiters wake.
func (g *Generator) ConfirmClock() {
	g.mu.Lock()
	wall, mono := g.fullRead()
	g.base = time.Duration(wall) - mono
	g.top = g.base
	g.mu.Unlock()
	g.Wake()
}

// Retire ends the generator: every later call returns ErrRetired and
// waiters wake. When Retire returns no ID is being issued, so Highest is
// final.
func (g *Generator) Retire() {
	g.mu.Lock()
	if !g.retired.Swap(true) {
		close(g.retireC)
	}
	g.mu.Unlock()
	if w := g.owner.Load(); w != nil {
		w.Wake()
	}
}

// Retired reports whether Retire was called.
func (g *Generator) Retired() bool { return g.retired.Load() }

// waitKind says what a call must wait for when it issued nothing.
type waitKind uint8

const (
	waitNone waitKind = iota
	waitClock
	waitReservation
)

// wait is what fill asks for when it issued nothing and found no error.
type wait struct {
	kind waitKind
	d    time.Duration // waitClock: how long until the clock allows more
	need int64         // waitReservation: the time the reservation must reach
}

// Next returns one ID. It waits (honouring ctx) while the logical time is
// more than MaxLead ahead of the clock after a step back of at most
// MaxLead, while the sequence is exhausted at the lead limit, and while the
// reservation has not reached the next time; it returns *RollbackError,
// *RangeError, *ReservationError, *AheadError or ErrRetired otherwise.
func (g *Generator) Next(ctx context.Context) (uint64, error) {
	// The fast path: the case where fill would issue one ID at once
	// (within the lead, the sequence, the reservation and the layout),
	// written out so the common call costs one clock read and a lock.
	// Everything else goes through fill.
	//
	// The monotonic reading is taken before the lock, so that the critical
	// section holds no clock read: with many callers its length is what
	// the mutex serialises. A reading taken before another caller's full
	// one may lie behind the anchor; it extrapolates backwards as well as
	// forwards (the same wall-to-monotonic relation), and is only ever
	// older than the truth, which the policy tolerates (L never goes back;
	// the lead only looks larger). The slow path reads again under the lock.
	var m time.Duration
	var mok bool
	if g.fast != nil {
		m, mok = g.fast.FastMono()
	}
	g.mu.Lock()
	if !g.retired.Load() {
		var wall int64
		var mono time.Duration
		extrapolated := false
		if mok {
			wall, extrapolated = g.extrapolate(m)
			mono = m
		}
		if !extrapolated {
			wall, mono = g.fullRead()
		}
		now := g.units(wall)
		L, seq := g.last, g.seq
		if now > L {
			L, seq = now, 0
		}
		off := time.Duration(wall) - mono
		if now >= 0 && L > g.floor && L-now <= g.leadUnits && seq <= g.maxSeq &&
			L <= g.maxTime && reserved(L, g.reserved.Load()) && (g.maxFwd == 0 || off-g.top <= g.maxFwd) {
			if g.full {
				g.base = off
				g.top = max(g.top, off)
			}
			g.last, g.seq = L, seq+1
			g.issued++
			id := uint64(L)<<g.timeShift | g.nodeBits | seq<<g.seqShift
			g.mu.Unlock()
			return id, nil
		}
		// Not at once: fill decides, still under the lock, and a short
		// clock wait is spun out here, so that the unit's first ID goes
		// to this caller without a second trip through the mutex.
		var one [1]uint64
		if extrapolated {
			wall, mono = g.read() // fresh, and in order with the readings fill saw
		}
		n, w, err := g.fill(wall, mono, one[:], g.leadUnits)
		n, _, err = g.spinOut(n, w, err, one[:])
		g.mu.Unlock()
		if n == 1 || err != nil {
			return one[0], err
		}
	} else {
		g.mu.Unlock()
	}
	var one [1]uint64
	if _, err := g.nextBatch(ctx, one[:], true, g.leadUnits); err != nil {
		return 0, err
	}
	return one[0], nil
}

// NextBatch fills dst with as many IDs as the current time unit allows, with
// one clock read, and returns how many it wrote (at least one unless it
// returns an error). The IDs increase. It waits and fails as Next does.
func (g *Generator) NextBatch(ctx context.Context, dst []uint64) (int, error) {
	return g.nextBatch(ctx, dst, false, g.leadUnits)
}

// TryBulk is TryBatch for a large request: it leaves the last unit of the
// lead (bulkLead) to NextBatch, Next and TryBatch, so that while bulk
// callers keep the generator at its lead limit a small caller (or the
// ring's filler) still finds IDs without waiting for the clock. The limit
// is only lower, never higher: what NextBatch guarantees holds. It returns
// 0 (and no error) when more would need a wait; AwaitBulk waits for that.
func (g *Generator) TryBulk(dst []uint64) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	n, _, _, err := g.next(dst, false, g.bulkLead())
	return n, err
}

// AwaitBulk waits until TryBulk can produce: for the clock or the
// reservation, as NextBatch waits (ctx's deadline, Wake, Hold, Retire).
// It produces nothing.
func (g *Generator) AwaitBulk(ctx context.Context) error {
	for {
		wk := g.waker()
		_, w, wall, err := g.next(nil, false, g.bulkLead())
		if err != nil {
			return err
		}
		switch w.kind {
		case waitClock:
			if err := g.sleep(ctx, w.d, wk); err != nil {
				if errors.Is(err, ErrRetired) {
					return err
				}
				return &AheadError{Lead: g.Lead(time.Unix(0, wall)), Limit: g.maxLead, Wait: w.d, Err: err}
			}
		case waitReservation:
			if err := g.awaitReservation(ctx, w.need, wk); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// bulkLead is the lead limit of TryBulk, in units: one unit short of the
// generator's when the lead spans at least bulkMinLead units (a coarse
// layout, whose lead is a few long units, keeps them all for bulk).
func (g *Generator) bulkLead() int64 {
	if g.leadUnits >= bulkMinLead {
		return g.leadUnits - 1
	}
	return g.leadUnits
}

// bulkMinLead is the smallest lead, in units, of which TryBulk leaves one
// to small callers.
const bulkMinLead = 8

// TryBatch is NextBatch without waiting: it fills dst with what one time
// unit allows now and returns 0 (and no error) when more would need a wait
// for the clock or the reservation. The ring buffer's filler uses it, so
// that it never waits while holding the lock callers take.
func (g *Generator) TryBatch(dst []uint64) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	return g.tryFill(dst)
}

// nextBatch is NextBatch; spin spins out short clock waits (see next).
// Next spins: its callers are many goroutines that each want one ID now.
// NextBatch does not: its caller (the ring buffer's filler, a batch
// request) is one goroutine that a timer serves as well, and a spinning
// filler would take a core from the takers it fills for.
func (g *Generator) nextBatch(ctx context.Context, dst []uint64, spin bool, lead int64) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	for {
		// The waker is taken before the reading: a Wake after it (a
		// clock step, a raise) ends the wait below, whose size came from
		// this reading.
		wk := g.waker()
		n, w, wall, err := g.next(dst, spin, lead)
		if n > 0 || err != nil {
			return n, err
		}
		switch w.kind {
		case waitClock:
			if err := g.sleep(ctx, w.d, wk); err != nil {
				if errors.Is(err, ErrRetired) {
					return 0, err
				}
				return 0, &AheadError{Lead: g.Lead(time.Unix(0, wall)), Limit: g.maxLead, Wait: w.d, Err: err}
			}
		case waitReservation:
			if err := g.awaitReservation(ctx, w.need, wk); err != nil {
				return 0, err
			}
		}
	}
}

// next reads the clock and runs fill, under the lock.
func (g *Generator) next(dst []uint64, spin bool, lead int64) (int, wait, int64, error) {
	g.mu.Lock()
	if g.retired.Load() {
		g.mu.Unlock()
		return 0, wait{}, 0, ErrRetired
	}
	if g.heldNow() {
		g.mu.Unlock()
		return 0, wait{}, 0, ErrHeld
	}
	wall, mono := g.read()
	n, w, err := g.fill(wall, mono, dst, lead)
	if spin {
		n, w, err = g.spinOut(n, w, err, dst)
	}
	g.mu.Unlock()
	return n, w, wall, err
}

// spinOut, under the lock, takes fill's outcome and, while it is a short
// wait for the clock (the sequence used up at the lead limit), re-reads
// the clock and fills again until the next unit begins: other callers park
// on the mutex rather than on a timer each, and the unit is served the
// moment it starts instead of after a timer's lateness. Only on a real
// clock and for waits of at most spinMax; a retire or any other outcome of
// fill ends it.
func (g *Generator) spinOut(n int, w wait, err error, dst []uint64) (int, wait, error) {
	for spins := 0; n == 0 && err == nil && w.kind == waitClock && w.d <= spinMax && g.spin &&
		spins < maxSpins && !g.retired.Load(); spins++ {
		wall, mono := g.read()
		n, w, err = g.fill(wall, mono, dst, g.leadUnits)
	}
	return n, w, err
}

// spinMax is the longest clock wait next spins out; longer waits sleep.
// maxSpins bounds the clock reads of one spin (a clock read costs tens of
// nanoseconds, so it is never reached while the clock moves).
const (
	spinMax  = time.Millisecond
	maxSpins = 1 << 20
)

// read returns the clock's readings. With a FastClock, a monotonic-only
// reading within monoWindow of the last full reading extrapolates the wall
// clock from it; otherwise it reads the clock in full. So a real step of the
// wall clock reaches the policy within monoWindow (at most 1 ms).
func (g *Generator) read() (int64, time.Duration) {
	if g.fast != nil {
		if m, ok := g.fast.FastMono(); ok {
			if wall, ok := g.extrapolate(m); ok {
				return wall, m
			}
		}
	}
	return g.fullRead()
}

// extrapolate turns a monotonic-only reading within monoWindow of the
// anchor into a wall reading in Unix nanoseconds. Either side of the
// anchor: a reading Next took before the lock may predate another
// caller's full one.
func (g *Generator) extrapolate(m time.Duration) (int64, bool) {
	if d := m - g.anchorMono; g.haveAnchor && d > -g.monoWindow && d < g.monoWindow {
		g.full = false
		return g.anchorWall + int64(d), true
	}
	return 0, false
}

// fullRead reads the clock in full; the wall reading in Unix nanoseconds.
func (g *Generator) fullRead() (int64, time.Duration) {
	wall, mono := g.clock.Now()
	ns := wall.UnixNano()
	g.anchorWall, g.anchorMono, g.haveAnchor, g.full = ns, mono, true, true
	return ns, mono
}

// units is Layout.Units on Unix nanoseconds, with a one-unit cache: most
// calls fall in the unit of the call before, and skip the division.
func (g *Generator) units(wallNs int64) int64 {
	if g.haveUnit && wallNs >= g.unitStart && wallNs-g.unitStart < g.unitNs {
		return g.unit
	}
	u := g.divUnits(wallNs)
	g.unit, g.unitStart, g.haveUnit = u, g.epochNs+u*g.unitNs, true
	return u
}

func (g *Generator) divUnits(wallNs int64) int64 {
	d := wallNs - g.epochNs
	u := d / g.unitNs
	if d < 0 && d%g.unitNs != 0 {
		u--
	}
	return u
}

// until is how long from wallNs until time-field value u begins.
func (g *Generator) until(u int64, wallNs int64) time.Duration {
	return time.Duration(g.epochNs + u*g.unitNs - wallNs)
}

// fill is the core, called with the lock held; the clock reading is its
// argument. It issues up to len(dst) IDs in one time unit, or says what to
// wait for, or returns an error.
func (g *Generator) fill(wall int64, mono time.Duration, dst []uint64, lead int64) (int, wait, error) {
	now := g.units(wall)
	L, seq := g.last, g.seq
	if now > L {
		L, seq = now, 0
	}
	if g.floor+1 > L {
		L, seq = g.floor+1, 0
	}
	if L-now > lead {
		// Too far ahead of this reading. It may be extrapolated, or
		// stale (the thread descheduled between its wall and monotonic
		// halves): read the clock in full again before deciding.
		wall, mono = g.fullRead()
		now = g.units(wall)
		if now > L {
			L, seq = now, 0
		}
	}
	if now < 0 || now > g.maxTime {
		return 0, wait{}, &RangeError{Clock: time.Unix(0, wall), Epoch: g.layout.Epoch, End: g.end}
	}
	if w, err := g.checkStep(wall, mono, now, L, lead); w.kind != waitNone || err != nil {
		return 0, w, err
	}
	if seq > g.maxSeq {
		// Borrow the next unit, within the lead and the layout.
		if L+1-now > lead {
			return 0, wait{kind: waitClock, d: g.until(L+1-lead, wall)}, nil
		}
		if L+1 > g.maxTime {
			return 0, wait{}, &RangeError{Clock: g.layout.UnitStart(L + 1), Epoch: g.layout.Epoch, End: g.end}
		}
		L, seq = L+1, 0
	}
	if !reserved(L, g.reserved.Load()) {
		return 0, wait{kind: waitReservation, need: L}, nil
	}
	n := uint64(len(dst))
	if room := g.maxSeq - seq + 1; n > room {
		n = room
	}
	base := uint64(L)<<g.timeShift | g.nodeBits
	if n == 1 {
		dst[0] = base | seq<<g.seqShift
	} else {
		for i := uint64(0); i < n; i++ {
			dst[i] = base | (seq+i)<<g.seqShift
		}
	}
	g.last, g.seq = L, seq+n
	g.issued += n
	return int(n), wait{}, nil
}

// atStatus is what fillAt did at the unit asked for.
type atStatus uint8

const (
	atIssued atStatus = iota // issued, and the unit has room left
	atFull                   // the unit's sequence is used up (after what it issued)
	atSkip                   // the member cannot issue at this unit (its floor lies at or above it): first holds floor+1
	atAhead                  // the member already issued past this unit: first holds its logical time
	atWait                   // wait (the clock, or the reservation) before this unit
)

// fillAt is fill for a wide generator's member (Wide.produce), called with
// the lock held and the clock reading as its argument. It issues up to
// most IDs with the time field exactly at and a sequence of at least
// from: the IDs are first, first +
// 1<<seqShift, …; n of them. It applies every check fill applies — the
// floor, the lead limit, the layout's range, the clock's steps, the
// reservation — except that it never borrows the next unit: Wide decides
// the unit (and, in the SeqNode order, the sequence value: a sequence
// number skipped is never issued, which costs nothing but the number).
func (g *Generator) fillAt(wall int64, mono time.Duration, at int64, from, most uint64, lead int64) (first, n uint64, st atStatus, w wait, err error) {
	if at < g.last {
		return uint64(g.last), 0, atAhead, wait{}, nil
	}
	if at <= g.floor {
		return uint64(g.floor + 1), 0, atSkip, wait{}, nil
	}
	now := g.units(wall)
	if at-now > lead {
		wall, mono = g.fullRead()
		now = g.units(wall)
	}
	if now < 0 || now > g.maxTime || at > g.maxTime {
		return 0, 0, 0, wait{}, &RangeError{Clock: time.Unix(0, wall), Epoch: g.layout.Epoch, End: g.end}
	}
	if w, err := g.checkStep(wall, mono, now, at, lead); err != nil {
		return 0, 0, 0, wait{}, err
	} else if w.kind != waitNone {
		return 0, 0, atWait, w, nil
	}
	seq := uint64(0)
	if at == g.last {
		seq = g.seq
	}
	seq = max(seq, from)
	if seq > g.maxSeq {
		return 0, 0, atFull, wait{}, nil
	}
	if !reserved(at, g.reserved.Load()) {
		return 0, 0, atWait, wait{kind: waitReservation, need: at}, nil
	}
	n = min(most, g.maxSeq-seq+1)
	if n == 0 {
		return 0, 0, atIssued, wait{}, nil
	}
	first = uint64(at)<<g.timeShift | g.nodeBits | seq<<g.seqShift
	g.last, g.seq = at, seq+n
	g.issued += n
	if g.seq > g.maxSeq {
		st = atFull
	}
	return first, n, st, wait{}, nil
}

// checkStep is the clock-step rule, for the reading (wall, mono) at which
// the unit at is to be issued, within lead units of the reading's unit
// now. Every path that issues applies it (fill, fillAt):
//
//   - at more than lead ahead of now: a backward step of the wall clock
//     beyond MaxLead since the last good reading fails closed
//     (RollbackError); otherwise the caller waits for the clock;
//   - a forward step beyond MaxForwardStep, from the largest offset ever
//     adopted (so that the clock coming back after an absorbed backward
//     step is no step), is not followed until ConfirmClock: no ID carries
//     the stepped time (ForwardStepError; the next reading is a full one);
//   - otherwise the reading is the new baseline: forward steps and
//     absorbed backward steps are followed. An extrapolated reading has the
//     offset of its full reading, already taken.
//
// A zero wait and a nil error let the caller issue at at.
func (g *Generator) checkStep(wall int64, mono time.Duration, now, at, lead int64) (wait, error) {
	// The step since the last good reading: s = monotonic delta − wall
	// delta, i.e. how far the wall clock moved back against the monotonic
	// clock (s < 0: it moved forward).
	offset := time.Duration(wall) - mono
	if at-now > lead {
		if s := g.base - offset; rollbackFails(s, g.maxLead) {
			return wait{}, &RollbackError{Step: s, Limit: g.maxLead, RetryAfter: max(g.until(at-lead, wall), 0)}
		}
		return wait{kind: waitClock, d: g.until(at-lead, wall)}, nil
	}
	if step := offset - g.top; g.maxFwd > 0 && forwardHeld(step, g.maxFwd) {
		g.haveAnchor = false
		return wait{}, &ForwardStepError{Step: step, Limit: g.maxFwd}
	}
	if g.full {
		g.base = offset
		g.top = max(g.top, offset)
	}
	return wait{}, nil
}

// waitSlice bounds every single wait: after it the clock is read again,
// so that no wait outlives a change of the clock by more than this even if
// nobody calls Wake.
const waitSlice = 50 * time.Millisecond

// sleep waits for d, or less: until the clock may allow more. It refuses
// at once a wait longer than ctx's deadline, and returns early (nil) when
// wk closes (the caller then reads the clock again).
func (g *Generator) sleep(ctx context.Context, d time.Duration, wk <-chan struct{}) error {
	if d <= 0 {
		return nil
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return context.DeadlineExceeded
	}
	t := time.NewTimer(min(d, waitSlice))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wk:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-g.retireC:
		return ErrRetired
	}
}
