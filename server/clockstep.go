package server

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
)

// The forward-step gate (docs/design.md, Clock policy; README, Clock policy).
//
// A forward step of the clock larger than --max-clock-offset, measured from
// the largest wall − monotonic offset the node has accepted, is not
// believed until something taken after it agrees: an NTP check begun after
// the step, or the peer median on two readings of heartbeats received after
// it. Until then every generator is out of service (reason "clock-step"),
// reservations are held below the step, and the generators refuse the
// stepped reading themselves (generator.MaxForwardStep), so no ID carries
// the stepped time. The clock coming back within the limit of the accepted
// offset ends the gate by itself. With no NTP configured and fewer than
// three live nodes there is nothing to ask: the step is accepted
// unconfirmed, and said so loudly. NTP configured but unreachable (required
// or not) confirms nothing: the gate holds until it answers.
type fwdGate struct {
	mu       sync.Mutex
	top      time.Duration // the largest wall − mono offset accepted
	pending  bool
	size     time.Duration // the step beyond top
	stepMono time.Duration // monotonic reading when the step was seen
	stepWall time.Time     // wall reading when the step was seen (after it)
	peerOK   int           // agreeing peer readings since the step, in a row

	held atomic.Bool // pending, for the Reserver's gate
}

// clockOffset is wall − mono of one reading.
func clockOffset(wall time.Time, mono time.Duration) time.Duration {
	return time.Duration(wall.UnixNano()) - mono
}

func (n *Node) initGate() {
	wall, mono := n.clock.Now()
	n.gate.mu.Lock()
	n.gate.top = clockOffset(wall, mono)
	n.gate.mu.Unlock()
}

// gateReading applies one clock reading (after a step either way, or the
// offset a generator refused): a forward jump beyond the limit opens the
// gate, a reading back within the limit of the accepted offset closes it.
func (n *Node) gateReading(wall time.Time, mono time.Duration) {
	off := clockOffset(wall, mono)
	g := &n.gate
	g.mu.Lock()
	jump := off - g.top
	switch {
	case g.pending && jump <= n.cfg.MaxClockOffset:
		g.pending, g.peerOK = false, 0
		g.held.Store(false)
		g.mu.Unlock()
		n.log.Info("clock came back before the forward step was confirmed; serving again", "step", g.size)
		n.gateClosed()
		return
	case g.pending:
		g.size = jump
		g.mu.Unlock()
		n.setGateReason(jump)
		return
	case jump <= n.cfg.MaxClockOffset:
		g.top = max(g.top, off)
		g.mu.Unlock()
		return
	}
	if len(n.cfg.NTP) == 0 && !n.peersConfigured() {
		g.top = off
		g.mu.Unlock()
		n.log.Warn("forward clock step accepted unconfirmed: no NTP and fewer than 3 live nodes to check it", "size", jump)
		n.confirmGenerators()
		return
	}
	g.pending, g.size, g.stepMono, g.stepWall, g.peerOK = true, jump, mono, wall, 0
	g.held.Store(true)
	g.mu.Unlock()
	n.log.Warn("forward clock step: not serving, reservations held, until NTP or the peer median confirms the clock", "size", jump)
	n.setGateReason(jump)
	if n.ntp != nil {
		n.ntp.Trigger()
	}
}

func (n *Node) setGateReason(size time.Duration) {
	reason := fmt.Sprintf("clock stepped forward %v, beyond --max-clock-offset %v: not serving until NTP or the peer median confirms the clock, or it comes back",
		size.Round(time.Millisecond), n.cfg.MaxClockOffset)
	for _, rt := range n.gens {
		rt.state.Set(clockguard.SourceClockStep, reason)
	}
}

// confirmGate accepts the pending step, if the evidence was taken after it
// (fromMono: the monotonic reading when the evidence began).
func (n *Node) confirmGate(fromMono time.Duration, why string) {
	g := &n.gate
	g.mu.Lock()
	if !g.pending || fromMono < g.stepMono {
		g.mu.Unlock()
		return
	}
	wall, mono := n.clock.Now()
	g.top = clockOffset(wall, mono)
	g.pending, g.peerOK = false, 0
	g.held.Store(false)
	size := g.size
	g.mu.Unlock()
	n.log.Warn("forward clock step confirmed: "+why, "size", size)
	n.confirmGenerators()
	n.gateClosed()
}

// gateClosed clears the gate's reason and wakes every generator.
func (n *Node) gateClosed() {
	for _, rt := range n.gens {
		rt.state.Clear(clockguard.SourceClockStep)
		if h := rt.held.Load(); h != nil {
			h.gen.Wake()
		}
	}
}

// confirmGenerators makes every running generator follow the clock as it
// reads now.
func (n *Node) confirmGenerators() {
	for _, rt := range n.gens {
		if h := rt.held.Load(); h != nil {
			h.gen.ConfirmClock()
		}
	}
}

// gatePending reports whether a forward step awaits confirmation, and the
// wall reading taken right after it.
func (n *Node) gatePending() (bool, time.Time) {
	n.gate.mu.Lock()
	defer n.gate.mu.Unlock()
	return n.gate.pending, n.gate.stepWall
}

// gatePeerReading counts one peer reading made only of heartbeats received
// after the step: two agreeing readings in a row confirm it.
func (n *Node) gatePeerReading(agrees bool) {
	g := &n.gate
	g.mu.Lock()
	if !g.pending {
		g.mu.Unlock()
		return
	}
	if agrees {
		g.peerOK++
	} else {
		g.peerOK = 0
	}
	ok, from := g.peerOK >= 2, g.stepMono
	g.mu.Unlock()
	if ok {
		n.confirmGate(from, "the peer median agrees on two readings")
	}
}

