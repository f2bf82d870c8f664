package core

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/server/admission"
)

// A generator holds one worker or several (docs/design.md, Wide
// generators). Each worker is one holder with its own lease, reservation
// and fences, exactly as a single-worker generator's. What the holders
// share is the generator's serving state and its source: a
// generator.Wide over the generators of the holdings that serve, which
// hands out each unit's blocks in ascending worker order.
//
// A holder reports its own lease — acquiring, waiting for its floor,
// lost, its reservation running out — through a leaseState. For a
// generator of one worker that is the serving state itself (directState),
// as it always was. For a wide generator it is the holder's member record:
// the generator serves while at least one member does, passing over the
// others, and says so (status page, Info, metrics); only when no member
// serves does the first member's reason become the generator's.

// leaseState is where a holder reports its lease's state.
type leaseState interface {
	SetCause(src clockguard.Source, reason string, d clockguard.Detail)
	Set(src clockguard.Source, reason string)
	Clear(src clockguard.Source)
	// Ready: the lease's first reservation is acknowledged.
	Ready()
	// join and leave: the holding starts serving the generator's source,
	// or stops (for good: its generator is retired or about to be).
	join(h *holding)
	leave(h *holding)
}

// directState is a single-worker generator's leaseState: the serving
// state and the ring, directly.
type directState struct{ rt *Generator }

func (d directState) SetCause(src clockguard.Source, reason string, det clockguard.Detail) {
	d.rt.state.SetCause(src, reason, det)
}
func (d directState) Set(src clockguard.Source, reason string) { d.rt.state.Set(src, reason) }
func (d directState) Clear(src clockguard.Source)              { d.rt.state.Clear(src) }
func (d directState) Ready() {
	d.rt.state.Ready()
	d.rt.ring.Start()
}

func (d directState) join(h *holding) {
	rt := d.rt
	rt.wide.SetMembers([]*generator.Generator{h.gen}) // first: the generator takes the source's hold
	rt.ring.Reset(h.gen)
	rt.setLive([]*holding{h})
}

func (d directState) leave(h *holding) {
	rt := d.rt
	rt.ring.Reset(nil)
	rt.wide.SetMembers(nil)
	rt.setLive(nil)
}

// member is one holder of a wide generator, and its lease's state.
type member struct {
	rt     *Generator
	hd     *holder
	slot   int    // creation order: the first member is slot 0
	cancel func() // stops the holder (releasing its lease)

	// Under rt.wmu:
	h       *holding
	ready   bool
	reasons map[clockguard.Source]memberReason
}

type memberReason struct {
	reason string
	d      clockguard.Detail
	hold   bool // SetCause (with detail) rather than Set
}

func (m *member) record(src clockguard.Source, r *memberReason) {
	m.rt.wmu.Lock()
	if r == nil {
		delete(m.reasons, src)
	} else {
		m.reasons[src] = *r
	}
	m.rt.wmu.Unlock()
	m.rt.syncMembers()
}

func (m *member) SetCause(src clockguard.Source, reason string, d clockguard.Detail) {
	m.record(src, &memberReason{reason: reason, d: d, hold: true})
}
func (m *member) Set(src clockguard.Source, reason string) {
	m.record(src, &memberReason{reason: reason})
}
func (m *member) Clear(src clockguard.Source) { m.record(src, nil) }
func (m *member) Ready() {
	m.rt.wmu.Lock()
	m.ready = true
	m.rt.wmu.Unlock()
	m.rt.syncMembers()
}
func (m *member) join(h *holding) {
	m.rt.wmu.Lock()
	m.h, m.ready = h, false
	m.rt.wmu.Unlock()
	m.rt.syncMembers()
}
func (m *member) leave(h *holding) {
	m.rt.wmu.Lock()
	if m.h == h {
		m.h, m.ready = nil, false
	}
	m.rt.wmu.Unlock()
	m.rt.syncMembers()
}

// serving: the member's holding serves the generator's source.
func (m *member) serving() bool {
	return m.h != nil && m.ready && len(m.reasons) == 0 && !m.h.gen.Retired()
}

