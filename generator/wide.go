package generator

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Run is Count consecutive IDs starting at First: First, First+1, …,
// First+Count−1.
type Run struct{ First, Count uint64 }

// Wide issues the IDs of several generators of one layout — the workers
// one node holds for one generator name — as one source in per-node
// order: within one time unit it walks the positions below the time field
// in the layout's own bit order, then moves to the next unit. In the
// default order (node fields above the sequence) that is each member's
// sequence block in ascending order of their worker (and datacenter)
// fields; in the SeqNode order (sequence above the node fields, as
// sonyflake packs) it is one ID of each member per sequence value, in
// ascending worker order, then the next sequence value. So the IDs it
// issues strictly increase, as one Generator's do, at up to k times one
// worker's rate.
//
// Each member stays a Generator for its own lease: its floor, its
// reservation, its lead limit and its clock checks decide whether it may
// issue at the unit Wide asks for (fillAt), so every invariant of one
// generator holds for each member whatever Wide does. Wide only chooses
// the unit and the member. A member that cannot issue at the current
// unit — its floor lies ahead (it joined late), its reservation has not
// reached the unit, it was retired — is passed over for that unit; the
// others serve. Members change with SetMembers as leases come and go.
//
// Wide satisfies the ring buffer's Source, TrySource and BulkSource, and
// issues runs (TryRuns) for callers that take IDs as ranges.
type Wide struct {
	layout    Layout
	clock     Clock
	maxLead   time.Duration
	leadUnits int64
	seqShift  uint8
	maxSeq    uint64

	mu      sync.Mutex
	members []*Generator // ascending node fields
	cursor
	// list is members for Hold, which takes no lock: it runs under the
	// serving state's lock, and produce holds mu for a whole turn.
	list atomic.Pointer[[]*Generator]

	// top is the highest unit Wide issued at (-1: none): what the node's
	// order rests on, whichever member issued it.
	top    atomic.Int64
	held   atomic.Bool
	issued atomic.Uint64
	wake   signal
}

// NewWide returns a Wide over no member yet, for generators built with
// the layout and clock given (and MaxLead; zero means the default).
func NewWide(l Layout, clock Clock, maxLead time.Duration) *Wide {
	if maxLead == 0 {
		maxLead = DefaultMaxLead(l)
	}
	w := &Wide{layout: l, clock: clock, maxLead: maxLead, leadUnits: int64(maxLead / l.Unit),
		seqShift: l.seqShift(), maxSeq: l.MaxSequence(), cursor: cursor{cur: -1}}
	w.top.Store(-1)
	return w
}

// Highest is the highest time field of the IDs Wide issued, -1 before
// the first. The next ID Wide issues has a time at or above it: a member
// that issued there may be gone, and the others wait for the clock to
// come within the lead of it (the owner holds the generator out while it
// is more than the lead ahead, as for one generator's own IDs).
func (w *Wide) Highest() int64 { return w.top.Load() }

// Lead is how far Highest stands ahead of the wall reading (negative when
// behind; 0 before the first ID).
func (w *Wide) Lead(wall time.Time) time.Duration {
	t := w.top.Load()
	if t < 0 {
		return 0
	}
	return w.layout.UnitStart(t).Sub(wall)
}

// SetMembers replaces the members. Each must have been built with the
// Wide's layout; a retired one is passed over until removed. The unit in
// progress continues after the member that issued last in it, so the
// order holds across the change.
func (w *Wide) SetMembers(gens []*Generator) {
	ms := slices.Clone(gens)
	slices.SortFunc(ms, func(a, b *Generator) int {
		switch {
		case a.nodeBits < b.nodeBits:
			return -1
		case a.nodeBits > b.nodeBits:
			return 1
		}
		return 0
	})
	for _, m := range ms {
		m.owner.Store(w) // before it serves in w: it takes w's hold
	}
	w.mu.Lock()
	w.members = ms
	w.list.Store(&ms)
	w.idx = len(ms)
	for i, m := range ms {
		if m.nodeBits >= w.lastNode {
			w.idx = i
			break
		}
	}
	if !w.served {
		w.idx = 0
	}
	w.mu.Unlock()
	w.Wake()
}

// Members returns the members, in the order they serve a unit.
func (w *Wide) Members() []*Generator {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.members)
}

// Issued counts the IDs Wide issued.
func (w *Wide) Issued() uint64 { return w.issued.Load() }

// MaxLead returns the lead limit in force.
func (w *Wide) MaxLead() time.Duration { return w.maxLead }