// forwardRefused is a generator's report of a forward step it would not
// follow: the clock policy decides on the reading (a step the detector may
// not have polled yet, or small steps that add up).
func (n *Node) forwardRefused(_ *genRuntime, _ *generator.ForwardStepError) {
	if n.steps != nil {
		n.steps.Poll()
	}
	wall, mono := n.clock.Now()
	n.gateReading(wall, mono)
}

// gateCheck takes a fresh reading to the gate when it shows a forward
// jump the gate has not seen: whoever sizes something from the clock (a
// reservation, the expiry timer) checks first, so that a step between two
// polls of the detector cannot slip into it.
func (n *Node) gateCheck() {
	wall, mono := n.clock.Now()
	n.gate.mu.Lock()
	jump := clockOffset(wall, mono) - n.gate.top
	pending := n.gate.pending
	n.gate.mu.Unlock()
	if !pending && jump > n.cfg.MaxClockOffset {
		n.gateReading(wall, mono)
	}
}

// holdReserved is the Reserver's gate: while a forward step awaits
// confirmation, reservations are not raised past what is held.
func (n *Node) holdReserved(h *holding, wanted int64) int64 {
	n.gateCheck()
	if n.gate.held.Load() {
		return min(wanted, max(h.reserved.Load(), 0))
	}
	return wanted
}

// --- reservation expiry --------------------------------------------------

// expiryMargin is how long before the reservation runs out a generator
// stops serving if no new one was acknowledged: twice the slowest recent
// write (what the next write may take), at least 20 ms and one unit, at
// most --coordinator-timeout.
func (n *Node) expiryMargin(rt *genRuntime, h *holding) time.Duration {
	h.expMu.Lock()
	lat := h.latency
	h.expMu.Unlock()
	return min(max(2*lat, 20*time.Millisecond, rt.cfg.Layout.Unit), n.cfg.CoordinatorTimeout)
}

// noteWriteLatency records how long an acknowledged write took; the
// record decays so that one slow write is forgotten in a minute.
func (h *holding) noteWriteLatency(d time.Duration) {
	h.expMu.Lock()
	h.latency = max(d, h.latency*9/10)
	h.expMu.Unlock()
}

// armExpiry (re)sets the timer that takes the generator out of service
// shortly before its reservation runs out, sized from a fresh clock
// reading; a clock step re-arms it.
func (n *Node) armExpiry(rt *genRuntime, h *holding) { n.armExpiryAt(rt, h, 0) }

// armExpiryAfterStep re-arms the timer after a clock step: a forward step
// may have left the reservation behind the clock, and the write the step
// asked for (askReserve) is given one margin to land before the generator
// is taken out.
func (n *Node) armExpiryAfterStep(rt *genRuntime, h *holding) {
	n.armExpiryAt(rt, h, n.expiryMargin(rt, h))
}

func (n *Node) armExpiryAt(rt *genRuntime, h *holding, atLeast time.Duration) {
	r := h.reserved.Load()
	if r < 0 {
		return
	}
	n.gateCheck()
	if n.gate.held.Load() {
		// A forward step unconfirmed: the generator does not serve, and
		// the reservation held below the step is given one margin.
		atLeast = max(atLeast, n.expiryMargin(rt, h))
	}
	wall, _ := n.clock.Now()
	left := rt.cfg.Layout.UnitStart(r+1).Sub(wall) - max(h.gen.Lead(wall), 0) - n.expiryMargin(rt, h)
	left = max(left, atLeast)
	h.expMu.Lock()
	defer h.expMu.Unlock()
	if h.closed {
		return
	}
	if h.expiry != nil {
		h.expiry.Stop()
	}
	h.expiry = time.AfterFunc(max(left, 0), func() { n.expired(rt, h, r) })
}

// expired runs when the reservation r is about to run out: unless a newer
// one was acknowledged meanwhile, the generator stops serving, naming the
// cause, until a write succeeds.
func (n *Node) expired(rt *genRuntime, h *holding, r int64) {
	if h.reserved.Load() != r || rt.held.Load() != h {
		return
	}
	h.expMu.Lock()
	closed := h.closed
	h.expMu.Unlock()
	if closed {
		return
	}
	until := rt.cfg.Layout.UnitStart(r + 1)
	reason := fmt.Sprintf("reservation runs out at %s and the coordinator has not confirmed a new one", until.UTC().Format(time.RFC3339Nano))
	if e := h.lastErr.Load(); e != nil {
		reason += " (" + *e + ")"
	}
	rt.state.Set(clockguard.SourceReservation, reason)
}

// restoreReason is the serving-state reason while a restore marker stands:
// the evidence, and the exact command that clears it.
func (n *Node) restoreReason(rt *genRuntime, ev coordinator.RestoreEvidence) string {
	l := rt.cfg.Layout
	gap := time.Duration(ev.Gap()) * l.Unit
	shown := fmt.Sprintf("reservation %d", ev.Shown)
	if ev.Shown < 0 {
		shown = "no reservation"
	}
	return fmt.Sprintf("coordinator state restored from an older snapshot: generator %q %s showed %s where node %q had %d acknowledged (seen %s); no node serves this generator until an operator runs `firn coordinator bump --generator %s --by D` with D at least %v plus the writes the snapshot missed (the time from the snapshot to the restore) plus --reservation-window %v",
		ev.Generator, ev.Slot, shown, ev.Node.Name, ev.Acked, ev.At.UTC().Format(time.RFC3339), ev.Generator,
		gap.Round(time.Millisecond), n.cfg.ReservationWindow)
}
