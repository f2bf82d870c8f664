package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/server/clockpolicy"
)

// holder runs one generator's worker leases for the node's life: acquire a
// worker, wait until the clock reaches its floor, make the first
// reservation, serve while the coordinator.Reserver keeps the reservation
// one window ahead, release on the way out, and acquire again after any
// loss (docs/design.md, Why duplicates cannot happen; Liveness rules). One
// lease and the generator built for it are a holding, for life.
type holder struct {
	rt    *Generator
	coord coordinator.Coordinator
	// journal is rt's data-dir journal (Core.journalFor).
	journal coordinator.Journal
	clock   clockguard.Clock
	policy  *clockpolicy.Policy
	log     *slog.Logger
	m       holderMetrics
	node    coordinator.NodeInfo
	cfg     holderConfig
	// crashed, when set, makes the way out write nothing (Core.Crash).
	crashed *atomic.Bool
	// ls is where this holder reports its lease: the generator's serving
	// state, or its member record in a wide generator (members.go).
	ls leaseState
	// cur is the holding being served (nil between holdings).
	cur atomic.Pointer[holding]
	// runCtx, when set, is the holder's own context (a wide generator's
	// member, stopped on its own); done runs when run returns.
	runCtx context.Context
	done   func()
}

// ctx is the context run runs under: the holder's own, or parent.
func (hd *holder) ctx(parent context.Context) context.Context {
	if hd.runCtx != nil {
		return hd.runCtx
	}
	return parent
}

// holderConfig is what a holder reads of the node's configuration.
type holderConfig struct {
	Datacenter         int64
	ReservationWindow  time.Duration
	RefreshInterval    time.Duration
	CoordinatorTimeout time.Duration
	MaxClockOffset     time.Duration
	// RestoreGuard: a take starts at least this far above the clock
	// (Config.RestoreGuard; docs/design.md, Restores).
	RestoreGuard time.Duration
}

// holderMetrics are the coordinator metrics the holders feed; the node
// registers them.
type holderMetrics struct {
	latency  *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	restores *prometheus.CounterVec
}

func newHolderMetrics(gens []*Generator) holderMetrics {
	m := holderMetrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "firn_coordinator_operation_duration_seconds",
			Help:    "Latency of coordinator operations.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}}, []string{"op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "firn_coordinator_errors_total",
			Help: "Coordinator operations that failed."}, []string{"op"}),
		restores: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "firn_coordinator_restores_detected_total",
			Help: "Times this node found the coordinator below a reservation it had acknowledged (a restore from an older snapshot) and wrote the generator's restore marker."}, []string{"generator"}),
	}
	for _, op := range []string{"acquire", "reserve"} {
		m.errors.WithLabelValues(op)
	}
	for _, g := range gens {
		m.restores.WithLabelValues(g.cfg.Name)
	}
	return m
}

func (m holderMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.latency, m.errors, m.restores}
}

// holdingIDs numbers the process's holdings (holding.id).
var holdingIDs atomic.Uint64

// holding is one lease and the generator built for it, for life.
type holding struct {
	// id tells this holding's interval from any other of the process in
	// the "holder interval" events: two holdings of one node on one
	// worker may stand at once for a moment (one whose lease ended, not
	// yet noticed, beside the one that took the worker again).
	id    uint64
	gen   *generator.Generator
	lease coordinator.Lease
	rs    *coordinator.Reserver
	// reserved is the last reservation acknowledged (time-field units);
	// -1 before the first.
	reserved atomic.Int64
	released atomic.Bool // Release lowered the reservation to the highest time produced
	started  time.Time
	// guarded: the floor is the restore guard's, above the coordinator's.
	guarded bool
	// wake asks the Reserver's loop for a write now.
	wake chan struct{}

	// expiry fires shortly before the reservation runs out unless a new
	// one was acknowledged meanwhile (armExpiry): the generator then stops
	// serving before a call could find it unable to produce.
	expMu   sync.Mutex
	expiry  *time.Timer
	closed  bool
	latency time.Duration // the slowest recent reservation write, decaying
	// grace is the monotonic reading before which the timer does not
	// fire: a write asked for at once (stepped) may land until then. A
	// write sent before, whose acknowledgement comes after, does not cut
	// it short (with the clock in doubt it was held at the old value).
	grace   time.Duration
	lastErr atomic.Pointer[string] // the last failed write's error, for the expiry reason
}

