package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/datadir"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/ringbuffer"
	"github.com/firnid/firn/segment/source"
	"github.com/firnid/firn/seq/sections"
	"github.com/firnid/firn/server/admission"
	"github.com/firnid/firn/server/clockpolicy"
)

// Generator is one named generator of the node: its serving state, its
// ring buffer (for the node's life; Reset on each new lease) and the
// current holding.
type Generator struct {
	cfg       GeneratorConfig
	acc       atomic.Pointer[access] // its definition's allow list and retirement (definitions.go)
	clock     clockguard.Clock
	local     *datadir.Gen // the data-dir record of this generator
	isDefault bool
	maxBatch  int
	maxRange  uint64
	// fair is admission and fair share of what the ring cannot serve,
	// sized for the workers serving (maxQueue: the bound for so many);
	// limits is --client-rate (nil without it).
	fair     *admission.FairShare
	refusals *admission.Refusals // paces each flow's refusals (holdPaced)
	maxQueue func(workers int) int64
	limits   *admission.ClientLimits
	state    *clockguard.ServingState
	ring     *ringbuffer.Buffer
	// held is the first serving holding (the lowest worker); live all of
	// them (members.go). wide is the source over them, for ranges and, for a
	// wide generator, the ring.
	held atomic.Pointer[holding]
	live atomic.Pointer[[]*holding]
	wide *generator.Wide
	// seg is a segment generator's source (nil for a snowflake one; set
	// by Start): no ring, no workers, no clock policy (segment.go).
	seg  *source.Source
	seqm *sections.Manager // a sequence generator's sections
	// runCtx is what rt runs under once started (Core.prepare); stopRun
	// ends it (retire). segStopped: the segment source was stopped.
	runCtx     context.Context
	stopRun    context.CancelFunc
	segStopped atomic.Bool
	issued     atomic.Uint64
	// A wide generator's holders (members.go): maxWorkers is --workers, or
	// --max-workers under auto; wantW the current target.
	maxWorkers int
	auto       bool
	wantW      atomic.Int64
	wmu        sync.Mutex
	members    []*member
	degraded   string                   // which workers do not serve, while others do
	slots      map[coordinator.Slot]int // heldSlots: holdings per slot
	ringWide   bool                     // the ring's source is wide (set once)
	// inUse is the number of live owners in the cluster, as last listed.
	inUse atomic.Int64
	// datacenterFixed: the datacenter comes from --datacenter, so the
	// slot space is the worker field alone.
	datacenterFixed bool

	// policy is the node's clock policy; stepped, set by the holder, is
	// its call after a step of the clock.
	policy  *clockpolicy.Policy
	stepped func()

	mu         sync.Mutex
	events     []Event // recent state changes, newest last
	rateHave   bool
	rateAt     time.Duration // monotonic reading of the rate sample
	rateIssued uint64
	rate       float64
}

// Event is one change of a generator's serving state, for the status
// page.
type Event struct {
	At     time.Time
	From   string
	To     string
	Reason string
}

const maxEvents = 20

// The generator as the transports read it: its name, definition and
// serving state, the figures of Status, and what the metrics and the
// status page show beside them.

// Name is the generator's name.
func (rt *Generator) Name() string { return rt.cfg.Name }

// Config is the generator's definition.
func (rt *Generator) Config() GeneratorConfig { return rt.cfg }

// State is the generator's serving state.
func (rt *Generator) State() *clockguard.ServingState { return rt.state }

// IsDefault reports whether the generator is the node's default (the
// first), which a request naming none is served from.
func (rt *Generator) IsDefault() bool { return rt.isDefault }

// MaxBatch is the most IDs one batch request may ask for.
func (rt *Generator) MaxBatch() int { return rt.maxBatch }

// MaxRange is the most IDs one NextRange may ask for.
func (rt *Generator) MaxRange() uint64 { return rt.maxRange }

// Fair is the generator's admission: its queue and the requests it shed.
func (rt *Generator) Fair() *admission.FairShare { return rt.fair }

// Issued is how many IDs the generator has issued since the node started.
func (rt *Generator) Issued() uint64 { return rt.issued.Load() }

// InUse is how many worker slots of the generator had a live owner in the
// cluster at the last reading of the peers' heartbeats.
func (rt *Generator) InUse() int64 { return rt.inUse.Load() }