// leaseSources are what a member reports; the others (the clock, the
// coordinator's pin and marker, the node's name) are the generator's.
var leaseSources = []clockguard.Source{clockguard.SourceLease, clockguard.SourceReservation}

// syncMembers makes the generator's source and serving state follow its
// members: the Wide's members are the serving holdings; the generator
// serves while one does, and otherwise carries the first member's reason.
func (rt *Generator) syncMembers() {
	rt.wmu.Lock()
	defer rt.wmu.Unlock()
	var live []*holding
	var out []string
	var first *member
	for _, m := range rt.members {
		if m.serving() {
			live = append(live, m.h)
			continue
		}
		if first == nil {
			first = m
		}
		out = append(out, m.describe())
	}
	slices.SortFunc(live, func(a, b *holding) int { return compareWorker(a, b) })
	old := rt.liveHoldings()
	if !sameHoldings(old, live) {
		gens := make([]*generator.Generator, len(live))
		for i, h := range live {
			gens[i] = h.gen
		}
		rt.wide.SetMembers(gens)
		rt.setLive(live)
		switch {
		case !rt.ringWide && len(live) > 0:
			// The first: the ring had no source, so no call waits in it.
			rt.ringWide = true
			rt.ring.Reset(rt.wide)
		case slices.ContainsFunc(old, func(h *holding) bool { return !slices.Contains(live, h) }):
			// A member gone: what the ring buffered from it is dropped
			// (every ID handed out lies within a serving holding). Not
			// Reset: a call generating under the filler's lock may be
			// waiting, and that must not hold this (under wmu) up.
			rt.ring.Invalidate()
		}
	}
	rt.degraded = ""
	if len(live) > 0 {
		if len(out) > 0 {
			rt.degraded = fmt.Sprintf("%d of %d workers serving; %s", len(live), len(rt.members), strings.Join(out, "; "))
		}
		for _, src := range leaseSources {
			rt.state.Clear(src)
		}
		rt.state.Ready()
		rt.ring.Start()
		return
	}
	if first == nil {
		return
	}
	prefix := ""
	if len(rt.members) > 1 {
		prefix = fmt.Sprintf("none of %d workers serving; the first: ", len(rt.members))
	}
	// The generator serves again when the first of its workers does: a
	// refusal's retry time is the soonest any of them knows, not the
	// first one's alone.
	var soonest time.Time
	for _, m := range rt.members {
		var end time.Time // when all of m's reasons end; zero: unknown
		for _, src := range leaseSources {
			r, held := m.reasons[src]
			if !held {
				continue
			}
			if r.d.RetryAt.IsZero() {
				end = time.Time{}
				break
			}
			if r.d.RetryAt.After(end) {
				end = r.d.RetryAt
			}
		}
		if !end.IsZero() && (soonest.IsZero() || end.Before(soonest)) {
			soonest = end
		}
	}
	for _, src := range leaseSources {
		r, ok := first.reasons[src]
		if !soonest.IsZero() && r.d.RetryAt.After(soonest) {
			r.d.RetryAt = soonest
		}
		switch {
		case !ok:
			rt.state.Clear(src)
		case r.hold:
			rt.state.SetCause(src, prefix+r.reason, r.d)
		default:
			rt.state.Set(src, prefix+r.reason)
		}
	}
	if len(first.reasons) == 0 {
		// Between a lease and its first reservation, or retired.
		rt.state.SetCause(clockguard.SourceLease, prefix+"acquiring a worker ID", clockguard.Detail{Code: clockguard.CodeStarting})
	}
}

// describe says why a member does not serve, under rt.wmu.
func (m *member) describe() string {
	who := fmt.Sprintf("worker slot %d", m.slot)
	if m.h != nil {
		who = fmt.Sprintf("worker %d", m.h.gen.Worker())
	}
	for _, src := range leaseSources {
		if r, ok := m.reasons[src]; ok {
			return who + ": " + r.reason
		}
	}
	if m.h == nil {
		return who + ": acquiring"
	}
	return who + ": waiting for its first reservation"
}

