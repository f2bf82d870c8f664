package clockpolicy

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/generator"
)

// fwdGate is the forward-step gate's state.
//
// A forward step of the clock larger than --max-clock-offset, measured from
// the largest wall − monotonic offset the node has accepted, is not
// believed until something taken after it agrees: an NTP check begun after
// the step, or the peer median on two readings of heartbeats received after
// it. Until then every generator is out of service (reason "clock-step"),
// reservations are held below the step, and the generators refuse the
// stepped reading themselves (generator.MaxForwardStep), so no ID carries
// the stepped time. The clock coming back within the limit of the accepted
// offset ends the gate by itself. With no NTP configured on a node that has
// never seen another live node there is nothing to ask: the step is
// accepted unconfirmed, and said so loudly. NTP configured but unreachable (required
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

// gateReading applies one clock reading (after a step either way, or the
// offset a generator refused): a forward jump beyond the limit opens the
// gate, a reading back within the limit of the accepted offset closes it.
// stepped says the reading follows a step the detector saw: while a step
// is pending, the evidence that may confirm it then counts from this
// reading on.
func (p *Policy) gateReading(wall time.Time, mono time.Duration, stepped bool) {
	off := clockOffset(wall, mono)
	g := &p.gate
	g.mu.Lock()
	jump := off - g.top
	switch {
	case g.pending && jump <= p.cfg.MaxClockOffset:
		g.pending, g.peerOK = false, 0
		g.held.Store(false)
		size := g.size
		g.mu.Unlock()
		p.log.Info("clock came back before the forward step was confirmed; serving again", "step", size)
		p.gateClosed()
		return
	case g.pending && stepped:
		// The clock stepped again while a step awaits confirmation:
		// evidence taken before this reading (an NTP check begun, peer
		// heartbeats received) measured another clock, so it counts from
		// here (OnStep asks NTP again).
		g.size, g.stepMono, g.stepWall, g.peerOK = jump, mono, wall, 0
		g.mu.Unlock()
		p.log.Warn("clock stepped again before the forward step was confirmed: confirming from this reading", "size", jump)
		p.setGateReason(jump, wall)
		return
	case g.pending:
		g.size = jump
		g.mu.Unlock()
		p.setGateReason(jump, wall)
		return
	case jump <= p.cfg.MaxClockOffset:
		g.top = max(g.top, off)
		g.mu.Unlock()
		return
	}
	if !p.cfg.NTP && p.alone() {
		g.top = off
		g.mu.Unlock()
		p.log.Warn("forward clock step accepted unconfirmed: no NTP, and no other node was ever seen to check it", "size", jump)
		p.confirmGenerators()
		return
	}
	g.pending, g.size, g.stepMono, g.stepWall, g.peerOK = true, jump, mono, wall, 0
	g.held.Store(true)
	g.mu.Unlock()
	p.log.Warn("forward clock step: not serving, reservations held, until NTP or the peer median confirms the clock", "size", jump)
	p.setGateReason(jump, wall)
	if p.AskNTP != nil {
		p.AskNTP()
	}
}

// confirmWithin is when a held forward step is next judged, from the
// reading that saw it: NTP is asked at once, and the peer median confirms
// on two readings after the step, which the peer check takes a second
// apart. The refusals' RetryInfo says so; a step nothing confirms is held
// on, and judged again at each failing NTP check and peer reading, about
// once a second (judgedEvery): its refusals say that once confirmWithin
// has passed.
const (
	confirmWithin = 2 * time.Second
	judgedEvery   = clockguard.NTPRetryInterval
)

func (p *Policy) setGateReason(size time.Duration, wall time.Time) {
	reason := fmt.Sprintf("clock stepped forward %v, beyond --max-clock-offset %v: not serving until NTP or the peer median confirms the clock, or it comes back",
		size.Round(time.Millisecond), p.cfg.MaxClockOffset)
	for _, gen := range p.generators() {
		gen.State().SetCause(clockguard.SourceClockStep, reason,
			clockguard.Detail{Limit: p.cfg.MaxClockOffset.String(), Measured: size.Round(time.Millisecond).String(), RetryAt: wall.Add(confirmWithin),
				RetryEvery: judgedEvery})
	}
}