// SlotsPerWorker is how many slots share one worker value: the datacenter
// values, unless the datacenter is fixed.
func (rt *Generator) SlotsPerWorker() uint64 {
	if rt.datacenterFixed {
		return 1
	}
	return rt.cfg.Layout.DatacenterLimit()
}

// RecentRate is the issue rate (IDs/s) over the last few seconds, given
// the node clock's monotonic reading: a sample is kept and replaced once it
// is 2 s old.
func (rt *Generator) RecentRate(mono time.Duration) float64 {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	now := rt.issued.Load()
	if !rt.rateHave {
		rt.rateHave, rt.rateAt, rt.rateIssued = true, mono, now
		return 0
	}
	if el := mono - rt.rateAt; el >= 2*time.Second {
		rt.rate = float64(now-rt.rateIssued) / el.Seconds()
		rt.rateAt, rt.rateIssued = mono, now
	}
	return rt.rate
}

func (rt *Generator) recordEvent(e Event) {
	rt.mu.Lock()
	rt.events = append(rt.events, e)
	if len(rt.events) > maxEvents {
		rt.events = rt.events[len(rt.events)-maxEvents:]
	}
	rt.mu.Unlock()
}

func (rt *Generator) recentEvents() []Event {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]Event(nil), rt.events...)
}

// admit enters n IDs of the caller's flow in the generator's queue, or
// refuses at once (admission.FairShare.Admit).
func (rt *Generator) admit(ctx context.Context, n int) (*admission.Flow, error) {
	key := admission.FlowKey(ctx)
	f, err := rt.fair.Admit(ctx, key, n, rt.Capacity())
	if err != nil {
		oe := err.(*admission.OverloadedError)
		oe.Generator = rt.cfg.Name
		return nil, rt.holdPaced(ctx, key, oe)
	}
	return f, nil
}

// holdPaced returns the refusal oe of flow key, held back first when the
// flow is refused faster than admission.Refusals' pace (a client ignoring
// RetryInfo): it then retries no faster than the pace. The hold ends with
// the caller's deadline. The time left is measured as the deadline is, on
// the process's monotonic clock (time.Until), never against the node's
// wall clock reading: one that reads behind (a backward correction, the
// fault-injection offset) would size the hold past the deadline, and the
// refusal would reach its caller as DEADLINE_EXCEEDED, without its cause.
// The refusal's RetryAfter counts from when it is answered: the hold is
// taken off it.
func (rt *Generator) holdPaced(ctx context.Context, key string, oe *admission.OverloadedError) error {
	if rt.refusals == nil {
		return oe // a segment generator's
	}
	_, now := rt.clock.Now()
	var left time.Duration
	if dl, ok := ctx.Deadline(); ok {
		left = max(time.Until(dl), time.Nanosecond)
	}
	hold := rt.refusals.Refused(key, now, left)
	if hold <= 0 {
		return oe
	}
	oe.Held = hold
	if oe.RetryAfter > 0 {
		oe.RetryAfter = max(oe.RetryAfter-hold, time.Millisecond)
	}
	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return oe
}

// limit spends n IDs of the caller's --client-rate.
func (rt *Generator) limit(ctx context.Context, n int) error {
	wait, ok := rt.limits.Take(admission.FlowKey(ctx), n)
	if ok {
		return nil
	}
	if wait < 0 {
		b := rt.limits.Burst()
		return BadField("count", strconv.Itoa(n), fmt.Sprintf("[1, %d]", b),
			"count %d exceeds --client-burst %d of generator %q: it could never pass --client-rate", n, b, rt.cfg.Name)
	}
	rt.fair.NoteShed(admission.ShedClientRate)
	return rt.holdPaced(ctx, admission.FlowKey(ctx), &admission.OverloadedError{Generator: rt.cfg.Name, Asked: n,
		ClientRate: rt.limits.Rate(), ClientBurst: rt.limits.Burst(), RetryAfter: max(wait, time.Millisecond)})
}

// issue fills dst with IDs: a request of at most one turn from the ring
// first, the rest generated directly in turns given by fair share, so a
// caller never sees the ring's ErrEmpty and never an ID older than one it
// got before from this node. A request the ring cannot fill goes through
// admission first.
func (rt *Generator) issue(ctx context.Context, dst []uint64) error {
	if rt.isSegment() {
		return rt.segmentFill(ctx, dst)
	}
	f, err := rt.enter(ctx, len(dst))
	if err != nil {
		return err
	}
	return rt.fill(ctx, f, dst)
}