func compareWorker(a, b *holding) int {
	ka := a.gen.Datacenter()<<32 | a.gen.Worker()
	kb := b.gen.Datacenter()<<32 | b.gen.Worker()
	switch {
	case ka < kb:
		return -1
	case ka > kb:
		return 1
	}
	return 0
}

func sameHoldings(a, b []*holding) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// setLive publishes the serving holdings; held is the first of them.
// Admission and the fair share's turns are sized for them: a generator
// serving one of its sixteen workers queues and turns one worker's share.
func (rt *Generator) setLive(hs []*holding) {
	rt.live.Store(&hs)
	if k := max(len(hs), 1); rt.fair != nil {
		l := rt.cfg.Layout
		rt.fair.SetSize(l.Rate()*float64(k), l.PerUnit()*uint64(k), rt.maxQueue(k))
	}
	if len(hs) > 0 {
		rt.held.Store(hs[0])
	} else {
		rt.held.Store(nil)
	}
}

// liveHoldings are the holdings serving the generator's source,
// ascending by worker.
func (rt *Generator) liveHoldings() []*holding {
	if p := rt.live.Load(); p != nil {
		return *p
	}
	return nil
}

// Lead is how far the generator's logical time stands ahead of wall: the
// largest of its holdings' and of the last ID its Wide source issued (a
// worker that issued it may have left; the order rests on it still) —
// false when it holds none.
func (rt *Generator) Lead(wall time.Time) (time.Duration, bool) {
	hs := rt.liveHoldings()
	if len(hs) == 0 {
		return 0, false
	}
	var l time.Duration
	for i, h := range hs {
		if d := h.gen.Lead(wall); i == 0 || d > l {
			l = d
		}
	}
	if rt.wide != nil && rt.wide.Highest() >= 0 {
		l = max(l, rt.wide.Lead(wall))
	}
	return l, true
}

// countInUse records, per generator, how many worker slots have a live
// owner in the cluster (firn_worker_ids_in_use): one beat per live owner.
func countInUse(gens []*Generator, beats []coordinator.PeerBeat) {
	live := map[string]map[coordinator.Slot]bool{}
	for _, b := range beats {
		if live[b.Generator] == nil {
			live[b.Generator] = map[coordinator.Slot]bool{}
		}
		live[b.Generator][b.Slot] = true
	}
	for _, rt := range gens {
		rt.inUse.Store(int64(len(live[rt.cfg.Name])))
	}
}

// policyGen is a generator as the clock policy sees it.
type policyGen struct{ rt *Generator }

func (g policyGen) Name() string                    { return g.rt.cfg.Name }
func (g policyGen) State() *clockguard.ServingState { return g.rt.state }
func (g policyGen) MaxLead() time.Duration          { return g.rt.cfg.MaxLead }
func (g policyGen) Layout() generator.Layout        { return g.rt.cfg.Layout }
func (g policyGen) Lead(wall time.Time) (time.Duration, bool) {
	return g.rt.Lead(wall)
}
func (g policyGen) Wake() { g.rt.wakeAll() }
func (g policyGen) WriteNow() {
	if g.rt.stepped != nil {
		g.rt.stepped()
	}
}
func (g policyGen) ConfirmClock() {
	for _, h := range g.rt.liveHoldings() {
		h.gen.ConfirmClock()
	}
}

// wakeAll makes every wait in the generator's source re-read the clock.
func (rt *Generator) wakeAll() {
	for _, h := range rt.liveHoldings() {
		h.gen.Wake()
	}
	if rt.wide != nil {
		rt.wide.Wake()
	}
}

// Capacity is what the generator produces at most, in IDs/s: the layout's
// rate for each worker serving (one while it serves none).
func (rt *Generator) Capacity() float64 {
	return rt.cfg.Layout.Rate() * float64(max(len(rt.liveHoldings()), 1))
}