// stopExpiry disarms the expiry timer for good (the holding ended).
func (h *holding) stopExpiry() {
	h.expMu.Lock()
	h.closed = true
	if h.expiry != nil {
		h.expiry.Stop()
	}
	h.expMu.Unlock()
}

// run acquires a lease, serves it for life, and acquires again after any
// loss, until ctx ends.
func (hd *holder) run(ctx context.Context) {
	if hd.done != nil {
		defer hd.done()
	}
	backoff := 200 * time.Millisecond
	hd.ls.SetCause(clockguard.SourceLease, "acquiring a worker ID", clockguard.Detail{Code: clockguard.CodeStarting})
	for ctx.Err() == nil {
		h, err := hd.acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			hd.noteAcquireError(err)
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 200 * time.Millisecond
		hd.serve(ctx, h)
	}
}

// sleepCtx waits d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (hd *holder) noteAcquireError(err error) {
	rt := hd.rt
	var nameErr *coordinator.NameInUseError
	var restored *coordinator.RestoredError
	var rolled *coordinator.RolledBackError
	var recreated *coordinator.RecreatedError
	// The lease's hold ("acquiring a worker ID", held since the start)
	// is the oldest cause and so decides the code a call is refused with:
	// it takes the code of what refuses the acquisition, so that a restore
	// marker or a name held elsewhere is not reported as STARTING.
	refused := func(code clockguard.Code) {
		hd.ls.SetCause(clockguard.SourceLease, "acquiring a worker ID", clockguard.Detail{Code: code})
	}
	switch {
	case errors.As(err, &restored):
		rt.state.Set(clockguard.SourceCoordinator, hd.restoreReason(restored.Evidence))
		refused(clockguard.CodeRestoreDetected)
	case errors.As(err, &rolled):
		// The data dir remembers more than the coordinator shows: a
		// restore. The marker stops every node, not only this one.
		hd.markRestored(rolled)
		refused(clockguard.CodeRestoreDetected)
	case errors.As(err, &nameErr):
		rt.state.Set(clockguard.SourceInstance, err.Error())
		refused(clockguard.CodeInstanceConflict)
	case errors.As(err, &recreated):
		rt.state.Set(clockguard.SourceCoordinator, hd.recreatedReason(recreated))
		refused(clockguard.CodeRestoreDetected)
	case errors.Is(err, coordinator.ErrRecreated),
		errors.Is(err, coordinator.ErrLayoutMismatch), errors.Is(err, coordinator.ErrSchemaTooNew):
		rt.state.Set(clockguard.SourceCoordinator, err.Error())
		refused(clockguard.CodeRestoreDetected)
	default:
		hd.ls.SetCause(clockguard.SourceLease, "acquiring a worker ID: "+err.Error(), clockguard.Detail{Code: clockguard.CodeCoordinatorUnavailable})
	}
	hd.m.errors.WithLabelValues("acquire").Inc()
	hd.log.Warn("cannot acquire a worker ID", "generator", rt.cfg.Name, "err", err)
}

// markRestored writes the generator-wide restore marker with what this
// node saw (retrying briefly), and holds the generator out naming the
// restore and the command that clears it.
func (hd *holder) markRestored(rb *coordinator.RolledBackError) {
	rt := hd.rt
	wall, _ := hd.clock.Now()
	ev := coordinator.RestoreEvidence{Generator: rt.cfg.Name, Slot: rb.Slot, Acked: rb.Acked, Shown: rb.Seen, At: wall, Node: hd.node}
	rt.state.Set(clockguard.SourceCoordinator, hd.restoreReason(ev))
	hd.m.restores.WithLabelValues(rt.cfg.Name).Inc()
	hd.log.Error("coordinator state restored from an older snapshot: writing the generator's restore marker; no node serves it until `firn coordinator bump`",
		"generator", rt.cfg.Name, "worker", rb.Slot.Worker, "datacenter", rb.Slot.Datacenter,
		"acknowledged", rb.Acked, "shown", rb.Seen)
	for attempt := 0; attempt < 5; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*hd.cfg.CoordinatorTimeout)
		err := hd.coord.MarkRestored(ctx, ev)
		cancel()
		if err == nil {
			return
		}
		hd.log.Warn("cannot write the restore marker yet", "generator", rt.cfg.Name, "err", err)
		sleepCtx(context.Background(), 200*time.Millisecond)
	}
}