// Hold holds Wide out of service (on) or lets it serve again, as
// Generator.Hold does, and with it every member, present and future: a
// member has no hold of its own while in a Wide, so one that leaves and
// joins again (its lease lapsed during a hold, say) serves exactly when
// the Wide does. It takes no lock, so that it may run under the serving
// state's (clockguard.WithServingGate), and wakes every waiting call,
// the members' too.
func (w *Wide) Hold(on bool) {
	w.held.Store(on)
	var ms []*Generator
	if p := w.list.Load(); p != nil {
		ms = *p
	}
	holdMembers(ms, on)
	for _, m := range ms {
		m.wake.fire()
	}
	w.Wake()
}

// Wake makes every waiting call re-read the clock and decide again. A
// member's Wake (a raised reservation, a step, Retire) calls it.
func (w *Wide) Wake() {
	w.wake.fire()
}

func (w *Wide) waker() <-chan struct{} { return w.wake.wait() }

// cursor is where Wide stands: the unit being handed out and the member
// handing it out (and, in the SeqNode order, the sequence value).
type cursor struct {
	cur int64
	idx int
	// seq is the sequence value being handed out, in the SeqNode order
	// (0 in the default order, where a member hands out its whole block);
	// passIssued: some member issued at seq in this pass over them.
	seq        uint64
	passIssued bool
	// lastNode: the node fields of the member that issued last in cur,
	// so that a change of members mid-unit resumes after it.
	lastNode uint64
	// served: some member issued at cur; waitRes: some member waited
	// for its reservation at cur (so an empty pass over cur waits too,
	// rather than running the cursor ahead).
	served, waitRes bool
}

// sink receives what produce issues: IDs (ids) or runs.
type sink struct {
	ids  []uint64
	runs []Run
	nr   int // runs written
}

// produce issues up to want IDs, unit by unit, member by member, under the
// lock; it returns how many, or what to wait for when none, or an error.
func (w *Wide) produce(s *sink, want uint64, lead int64) (got uint64, wt wait, err error) {
	if w.held.Load() {
		return 0, wait{}, ErrHeld
	}
	// The cursor moves only as far as a member accepts: a call that
	// issues nothing (a wait, an error) leaves it where it found it, so
	// that a clock reading no member took (a forward step refused, then
	// undone) does not carry the cursor along.
	saved := w.cursor
	defer func() {
		if got == 0 {
			w.cursor = saved
		}
		w.issued.Add(got)
	}()
	wall, _ := w.clock.Now()
	if now := w.layout.Units(wall); now > w.cur {
		w.moveTo(now)
	}
	if !w.served {
		// Nothing issued at this unit yet: every member is asked again
		// (one that waited for its reservation in an earlier call may have
		// it now). Once one issued here, those before it never are: they
		// would issue below it.
		w.idx, w.waitRes = 0, false
	}
	empty := 0 // passes over a whole unit that issued nothing
	skipTo := int64(-1)
	for got < want {
		if w.idx >= len(w.members) {
			if wt, stop := w.passEnded(&empty, &skipTo); stop {
				return got, wt, nil
			}
			continue
		}
		most := want - got
		if s.runs != nil {
			// Room for one more run (a block of consecutive IDs), or for
			// one run per ID when the sequence lies above the node fields.
			if s.nr == len(s.runs) {
				break
			}
			if w.seqShift != 0 {
				most = min(most, uint64(len(s.runs)-s.nr))
			}
		}
		if w.seqShift != 0 {
			most = 1 // one ID per member and sequence value
		}
		m := w.members[w.idx]
		first, n, st, mw, merr := m.issueAt(w.cur, w.seq, most, lead)
		switch {
		case errors.Is(merr, ErrRetired):
			w.idx++
			continue
		case merr != nil:
			if got > 0 {
				return got, wait{}, nil
			}
			return 0, wait{}, merr
		}
		switch st {
		case atIssued, atFull:
			if n > 0 {
				w.emit(s, got, first, n)
				got += n
				w.served, w.lastNode = true, m.nodeBits
				if w.cur > w.top.Load() {
					w.top.Store(w.cur)
				}
				if w.seqShift != 0 {
					// The member issued at seq or, having issued past
					// it, above: the pass goes on from there.
					w.seq, w.passIssued = first>>w.seqShift&w.maxSeq, true
				}
			}
			if st == atFull || w.seqShift != 0 {
				w.idx++
			}
		case atSkip:
			if f := int64(first); skipTo < 0 || f < skipTo {
				skipTo = f
			}
			w.idx++
		case atAhead:
			// The member issued past cur by itself (a one-member Wide
			// beside the member's own callers): follow it.
			w.moveTo(int64(first))
		case atWait:
			if mw.kind == waitClock {
				// The clock bounds every member alike.
				return got, mw, nil
			}
			w.waitRes = true
			w.idx++
		}
	}
	return got, wait{}, nil
}