// WorkersStatus is the wide part of GeneratorStatus.
type WorkersStatus struct {
	// Workers are the holdings serving, ascending, each as its node
	// fields in one number: datacenter × the layout's worker limit +
	// worker (the worker alone when the layout has no datacenter bits).
	Workers []uint64
	// Wanted is how many workers the generator aims to hold (--workers,
	// or the current target under --workers auto); Max its bound.
	Wanted, Max int
	Auto        bool
	// Degraded says which workers do not serve and why, while others do.
	Degraded string
}

func (rt *Generator) workersStatus() WorkersStatus {
	ws := WorkersStatus{Wanted: int(rt.wantW.Load()), Max: rt.maxWorkers, Auto: rt.auto}
	for _, h := range rt.liveHoldings() {
		ws.Workers = append(ws.Workers, h.gen.Datacenter()*rt.cfg.Layout.WorkerLimit()+h.gen.Worker())
	}
	rt.wmu.Lock()
	ws.Degraded = rt.degraded
	rt.wmu.Unlock()
	return ws
}

// heldSlots are the slots of the leases the generator's holders hold, from
// acquisition to the end of the holding: an acquisition never takes one
// (coordinator.Spec.Held), so two holders of one node never hold one
// worker, even while one of them has not yet noticed its lease ended.
// Held is read before an acquisition and a slot recorded after, so one
// window remains: a holder whose take went through in a session that
// then ended records its slot after a sibling read Held, and the sibling
// takes the worker again in the next session. Both hold it for a moment;
// the first's writes are fenced, and the second starts above the
// reservation it read (docs/design.md, Restarts, shutdown, restores).
// The slots are counted, so the first's end leaves the second's held.
func (rt *Generator) heldSlots() map[coordinator.Slot]bool {
	rt.wmu.Lock()
	defer rt.wmu.Unlock()
	if len(rt.slots) == 0 {
		return nil
	}
	out := make(map[coordinator.Slot]bool, len(rt.slots))
	for s := range rt.slots {
		out[s] = true
	}
	return out
}

// holdSlot records that a holder took (on) or gave up a slot.
func (rt *Generator) holdSlot(s coordinator.Slot, on bool) {
	rt.wmu.Lock()
	defer rt.wmu.Unlock()
	if on {
		if rt.slots == nil {
			rt.slots = map[coordinator.Slot]int{}
		}
		rt.slots[s]++
	} else if rt.slots[s] > 1 {
		rt.slots[s]--
	} else {
		delete(rt.slots, s)
	}
}

// isWide: the generator may hold more than one worker.
func (rt *Generator) isWide() bool { return rt.maxWorkers > 1 || rt.auto }

// dropMembers stops the n newest members: each releases its lease.
func (rt *Generator) dropMembers(n int) {
	rt.wmu.Lock()
	ms := rt.members[max(len(rt.members)-n, 1):]
	var cancels []func()
	for _, m := range ms {
		cancels = append(cancels, m.cancel)
	}
	rt.wmu.Unlock()
	for _, c := range cancels {
		c()
	}
}

// --- ranges --------------------------------------------------------------