// recreatedReason is the serving-state reason of a pin this node's data
// dir does not know: what happened, and the bump that lets it serve again
// when the coordinator's data was lost (a floor above everything it
// reserved or saw acknowledged; the other nodes' writes since the last
// backup are the operator's to add, as after a restore).
func (hd *holder) recreatedReason(e *coordinator.RecreatedError) string {
	wall, _ := hd.clock.Now()
	gap := time.Duration(max(e.Top-hd.rt.cfg.Layout.Units(wall), 0)) * hd.rt.cfg.Layout.Unit
	return fmt.Sprintf("%v; if the coordinator's data was lost, `firn coordinator bump --generator %s --by D` with D at least %v plus --reservation-window %v lets this node serve again (a generator floor above reservation %d) — every node's writes since are lost too, so size D as after a restore (docs/coordination.md); if this node points at another cluster than before, correct its flags",
		e, e.Generator, gap.Round(time.Millisecond), hd.cfg.ReservationWindow, e.Top)
}

// restoreReason is the serving-state reason while a restore marker stands:
// the evidence, and the exact command that clears it.
func (hd *holder) restoreReason(ev coordinator.RestoreEvidence) string {
	gap := time.Duration(ev.MinBump(max(hd.rt.cfg.Layout.Units(ev.At), ev.Shown))) * hd.rt.cfg.Layout.Unit
	shown := fmt.Sprintf("reservation %d", ev.Shown)
	if ev.Shown < 0 {
		shown = "no reservation"
	}
	return fmt.Sprintf("coordinator state restored from an older snapshot: generator %q %s showed %s where node %q had %d acknowledged (seen %s); no node serves this generator until an operator runs `firn coordinator bump --generator %s --by D` with D at least %v plus the writes the snapshot missed (the time from the snapshot to the restore) plus --reservation-window %v",
		ev.Generator, ev.Slot, shown, ev.Node.Name, ev.Acked, ev.At.UTC().Format(time.RFC3339), ev.Generator,
		gap.Round(time.Millisecond), hd.cfg.ReservationWindow)
}