// confirmGate accepts the pending step, if the evidence was taken after it
// (fromMono: the monotonic reading when the evidence began). The evidence
// speaks for the clock as the step left it: a further forward step since,
// which the detector has not polled yet, is not confirmed with it but
// starts the count again from this reading, as one polled would.
func (p *Policy) confirmGate(fromMono time.Duration, why string) {
	g := &p.gate
	g.mu.Lock()
	if !g.pending || fromMono < g.stepMono {
		g.mu.Unlock()
		return
	}
	wall, mono := p.clock.Now()
	if again := clockOffset(wall, mono) - clockOffset(g.stepWall, g.stepMono); again > p.cfg.MaxClockOffset {
		jump := clockOffset(wall, mono) - g.top
		g.size, g.stepMono, g.stepWall, g.peerOK = jump, mono, wall, 0
		g.mu.Unlock()
		p.log.Warn("clock stepped again since the step the evidence followed: confirming from this reading", "size", jump, "again", again)
		p.setGateReason(jump, wall)
		if p.AskNTP != nil {
			p.AskNTP()
		}
		return
	}
	g.top = clockOffset(wall, mono)
	g.pending, g.peerOK = false, 0
	g.held.Store(false)
	size := g.size
	g.mu.Unlock()
	p.log.Warn("forward clock step confirmed: "+why, "size", size)
	p.confirmGenerators()
	p.gateClosed()
}

// gateClosed clears the gate's reason, wakes every generator, and has its
// holders write at once: their reservations were held below the step.
func (p *Policy) gateClosed() {
	for _, gen := range p.generators() {
		gen.State().Clear(clockguard.SourceClockStep)
		gen.Wake()
		gen.WriteNow()
	}
}

// confirmGenerators makes every running generator follow the clock as it
// reads now.
func (p *Policy) confirmGenerators() {
	for _, gen := range p.generators() {
		gen.ConfirmClock()
	}
}

// gatePending reports whether a forward step awaits confirmation, and the
// wall reading taken right after it.
func (p *Policy) gatePending() (bool, time.Time) {
	p.gate.mu.Lock()
	defer p.gate.mu.Unlock()
	return p.gate.pending, p.gate.stepWall
}

// GateHeld reports whether reservations are held below a pending step.
func (p *Policy) GateHeld() bool { return p.gate.held.Load() }

// gatePeerReading counts one peer reading made only of heartbeats received
// after the step: two agreeing readings in a row confirm it.
func (p *Policy) gatePeerReading(agrees bool) {
	g := &p.gate
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
		p.confirmGate(from, "the peer median agrees on two readings")
	}
}

// ForwardRefused is a generator's report of a forward step it would not
// follow: the policy decides on the reading (a step the detector may not
// have polled yet, or small steps that add up).
//
// The generator measures from the largest offset it adopted itself, the
// policy from the largest the node accepted; an idle generator can miss
// small steps the node followed one by one. When the policy holds no step
// pending after the reading, the clock is what the node accepts, and the
// generators are told to follow it.
func (p *Policy) ForwardRefused(*generator.ForwardStepError) {
	if p.PollSteps != nil {
		p.PollSteps()
	}
	wall, mono := p.clock.Now()
	p.gateReading(wall, mono, false)
	if pending, _ := p.gatePending(); !pending {
		p.confirmGenerators()
	}
}

// GateCheck takes a fresh reading to the gate when it shows a forward
// jump the gate has not seen: whoever sizes something from the clock (a
// reservation, the expiry timer) checks first, so that a step between two
// polls of the detector cannot slip into it.
func (p *Policy) GateCheck() {
	wall, mono := p.clock.Now()
	p.gate.mu.Lock()
	jump := clockOffset(wall, mono) - p.gate.top
	pending := p.gate.pending
	p.gate.mu.Unlock()
	if !pending && jump > p.cfg.MaxClockOffset {
		p.gateReading(wall, mono, false)
	}
}