// issueN is issue into a new slice of n, made only once the request is
// admitted: a refusal costs no allocation.
func (rt *Generator) issueN(ctx context.Context, n int) ([]uint64, error) {
	if rt.isSegment() {
		dst := make([]uint64, n)
		return dst, rt.segmentFill(ctx, dst)
	}
	f, err := rt.enter(ctx, n)
	if err != nil {
		return nil, err
	}
	dst := make([]uint64, n)
	if err := rt.fill(ctx, f, dst); err != nil {
		return nil, err
	}
	return dst, nil
}

// enter checks a request of n IDs against the serving state, the
// caller's --client-rate and, when the ring cannot fill it or it is larger
// than one turn, admission (f non-nil: its IDs are in the queue until fill
// returns).
func (rt *Generator) enter(ctx context.Context, n int) (f *admission.Flow, err error) {
	if err := rt.refusal(); err != nil {
		return nil, err
	}
	if rt.limits != nil {
		if err := rt.limit(ctx, n); err != nil {
			return nil, err
		}
	}
	if n > rt.fair.Turn() || n > rt.ring.Len() {
		return rt.admit(ctx, n)
	}
	return nil, nil
}

// fill is issue once entered.
func (rt *Generator) fill(ctx context.Context, f *admission.Flow, dst []uint64) error {
	if f != nil {
		defer rt.fair.Leave(f, len(dst))
	}
	// A batch larger than one turn is generated in turns, leaving the ring
	// to the small calls it keeps fast (docs/design.md, Overload). One the
	// ring could not fill when it entered waits for its turn first, and
	// takes from the ring then, under the filler's lock (ring.Generate):
	// IDs taken before the wait would age through it, past the ring's
	// freshness bound.
	n := 0
	if len(dst) <= rt.fair.Turn() && f == nil {
		n, _ = rt.ring.TakeN(dst)
	}
	if n < len(dst) {
		if f == nil { // the ring was taken from meanwhile
			var err error
			if f, err = rt.admit(ctx, len(dst)-n); err != nil {
				return err
			}
			defer rt.fair.Leave(f, len(dst)-n)
		}
		if err := rt.generateFair(ctx, f, dst[n:]); err != nil {
			return err
		}
	}
	rt.issued.Add(uint64(len(dst)))
	return nil
}

// issueOne is issue for a single ID without a slice.
func (rt *Generator) issueOne(ctx context.Context) (uint64, error) {
	if rt.isSegment() {
		var one [1]uint64
		err := rt.segmentFill(ctx, one[:])
		return one[0], err
	}
	if err := rt.refusal(); err != nil {
		return 0, err
	}
	if rt.limits != nil {
		if err := rt.limit(ctx, 1); err != nil {
			return 0, err
		}
	}
	id, err := rt.ring.Take()
	if err != nil {
		f, err := rt.admit(ctx, 1)
		if err != nil {
			return 0, err
		}
		one := oneIDs.Get().(*[1]uint64)
		err = rt.generateFair(ctx, f, one[:])
		id = one[0]
		oneIDs.Put(one)
		rt.fair.Leave(f, 1)
		if err != nil {
			return 0, err
		}
	}
	rt.issued.Add(1)
	return id, nil
}

// oneIDs are the one-ID buffers of the unary calls the ring cannot serve:
// the generator's source takes a slice through interfaces, so a buffer on
// the stack would move to the heap, one allocation per call.
var oneIDs = sync.Pool{New: func() any { return new([1]uint64) }}