// acquire takes a lease and builds a new generator on it.
func (hd *holder) acquire(ctx context.Context) (*holding, error) {
	rt := hd.rt
	l := rt.cfg.Layout
	wall, _ := hd.clock.Now()
	leadUnits := int64(rt.cfg.MaxLead / l.Unit)
	spec := coordinator.Spec{
		Generator:       rt.cfg.Name,
		Layout:          l.String(),
		WorkerLimit:     l.WorkerLimit(),
		DatacenterLimit: l.DatacenterLimit(),
		Datacenter:      hd.cfg.Datacenter,
		MaxFloor:        max(0, l.Units(wall)+leadUnits),
		LocalFloor:      rt.local.LocalFloor(),
		Held:            rt.heldSlots(),
	}
	actx, cancel := context.WithTimeout(ctx, 4*hd.cfg.CoordinatorTimeout)
	_, m0 := hd.clock.Now()
	lease, err := hd.coord.Acquire(actx, spec, hd.node)
	cancel()
	_, m1 := hd.clock.Now()
	hd.m.latency.WithLabelValues("acquire").Observe((m1 - m0).Seconds())
	if err != nil {
		return nil, err
	}
	rt.holdSlot(lease.Slot(), true)
	fail := func(err error, keep int64) (*holding, error) {
		rctx, cancel := context.WithTimeout(context.Background(), hd.cfg.CoordinatorTimeout)
		lease.Release(rctx, keep)
		cancel()
		rt.holdSlot(lease.Slot(), false)
		return nil, err
	}
	if err := rt.local.Check(lease); err != nil {
		// Released without lowering anything below what was read.
		return fail(err, max(lease.Floor(), rt.local.AckedFor(lease.Slot())))
	}
	floor := lease.Floor()
	// The restore guard (docs/design.md, Restores): the coordinator may
	// have been restored from a snapshot that misses what a holder still
	// cut off from it acknowledged. No take can tell; every take on a
	// shared coordinator starts above anything such a holder could issue:
	// its clock, up to the skew bound ahead of this one, plus the window
	// and max-lead. Read after the take: the later, the safer.
	guard := int64(-1)
	if hd.cfg.RestoreGuard > 0 {
		// On a clock the node's checks vouch for: a clock an hour ahead,
		// not yet confirmed, would place the guard an hour ahead and hold
		// the worker for the hour. Read later, the guard is only higher.
		// The worker is held meanwhile: its owner record is what makes
		// this node one of the live nodes the peer check counts.
		if err := hd.awaitCheckedClock(ctx, lease); err != nil {
			return fail(err, lease.Floor())
		}
		now, _ := hd.clock.Now()
		guard = l.Units(now.Add(hd.cfg.RestoreGuard))
		floor = max(floor, guard)
	}
	g, err := generator.New(generator.Config{
		Layout:     l,
		Worker:     lease.WorkerID(),
		Datacenter: lease.Datacenter(),
		Clock:      hd.clock,
		Floor:      floor,
		// Nothing is issued before the first acknowledged reservation.
		Reserved:       -1,
		MaxLead:        rt.cfg.MaxLead,
		MaxForwardStep: hd.cfg.MaxClockOffset,
	})
	if err != nil {
		return fail(err, lease.Floor())
	}
	h := &holding{id: holdingIDs.Add(1), gen: g, lease: lease, started: wall, wake: make(chan struct{}, 1), guarded: guard >= floor && guard > lease.Floor()}
	h.reserved.Store(-1)
	hd.log.Info("holder interval opened", "event", "holder_open", "generator", rt.cfg.Name, "holding", h.id,
		"worker", lease.WorkerID(), "datacenter", lease.Datacenter(), "floor", floor, "coordinator_floor", lease.Floor(),
		"incarnation", lease.Incarnation(), "node", hd.node.Name, "instance", hd.node.InstanceID)
	return h, nil
}

// awaitCheckedClock waits until nothing holds the clock in doubt — NTP,
// the peers, an unchecked clock, a forward step not yet confirmed — so
// that the restore guard is placed on a reading the node's checks vouch
// for; it ends with ctx or the lease, whose heartbeat it keeps fresh
// meanwhile (beat). While it waits, the lease's reason
// says so with the detail of the doubt, so that a refusal names the
// clock's cause, not "starting".
func (hd *holder) awaitCheckedClock(ctx context.Context, lease coordinator.Lease) error {
	_, beat := hd.clock.Now()
	for {
		hd.policy.GateCheck()
		if !hd.clockInDoubt() && !hd.policy.GateHeld() {
			return nil
		}
		if wall, mono := hd.clock.Now(); mono-beat >= hd.cfg.RefreshInterval {
			hd.beat(ctx, lease, wall)
			beat = mono
		}
		if d, ok := hd.doubt(); ok {
			hd.ls.SetCause(clockguard.SourceLease, "worker taken; waiting for the clock to be checked (NTP, the peers) to place the restore guard on it", d)
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-lease.Done():
			t.Stop()
			return fmt.Errorf("%w: lost while waiting for a checked clock to place the restore guard", coordinator.ErrLeaseLost)
		case <-t.C:
		}
	}
}

// doubt is the detail of what holds the clock in doubt; false when
// nothing the state holds says (a forward step the gate has not reported
// yet).
func (hd *holder) doubt() (clockguard.Detail, bool) {
	for _, c := range hd.rt.state.Snapshot().Causes {
		switch c.Source {
		case clockguard.SourceClockUnchecked, clockguard.SourceNTP, clockguard.SourcePeers, clockguard.SourceClockStep:
			return c.Detail, true
		}
	}
	return clockguard.Detail{}, false
}