// passEnded moves on once every member had its turn at the cursor: to
// the next sequence value (SeqNode), to the next unit once one issued
// here, else — a pass that issued nothing, counted in empty — to the
// first unit a member that could serve accepts (skipTo), or it stops with
// what to wait for.
func (w *Wide) passEnded(empty *int, skipTo *int64) (wt wait, stop bool) {
	if w.seqShift != 0 && w.passIssued && w.seq < w.maxSeq {
		// SeqNode: every member had its turn at seq; the next sequence
		// value, from the first member.
		w.seq, w.idx, w.passIssued = w.seq+1, 0, false
		return wait{}, false
	}
	if w.served {
		// Every member is done with this unit: the next one. The
		// members' lead checks stop the cursor at the lead limit.
		w.moveTo(w.cur + 1)
		return wait{}, false
	}
	*empty++
	switch {
	case len(w.members) == 0 || *empty > 2:
		// No member (or none that can serve): wait for a change of
		// members, a raise or a Wake.
		return wait{kind: waitReservation, need: w.cur}, true
	case *skipTo > w.cur:
		// Every member that could serve here has its floor ahead (it
		// joined late) or waits for its reservation: go to the first unit
		// one of them accepts, as peek does, so that AwaitBulk never
		// returns while this issues nothing.
		w.moveTo(*skipTo)
	case w.waitRes:
		return wait{kind: waitReservation, need: w.cur}, true
	default:
		w.moveTo(w.cur + 1)
	}
	*skipTo = -1
	return wait{}, false
}

// moveTo starts unit u.
func (w *Wide) moveTo(u int64) { w.cursor = cursor{cur: u} }

// emit writes n IDs from first into s, at offset off of the IDs.
func (w *Wide) emit(s *sink, off, first, n uint64) {
	if s.runs == nil {
		for i := uint64(0); i < n; i++ {
			s.ids[off+i] = first + i<<w.seqShift
		}
		return
	}
	if w.seqShift == 0 {
		if s.nr > 0 {
			if r := &s.runs[s.nr-1]; r.First+r.Count == first {
				r.Count += n // adjacent workers' blocks meet
				return
			}
		}
		s.runs[s.nr] = Run{First: first, Count: n}
		s.nr++
		return
	}
	for i := uint64(0); i < n; i++ {
		s.runs[s.nr] = Run{First: first + i<<w.seqShift, Count: 1}
		s.nr++
	}
}

// try runs produce once under the lock.
func (w *Wide) try(s *sink, want uint64, lead int64) (uint64, wait, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.produce(s, want, lead)
}

// NextBatch fills dst with IDs, at least one, waiting as Generator's
// NextBatch does (the clock at the lead limit, the reservation).
func (w *Wide) NextBatch(ctx context.Context, dst []uint64) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	for {
		wk := w.waker()
		n, wt, err := w.try(&sink{ids: dst}, uint64(len(dst)), w.leadUnits)
		if n > 0 || err != nil {
			return int(n), err
		}
		if err := w.await(ctx, wt, wk); err != nil {
			return 0, err
		}
	}
}

// TryBatch is NextBatch without waiting: 0 and no error when more would
// need a wait.
func (w *Wide) TryBatch(dst []uint64) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	n, _, err := w.try(&sink{ids: dst}, uint64(len(dst)), w.leadUnits)
	return int(n), err
}

// TryBulk is TryBatch for a large request, leaving the last unit of the
// lead to small calls (Generator.TryBulk).
func (w *Wide) TryBulk(dst []uint64) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	n, _, err := w.try(&sink{ids: dst}, uint64(len(dst)), w.bulkLead())
	return int(n), err
}