// generateFair fills dst in turns of the fair share. A request larger
// than one turn is bulk: it never waits for the clock while it holds the
// turn (or the filler's lock), and it leaves the last unit of the lead to
// the small calls (generator.TryBulk), so that a single ID asked beside a
// flood waits for the turn in progress, not for the clock.
func (rt *Generator) generateFair(ctx context.Context, f *admission.Flow, dst []uint64) error {
	bulk := len(dst) > rt.fair.Turn()
	var tries sourceTries
	for n := 0; n < len(dst); {
		g, err := rt.acquireTurn(ctx, f, len(dst)-n)
		if errors.Is(err, admission.ErrInterrupted) {
			if err := rt.refusal(); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if !bulk {
			m, err := rt.generate(ctx, dst[n:n+g], &tries)
			rt.fair.Release()
			n += m
			if err != nil {
				return err
			}
			continue
		}
		m, await, err := rt.ring.GenerateBulk(ctx, dst[n:n+g])
		rt.fair.Release()
		n += m
		if err == nil && await != nil {
			err = await(ctx)
		}
		if err != nil {
			if retry, err := rt.sourceErr(err, &tries); !retry {
				return err
			}
		}
	}
	return nil
}

// acquireTurn is the fair share's Acquire. A turn that has not come
// admission.TurnMargin before the caller's deadline (the turn in progress
// waits for the clock, a coarse layout at its lead limit) is refused
// OVERLOADED, bound deadline, while the caller still listens, as a clock
// wait past the deadline is refused at once — not the bare deadline,
// without a cause.
func (rt *Generator) acquireTurn(ctx context.Context, f *admission.Flow, want int) (int, error) {
	g, err := rt.fair.Acquire(ctx, f, want)
	if errors.Is(err, admission.ErrTurnLate) {
		rt.fair.NoteShed(admission.ShedDeadline)
		return 0, &admission.OverloadedError{Generator: rt.cfg.Name, Asked: want, Deadline: true,
			RetryAfter: max(time.Duration(float64(rt.fair.Queued())/rt.Capacity()*float64(time.Second)), rt.cfg.Layout.Unit, time.Millisecond),
			Detail:     fmt.Sprintf("the turn of these %d IDs did not come within the call's deadline (the turns ahead wait for the clock or produce)", want)}
	}
	return g, err
}

// generate is the ring's Generate for what the ring could not give
// (docs/design.md, Liveness rules). A call waiting in it (for the filler's
// lock, the clock or the reservation) ends at once, refused with the
// cause, when the generator stops serving: the node holds the generator
// (generator.Hold) the moment its state leaves serving. A forward step the
// generator refused goes to the clock policy first, and the call is tried
// once more if the generator still serves (sourceErr).
func (rt *Generator) generate(ctx context.Context, dst []uint64, tries *sourceTries) (int, error) {
	for {
		n, err := rt.ring.Generate(ctx, dst)
		if err == nil {
			return n, nil
		}
		if retry, err := rt.sourceErr(err, tries); !retry {
			return n, err
		}
	}
}

// sourceTries counts one call's retries after its source's errors.
type sourceTries struct{ held, step int }

// maxHeldRetries bounds the retries of a call that found the source held
// while the state serves: each means the state left serving and came back
// since the call looked (the source is let go before the state is seen
// serving: clockguard.WithServingGate), so one is nearly always enough.
const maxHeldRetries = 3

// sourceErr turns the generator's error into the call's, or asks for a
// retry. Held: the serving state's refusal, with the cause it holds; if
// the state serves again by now, the call is tried again (a serving
// generator never refuses "not serving"). A forward step the generator
// refused goes to the clock policy first and, when no step was retried
// before, is tried again if the generator still serves — also when part
// of the call's IDs came first (from the ring: generate starts over and
// drops them, none handed out; a bulk call or a range keeps them and goes
// on after them).
func (rt *Generator) sourceErr(err error, t *sourceTries) (retry bool, _ error) {
	if errors.Is(err, generator.ErrHeld) {
		if err := rt.refusal(); err != nil {
			return false, err
		}
		if t.held++; t.held <= maxHeldRetries {
			return true, nil
		}
		return false, fmt.Errorf("generator %q: its source stays held while its state serves: %w", rt.cfg.Name, err)
	}
	var fs *generator.ForwardStepError
	if errors.As(err, &fs) && t.step == 0 {
		t.step++
		rt.policy.ForwardRefused(fs)
		if err := rt.refusal(); err != nil {
			return false, err
		}
		return true, nil
	}
	rt.policy.NoteError(policyGen{rt}, err)
	return false, err
}

// refusal is the call's refusal while the generator does not serve, with
// the cause its state holds (one snapshot decides both); nil while it
// serves.
func (rt *Generator) refusal() error {
	if rt.state.Serving() { // one load on the request path; the copy below only to refuse
		return nil
	}
	r := rt.state.Snapshot().Refusal()
	if r.Code == "" {
		return nil
	}
	e := &NotServingError{Generator: rt.cfg.Name, Reason: r.Reason, Code: r.Code, Limit: r.Limit, Measured: r.Measured}
	if !r.RetryAt.IsZero() {
		if wall, _ := rt.clock.Now(); r.RetryAt.After(wall) {
			e.RetryAfter = r.RetryAt.Sub(wall)
		}
	}
	e.RetryAfter = max(e.RetryAfter, r.RetryEvery)
	return e
}

// CheckServing is what a call for IDs of rt (past Core.CheckBatch or
// CheckRange) is refused with before it takes any: a sequence generator
// asked for IDs, or a generator not serving (its cause and RetryAfter, as
// the call would get them); nil when the call would go on to take IDs.
// HTTP HEAD answers with it, so it answers as GET would without taking
// IDs; a refusal that depends on the IDs taken (--client-rate, the queue)
// is GET's alone.
func (rt *Generator) CheckServing() error {
	if rt.isSeq() {
		return BadField("generator", Echo(rt.cfg.Name), "a snowflake or segment generator",
			"generator %q is a sequence generator: its values are per key (NextSeq, NextSeqs, CurrentSeq)", rt.cfg.Name)
	}
	return rt.refusal()
}

// GeneratorStatus is a snapshot of one generator for Info, /readyz and the status
// page.
type GeneratorStatus struct {
	Name      string
	Layout    string
	IsDefault bool
	Serving   bool
	State     string
	Reason    string
	Cause     clockguard.Code // the reason's code; "" while serving
	// DatacenterFixed: the datacenter comes from --datacenter (the
	// region), not from the worker allocation.
	DatacenterFixed bool
	Worker          uint64
	Datacenter      uint64
	HasLease        bool
	ReservedUntil   time.Time
	ReservedUnits   int64
	ClockLead       time.Duration
	MaxLead         time.Duration
	MaxStaleness    time.Duration
	MaxBatch        int
	Issued          uint64
	Ring            ringbuffer.Stats
	Events          []Event
	LayoutEnd       time.Time
	MaxRange        uint64
	// Wide: the workers the generator holds.
	Wide WorkersStatus
	// Kind is "snowflake", "segment" or "seq"; Segment is a segment
	// generator's source (nil for the other kinds); Seq a sequence
	// generator's sections and Owners its section map as last read.
	Kind    string
	Segment *source.Stats
	Seq     *sections.Stats
	Owners  []sections.Owner
}

// commonStatus is what Status shows of every kind.
func (rt *Generator) commonStatus() GeneratorStatus {
	return GeneratorStatus{
		Kind:      rt.cfg.Kind(),
		Name:      rt.cfg.Name,
		Layout:    rt.cfg.Spec(),
		IsDefault: rt.isDefault,
		Serving:   rt.state.Serving(),
		State:     rt.state.State().String(),
		Reason:    rt.state.Reason(),
		Cause:     rt.state.Snapshot().Refusal().Code,
		MaxBatch:  rt.maxBatch,
		MaxRange:  rt.maxRange,
		Issued:    rt.issued.Load(),
		Events:    rt.recentEvents(),
	}
}

// Status is the generator as it stands at wall.
func (rt *Generator) Status(wall time.Time) GeneratorStatus {
	s := rt.commonStatus()
	if rt.isSeq() {
		st := rt.SeqStats()
		s.Seq, s.Owners = &st, rt.SeqOwners()
		return s
	}
	if rt.isSegment() {
		st := rt.SegmentStats()
		s.Segment = &st
		return s
	}
	s.DatacenterFixed, s.MaxLead, s.MaxStaleness = rt.datacenterFixed, rt.cfg.MaxLead, rt.cfg.MaxStaleness
	s.Ring, s.LayoutEnd, s.Wide = rt.ring.Stats(), rt.cfg.Layout.End(), rt.workersStatus()
	if h := rt.held.Load(); h != nil {
		s.HasLease = true
		s.Worker, s.Datacenter = h.gen.Worker(), h.gen.Datacenter()
		r := h.reserved.Load()
		s.ReservedUnits = r
		if r >= 0 {
			// The end of the last reserved unit.
			s.ReservedUntil = rt.cfg.Layout.UnitStart(r + 1)
		}
		if h.gen.Highest() >= 0 {
			s.ClockLead = max(h.gen.Lead(wall), 0) // behind the clock (idle) reads as 0
		}
	}
	return s
}