// issueRuns returns n IDs as runs of consecutive IDs, increasing: what
// the ring holds first (as issue would hand it out), then the source's
// output in turns of the fair share, without an ID per slot.
func (rt *Generator) issueRuns(ctx context.Context, n uint64) ([]generator.Run, error) {
	if rt.isSegment() {
		return rt.segmentRanges(ctx, n)
	}
	f, err := rt.enter(ctx, int(n))
	if err != nil {
		return nil, err
	}
	if f == nil {
		// At most one turn, and the ring holds it: as issue.
		ids, err := rt.issueSmall(ctx, int(n))
		if err != nil {
			return nil, err
		}
		return appendIDRuns(nil, ids), nil
	}
	defer rt.fair.Leave(f, int(n))
	runs := make([]generator.Run, 0, 8)
	var scratch []uint64
	got := uint64(0)
	var tries sourceTries
	for got < n {
		grant, err := rt.acquireTurn(ctx, f, int(min(n-got, 1<<40)))
		if err != nil {
			if err == admission.ErrInterrupted {
				if err := rt.refusal(); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		if want := min(grant, rt.ring.Cap()); cap(scratch) < want {
			scratch = make([]uint64, want)
		}
		// Room for the runs one turn may add: a block per member and
		// unit it spans.
		need := grant/int(rt.cfg.Layout.PerUnit()) + 2*len(rt.liveHoldings()) + 4
		if cap(runs)-len(runs) < need {
			runs = slices.Grow(runs, need)
		}
		var nr int
		var made uint64
		took, err := rt.ring.DrainThen(ctx, scratch[:min(grant, cap(scratch))], func(took int) error {
			if took == grant {
				return nil
			}
			var err error
			nr, made, err = rt.wide.TryRuns(runs[len(runs):len(runs)+need], uint64(grant-took), true)
			return err
		})
		produced := runs[len(runs) : len(runs)+nr]
		if took > 0 {
			// The ring's IDs are older than the source's: they go first
			// (rare: a range caller usually finds the ring taken).
			produced = slices.Clone(produced)
			runs = appendIDRuns(runs, scratch[:took])
		}
		for _, r := range produced {
			runs = appendRun(runs, r)
		}
		rt.fair.Release()
		got += uint64(took) + made
		if err == nil && took == 0 && made == 0 {
			err = rt.wide.AwaitBulk(ctx)
		}
		if err != nil {
			if retry, err := rt.sourceErr(err, &tries); !retry {
				return nil, err
			}
		}
	}
	rt.issued.Add(n)
	return runs, nil
}

// issueSmall is issue for a request the ring serves.
func (rt *Generator) issueSmall(ctx context.Context, n int) ([]uint64, error) {
	dst := make([]uint64, n)
	if err := rt.fill(ctx, nil, dst); err != nil {
		return nil, err
	}
	return dst, nil
}

// appendRun appends r, merging it into the last run when they meet.
func appendRun(runs []generator.Run, r generator.Run) []generator.Run {
	if k := len(runs); k > 0 && runs[k-1].First+runs[k-1].Count == r.First {
		runs[k-1].Count += r.Count
		return runs
	}
	return append(runs, r)
}

// appendIDRuns appends increasing IDs as runs.
func appendIDRuns(runs []generator.Run, ids []uint64) []generator.Run {
	for _, id := range ids {
		runs = appendRun(runs, generator.Run{First: id, Count: 1})
	}
	return runs
}

// --- --workers auto --------------------------------------------------------

// autoWorkers follows the generator's rate under --workers auto: while
// what it issues stays above autoHigh of what its serving workers can
// produce, it doubles them (up to --max-workers: saturated, the rate says
// only that demand is at least the capacity); once the rate has fitted in
// fewer workers for autoIdle, it releases the extras, down to one.
func (rt *Generator) autoWorkers(ctx context.Context, clock clockguard.Clock, add func(n int), remove func(n int)) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	per := rt.cfg.Layout.Rate()
	var highFor int
	var fitSince time.Duration
	haveFit := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, mono := clock.Now()
		r := rt.RecentRate(mono)
		rt.wmu.Lock()
		n := len(rt.members)
		rt.wmu.Unlock()
		live := len(rt.liveHoldings())
		if live > 0 && r > autoHigh*per*float64(live) {
			highFor++
		} else {
			highFor = 0
		}
		if highFor >= 2 && n < rt.maxWorkers && live == n {
			highFor = 0
			more := min(n, rt.maxWorkers-n)
			rt.wantW.Store(int64(n + more))
			add(more)
			continue
		}
		needed := max(int(r/(autoHigh*per))+1, 1)
		if needed >= n {
			haveFit = false
			continue
		}
		if !haveFit {
			haveFit, fitSince = true, mono
		}
		if mono-fitSince >= autoIdle {
			haveFit = false
			rt.wantW.Store(int64(needed))
			remove(n - needed)
		}
	}
}

// autoHigh is the share of the serving workers' rate above which --workers
// auto leases another; autoIdle how long the rate must fit in fewer before
// the extras are released.
const (
	autoHigh = 0.8
	autoIdle = time.Minute
)