// serve runs one holding until its lease is lost or ctx ends.
func (hd *holder) serve(ctx context.Context, h *holding) {
	rt := hd.rt
	l := rt.cfg.Layout
	leadUnits := int64(rt.cfg.MaxLead / l.Unit)
	lease, g := h.lease, h.gen
	defer func() {
		g.Retire()
		h.stopExpiry()
		hd.ls.leave(h)
		hd.cur.Store(nil)
		hd.log.Info("holder interval closed", "event", "holder_close", "generator", rt.cfg.Name, "holding", h.id,
			"worker", lease.WorkerID(), "datacenter", lease.Datacenter(), "floor", g.Floor(),
			"reserved", h.reserved.Load(), "highest", g.Highest(), "released", h.released.Load(), "node", hd.node.Name)
		// Given up only after the close is told: another holder of this
		// node may take the worker again at once (an ended session's
		// workers are taken again first), and its interval opens after
		// this one closed.
		rt.holdSlot(lease.Slot(), false)
	}()

	// The acquisition went through: no restore marker stands, the pin
	// and the name are this node's. What remains is the wait for the
	// floor and the first reservation, which say so themselves.
	rt.state.Clear(clockguard.SourceCoordinator)
	rt.state.Clear(clockguard.SourceInstance)

	// A floor far ahead of the clock (a restart after this node reserved
	// ahead, a bump, the restore guard): wait until it lies within
	// max-lead, reading the clock again at least every 500 ms.
	what := "this worker's last reservation"
	if h.guarded {
		what = fmt.Sprintf("the restore guard (a take starts above what a holder the coordinator may have forgotten could have issued: now + %v)", hd.cfg.RestoreGuard)
	}
	_, beat := hd.clock.Now() // the take wrote the record: the next beat one interval later
	for {
		wall, mono := hd.clock.Now()
		ahead := g.Floor() + 1 - l.Units(wall) - leadUnits
		if ahead <= 0 {
			break
		}
		if mono-beat >= hd.cfg.RefreshInterval {
			hd.beat(ctx, lease, wall)
			beat = mono
		}
		wait := time.Duration(ahead) * l.Unit
		hd.ls.SetCause(clockguard.SourceLease, fmt.Sprintf("waiting %v for the clock to reach %s (max-lead %v)",
			wait.Round(time.Millisecond), what, rt.cfg.MaxLead),
			clockguard.Detail{Code: clockguard.CodeStarting, Limit: rt.cfg.MaxLead.String(), Measured: wait.Round(time.Millisecond).String(), RetryAt: wall.Add(wait)})
		t := time.NewTimer(min(wait, 500*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			hd.release(h)
			return
		case <-lease.Done():
			t.Stop()
			hd.ls.Set(clockguard.SourceLease, "lease lost while waiting for the clock")
			return
		case <-t.C:
		}
	}

	hd.cur.Store(h)
	hd.ls.join(h)
	// The Reserver's loop makes the first reservation at once, then keeps
	// it one window ahead. Until the first is acknowledged the generator
	// does not serve, naming why, and it is retried every 200 ms.
	first := true
	rs, err := hd.newReserver(h, func(err error, took time.Duration) {
		hd.afterStep(h, err, took)
		if !first {
			return
		}
		first = false
		if err != nil && (errors.Is(err, coordinator.ErrLeaseLost) || errors.Is(err, coordinator.ErrRolledBack)) {
			return
		}
		if err != nil {
			// Written again every reserveRetry: a caller retrying sooner
			// is refused again (RetryInfo, as for a reservation run out).
			hd.ls.SetCause(clockguard.SourceReservation, "first reservation not confirmed by the coordinator: "+err.Error(),
				clockguard.Detail{Code: clockguard.CodeCoordinatorUnavailable, RetryEvery: reserveRetry})
		}
		hd.ls.Clear(clockguard.SourceLease)
		rt.state.Clear(clockguard.SourceInstance)
		rt.state.Clear(clockguard.SourceCoordinator)
		hd.ls.Ready()
	})
	if err != nil {
		hd.ls.SetCause(clockguard.SourceLease, "cannot keep a reservation: "+err.Error(), clockguard.Detail{Code: clockguard.CodeCoordinatorUnavailable})
		hd.release(h)
		return
	}
	h.rs = rs
	err = rs.Run(ctx)
	switch {
	case ctx.Err() != nil:
		hd.release(h)
	case errors.Is(err, coordinator.ErrRolledBack):
		hd.rolledBack(h, err)
	default:
		hd.ls.Set(clockguard.SourceLease, "lease lost (expired or taken over); acquiring again: "+err.Error())
	}
}

// beat refreshes the owner record's heartbeat without raising the
// reservation — a fenced Reserve of what the lease already holds — while
// the holder waits for its floor and so writes no reservation. A record
// left older than coordinator.TakeBackAge would be taken back by another
// process of this instance (a replacement on this data dir, or a zombie
// of it thawed), which would then wait for its own floor unrefreshed, and
// the two could take the worker from each other forever. A slot never
// reserved is reserved at 0, the epoch, which allows nothing; a failed
// beat is the next one's or the Reserver's to notice.
func (hd *holder) beat(ctx context.Context, lease coordinator.Lease, wall time.Time) {
	r := max(lease.Reserved(), 0)
	cctx, cancel := context.WithTimeout(ctx, 2*hd.cfg.CoordinatorTimeout)
	defer cancel()
	if err := lease.Reserve(cctx, r, coordinator.Heartbeat{Node: hd.node, Wall: wall}); err != nil {
		hd.log.Debug("heartbeat while waiting for the floor not written", "generator", hd.rt.cfg.Name,
			"worker", lease.WorkerID(), "datacenter", lease.Datacenter(), "err", err)
	}
}

// rolledBack ends a holding whose reservation the coordinator showed below
// one acknowledged: the generator stops, the restore marker is written for
// every node, and the lease is released without lowering anything.
func (hd *holder) rolledBack(h *holding, err error) {
	rt := hd.rt
	h.gen.Retire()
	hd.ls.leave(h)
	var rb *coordinator.RolledBackError
	if errors.As(err, &rb) {
		hd.markRestored(rb)
	} else {
		rt.state.Set(clockguard.SourceCoordinator, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*hd.cfg.CoordinatorTimeout)
	defer cancel()
	if err := h.lease.Release(ctx, max(h.reserved.Load(), h.lease.Floor())); err != nil {
		hd.log.Warn("lease not released after the restore was noticed; it will expire", "generator", rt.cfg.Name, "err", err)
	}
}

// newReserver builds the coordinator's Reserver for one holding: one
// window ahead of max(L, now), journaled in the data dir before each write
// (within a deadline), held below an unconfirmed forward clock step.
func (hd *holder) newReserver(h *holding, after func(error, time.Duration)) (*coordinator.Reserver, error) {
	rt := hd.rt
	l := rt.cfg.Layout
	return coordinator.NewReserver(coordinator.ReserverConfig{
		Lease: h.lease,
		Node:  hd.node,
		Clock: hd.clock,
		Now: func() int64 {
			wall, _ := hd.clock.Now()
			return l.Units(wall)
		},
		Logical: h.gen.Logical,
		Gate:    func(wanted int64) int64 { return hd.holdReserved(h, wanted) },
		Journal: newBoundedJournal(hd.journal, 2*hd.cfg.CoordinatorTimeout),
		OnAck: func(r int64) {
			h.reserved.Store(r)
			h.gen.SetReserved(r)
			hd.armExpiry(h)
			hd.log.Debug("reservation acknowledged", "event", "holder_reserve", "generator", rt.cfg.Name, "holding", h.id,
				"worker", h.lease.WorkerID(), "datacenter", h.lease.Datacenter(), "reserved", r)
		},
		Window:        max(int64(hd.cfg.ReservationWindow/l.Unit), 1),
		MaxUntil:      l.MaxTime(),
		Interval:      hd.cfg.RefreshInterval,
		RetryInterval: reserveRetry,
		CallTimeout:   2 * hd.cfg.CoordinatorTimeout,
		Wake:          h.wake,
		BeforeStep:    hd.policy.PollSteps,
		AfterStep:     after,
		Logger:        hd.log,
	})
}

// holdReserved is the Reserver's gate: while a forward step awaits
// confirmation, reservations are not raised past what is held.
//
// The same holds while NTP or the peers say the clock is off (or have not
// said yet, at start): a node started with a clock an hour fast must not
// reserve an hour ahead, which would hold its worker, and its own restart
// after the correction, for that hour. The heartbeat still flows with the
// held reservation.
func (hd *holder) holdReserved(h *holding, wanted int64) int64 {
	hd.policy.GateCheck()
	if hd.policy.GateHeld() || hd.clockInDoubt() {
		return min(wanted, max(h.reserved.Load(), 0))
	}
	return wanted
}

// clockInDoubt reports whether NTP or the peer check holds the generator
// out, or nothing checks the clock: the clock is off, or not checked.
func (hd *holder) clockInDoubt() bool {
	for _, src := range []clockguard.Source{clockguard.SourceNTP, clockguard.SourcePeers, clockguard.SourceClockUnchecked} {
		if _, held := hd.rt.state.Holds(src); held {
			return true
		}
	}
	return false
}

// reserveRetry is how soon the holder writes again after a reservation
// write that failed.
const reserveRetry = 200 * time.Millisecond

// reserveRetryDetail is the detail of a reservation that ran out: the
// generator serves again no sooner than the next write, reserveRetry
// after the last (RetryInfo: a caller retrying sooner is refused again).
var reserveRetryDetail = clockguard.Detail{Code: clockguard.CodeReservationExhausted, RetryEvery: reserveRetry}

// afterStep feeds one reservation write's outcome to the serving state
// and the metrics.
func (hd *holder) afterStep(h *holding, err error, took time.Duration) {
	rt := hd.rt
	hd.m.latency.WithLabelValues("reserve").Observe(took.Seconds())
	if err != nil {
		hd.m.errors.WithLabelValues("reserve").Inc()
		msg := err.Error()
		h.lastErr.Store(&msg)
		// Not extended: the generator stops at the old reservation (the
		// expiry timer takes it out shortly before).
		wall, _ := hd.clock.Now()
		left := rt.cfg.Layout.UnitStart(h.reserved.Load() + 1).Sub(wall)
		if left <= 0 && h.reserved.Load() >= 0 {
			hd.ls.SetCause(clockguard.SourceReservation, fmt.Sprintf("reservation exhausted: the coordinator did not confirm a new one (%v)", err),
				reserveRetryDetail)
		}
		if !errors.Is(err, coordinator.ErrLeaseLost) {
			hd.log.Warn("reservation not extended", "generator", rt.cfg.Name, "worker", h.lease.WorkerID(),
				"left", left.Round(time.Millisecond), "err", err)
		}
		return
	}
	h.noteWriteLatency(took)
	hd.armExpiry(h)
	hd.ls.Clear(clockguard.SourceReservation)
}

// stepped is the clock policy's call after a step of the clock, and when
// a check of the clock lets go of the generator: the current holding
// writes at once and sizes its expiry timer again, no sooner than one
// margin from now (grace), so that the write may land before the
// generator is taken out — also when the reservation was held below the
// clock while it was in doubt, and a write of the held value sent before
// is acknowledged after (it extends nothing: sized from it alone, the
// timer would fire at once, and the generator that had just said it
// serves would refuse until the next write).
func (hd *holder) stepped() {
	h := hd.cur.Load()
	if h == nil {
		return
	}
	m := hd.expiryMargin(h)
	_, mono := hd.clock.Now()
	h.expMu.Lock()
	h.grace = mono + m
	h.expMu.Unlock()
	hd.armExpiry(h)
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// release stops the generator and frees the lease, lowering the
// reservation to the highest time produced.
func (hd *holder) release(h *holding) {
	rt := hd.rt
	h.gen.Retire()
	hd.ls.leave(h)
	if hd.crashed != nil && hd.crashed.Load() {
		return // a killed process releases nothing
	}
	highest := max(h.gen.Highest(), h.lease.Floor())
	ctx, cancel := context.WithTimeout(context.Background(), 2*hd.cfg.CoordinatorTimeout)
	defer cancel()
	if err := runBounded(ctx, func() error { return rt.local.BeforeRelease(h.lease.Slot(), highest) }); err != nil {
		hd.log.Warn("cannot lower the data-dir reservation; the lease is left to expire", "generator", rt.cfg.Name, "err", err)
		return
	}
	if err := h.lease.Release(ctx, highest); err != nil {
		hd.log.Warn("lease not released; it will expire", "generator", rt.cfg.Name, "worker", h.lease.WorkerID(), "err", err)
		return
	}
	h.released.Store(true)
	hd.log.Info("lease released", "generator", rt.cfg.Name, "worker", h.lease.WorkerID(), "highest", highest)
}

// --- reservation expiry --------------------------------------------------

// expiryMargin is how long before the reservation runs out a generator
// stops serving if no new one was acknowledged: twice the slowest recent
// write (what the next write may take), at least minExpiryMargin and one
// unit, at most --coordinator-timeout.
func (hd *holder) expiryMargin(h *holding) time.Duration {
	h.expMu.Lock()
	lat := h.latency
	h.expMu.Unlock()
	return min(max(2*lat, minExpiryMargin, hd.rt.cfg.Layout.Unit), hd.cfg.CoordinatorTimeout)
}

// minExpiryMargin is the least margin: the expiry timer itself may fire
// late on a busy machine (160 and 176 ms late were seen on two cores
// running the race-instrumented suite), and the generator must be out of
// service before, not after, its reservation ends. A wider margin costs
// nothing while the coordinator answers: the timer is re-armed by every
// acknowledged write, a window ahead.
const minExpiryMargin = 300 * time.Millisecond

// noteWriteLatency records how long an acknowledged write took; the
// record decays so that one slow write is forgotten in a minute.
func (h *holding) noteWriteLatency(d time.Duration) {
	h.expMu.Lock()
	h.latency = max(d, h.latency*9/10)
	h.expMu.Unlock()
}

// armExpiry (re)sets the timer that takes the generator out of service
// shortly before its reservation runs out, sized from a fresh clock
// reading, and no sooner than the holding's grace; a clock step re-arms
// it (stepped).
func (hd *holder) armExpiry(h *holding) {
	rt := hd.rt
	r := h.reserved.Load()
	if r < 0 {
		return
	}
	var atLeast time.Duration
	hd.policy.GateCheck()
	if hd.policy.GateHeld() {
		// A forward step unconfirmed: the generator does not serve, and
		// the reservation held below the step is given one margin.
		atLeast = hd.expiryMargin(h)
	}
	wall, mono := hd.clock.Now()
	left := rt.cfg.Layout.UnitStart(r+1).Sub(wall) - max(h.gen.Lead(wall), 0) - hd.expiryMargin(h)
	left = max(left, atLeast)
	h.expMu.Lock()
	defer h.expMu.Unlock()
	if h.closed {
		return
	}
	left = max(left, h.grace-mono)
	if h.expiry != nil {
		h.expiry.Stop()
	}
	h.expiry = time.AfterFunc(max(left, 0), func() { hd.expired(h, r) })
}

// expired runs when the reservation r is about to run out: unless a newer
// one was acknowledged meanwhile, the generator stops serving, naming the
// cause, until a write succeeds.
func (hd *holder) expired(h *holding, r int64) {
	rt := hd.rt
	if h.reserved.Load() != r || hd.cur.Load() != h {
		return
	}
	h.expMu.Lock()
	closed := h.closed
	h.expMu.Unlock()
	if closed {
		return
	}
	if hd.clockInDoubt() {
		// The reservation is held below the clock on purpose and the
		// clock's reason holds the generator out; clearing it re-arms this
		// timer (clearDoubt → stepped). Said here, the reason would come
		// and go with every acknowledged write.
		return
	}
	until := rt.cfg.Layout.UnitStart(r + 1)
	reason := fmt.Sprintf("reservation runs out at %s and the coordinator has not confirmed a new one", until.UTC().Format(time.RFC3339Nano))
	if e := h.lastErr.Load(); e != nil {
		reason += " (" + *e + ")"
	}
	hd.ls.SetCause(clockguard.SourceReservation, reason, reserveRetryDetail)
}