// TryRuns issues up to want IDs as runs into dst without waiting, and
// returns how many runs and IDs it wrote (0 and no error when more would
// need a wait; AwaitBulk waits for that). dst must have room for a run per
// member and unit the IDs may span: len(dst) bounds want by itself (each
// run holds at least one ID), and a caller asking for runs of whole units
// needs want / PerUnit + members + 1; with fewer it returns fewer IDs.
// bulk leaves the lead's last unit to
// small calls, as TryBulk does.
func (w *Wide) TryRuns(dst []Run, want uint64, bulk bool) (runs int, ids uint64, err error) {
	if len(dst) == 0 || want == 0 {
		return 0, 0, nil
	}
	lead := w.leadUnits
	if bulk {
		lead = w.bulkLead()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &sink{runs: dst}
	n, _, err := w.produce(s, want, lead)
	return s.nr, n, err
}

// AwaitBulk waits until TryBulk or TryRuns can produce, producing nothing.
func (w *Wide) AwaitBulk(ctx context.Context) error {
	for {
		wk := w.waker()
		w.mu.Lock()
		wt, err := w.peek(w.bulkLead())
		w.mu.Unlock()
		if err != nil {
			return err
		}
		if wt.kind == waitNone {
			return nil
		}
		if err := w.await(ctx, wt, wk); err != nil {
			return err
		}
	}
}

// peek reports, under the lock, whether the next ID needs a wait, and
// for what: it asks the members for zero IDs where produce would, changing
// nothing, and follows the cursor as produce moves it — to a member's own
// later unit (it issued ahead by itself), to the first unit a late
// member's floor allows, or to the next unit — so that it never reports
// ready while produce would issue nothing (AwaitBulk would spin).
func (w *Wide) peek(lead int64) (wait, error) {
	if w.held.Load() {
		return wait{}, ErrHeld
	}
	c := w.cursor
	wall, _ := w.clock.Now()
	if now := w.layout.Units(wall); now > c.cur {
		c = cursor{cur: now}
	}
	if !c.served {
		c.idx = 0 // as produce starts
	}
	if len(w.members) == 0 {
		return wait{kind: waitReservation, need: c.cur}, nil
	}
	res := false
	// Each pass is one unit; a member ahead or a floor ahead moves the
	// cursor forward, so the passes end.
	for pass := 0; pass < 2+len(w.members); pass++ {
		skipTo := int64(-1)
		moved := false
		for i := c.idx; i < len(w.members) && !moved; i++ {
			first, _, st, mw, err := w.members[i].issueAt(c.cur, c.seq, 0, lead)
			switch {
			case errors.Is(err, ErrRetired):
				continue
			case err != nil:
				return wait{}, err
			}
			switch st {
			case atIssued:
				return wait{}, nil
			case atAhead:
				c, moved = cursor{cur: int64(first)}, true
			case atSkip:
				if f := int64(first); skipTo < 0 || f < skipTo {
					skipTo = f
				}
			case atWait:
				if mw.kind == waitClock {
					return mw, nil
				}
				res = true
			}
		}
		switch {
		case moved:
		case skipTo > c.cur:
			c = cursor{cur: skipTo}
		default:
			c = cursor{cur: c.cur + 1}
		}
	}
	if res {
		return wait{kind: waitReservation, need: c.cur}, nil
	}
	// Every member full or skipping: their floors lie ahead; a unit's
	// time, or a change of members, may change that.
	return wait{kind: waitClock, d: w.layout.Unit}, nil
}

// await waits for what produce asked: the clock or the reservation, at
// most waitSlice, ending early on a Wake or the deadline.
func (w *Wide) await(ctx context.Context, wt wait, wk <-chan struct{}) error {
	d := waitSlice
	// A clock wait that the caller's deadline ends is refused as the lead
	// it waited on, whether the deadline was short from the start or ran
	// out while waiting (a late timer and the deadline can fire together).
	ahead := func(err error) error {
		w.mu.Lock()
		cur := w.cur
		w.mu.Unlock()
		wall, _ := w.clock.Now()
		return &AheadError{Lead: w.layout.UnitStart(cur).Sub(wall), Limit: w.maxLead, Wait: max(wt.d, 0), Err: err}
	}
	if wt.kind == waitClock {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wt.d {
			return ahead(context.DeadlineExceeded)
		}
		d = min(max(wt.d, 0), waitSlice)
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wk:
		return nil
	case <-ctx.Done():
		if wt.kind == waitReservation {
			return &ReservationError{Need: wt.need, Reserved: -1, Err: ctx.Err()}
		}
		return ahead(ctx.Err())
	}
}

func (w *Wide) bulkLead() int64 {
	if w.leadUnits >= bulkMinLead {
		return w.leadUnits - 1
	}
	return w.leadUnits
}

// issueAt is fillAt under the member's lock, on a reading of its clock.
func (g *Generator) issueAt(at int64, from, most uint64, lead int64) (first, n uint64, st atStatus, w wait, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.retired.Load() {
		return 0, 0, 0, wait{}, ErrRetired
	}
	if g.heldNow() {
		return 0, 0, 0, wait{}, ErrHeld
	}
	wall, mono := g.read()
	return g.fillAt(wall, mono, at, from, most, lead)
}
