// Package clockpolicy owns the node's clock policy (docs/design.md, Clock
// policy): what a node does when its wall clock steps back or forward,
// when NTP or its peers disagree with it, and when nothing checks it. It
// decides from events (a step, an NTP verdict, the peers' heartbeats, a
// forward step a generator refused, the passing of time) and acts only
// through the serving states and the few requests of Generator; the node
// core (server/core) feeds it and owns the generators.
package clockpolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
)

// Policy is the node's clock policy (docs/design.md, Clock policy) as
// a component of its own. Its inputs are events — a step of the clock
// (OnStep), an NTP verdict (OnNTP), the peers' heartbeats (OnPeers), a
// forward step a generator refused (ForwardRefused), the passing of time
// (probe) — and its outputs are the reasons it sets and clears in the
// generators' serving states, plus what it asks of their generators and
// holders (hold, wake, confirm the clock, reserve now). It reads the time
// only from its clock, so tests drive it with clockguard.Fake.
type Policy struct {
	cfg   Config
	clock clockguard.Clock
	log   *slog.Logger
	gens  []Generator
	m     metrics

	// AskNTP asks for an NTP check now (nil without NTP); PollSteps reads
	// the step detector now (nil in tests that feed steps themselves).
	AskNTP    func()
	PollSteps func()

	gate fwdGate

	// manual: the generators held for a rollback under
	// --rollback-recovery manual, until Resume.
	manualMu sync.Mutex
	manual   map[string]bool

	ntpMu   sync.Mutex
	ntpLast clockguard.NTPResult
	ntpErr  error
	ntpHave bool

	peerMu      sync.Mutex
	peerSkew    time.Duration
	peerCount   int
	peerChecked bool
	peerOver    int // consecutive checks beyond --max-peer-skew
	peerMost    int // the most live nodes any reading saw, this one included

	// unchecked: at the last judgement nothing checked the clock (no NTP
	// answering, fewer than peerCheckNodes live nodes). judgeMu orders the
	// judgements of the peer loop and the NTP checker.
	unchecked atomic.Bool
	judgeMu   sync.Mutex

	// kick wakes the probe loop when a rollback hold begins, so that it
	// checks for recovery every probeFast instead of every probeSlow.
	kick chan struct{}
}

// Generator is one of the node's generators as the policy sees it: a
// serving state to set and clear its reasons in, the bounds it judges the
// clock by, and the requests it makes of the generator's source and
// holders.
type Generator interface {
	Name() string
	State() *clockguard.ServingState
	MaxLead() time.Duration
	Layout() generator.Layout
	// Lead is how far the generator's logical time stands ahead of wall,
	// false while it holds no worker.
	Lead(wall time.Time) (time.Duration, bool)
	// Wake makes every wait on the clock in its source read it again.
	Wake()
	// WriteNow asks its holders to size their reservation-expiry timers
	// again and write their reservations at once.
	WriteNow()
	// ConfirmClock makes its running sources follow the clock as it reads
	// now (a forward step was accepted).
	ConfirmClock()
}

// Config is what the clock policy reads of the node's configuration.
type Config struct {
	MaxClockOffset   time.Duration
	MaxPeerSkew      time.Duration
	NTP              bool // --ntp is set
	NTPRequired      bool
	RollbackRecovery string // "auto" or "manual"
	// RefuseUnchecked holds every generator out (CLOCK_UNCHECKED) while
	// nothing checks the clock; set unless --unchecked-clock-ok or the
	// node's own embedded coordinator. UncheckedWhy says why a node that
	// does not refuse serves on an unchecked clock (status page, Info).
	RefuseUnchecked bool
	UncheckedWhy    string
}

// peerCheckNodes is how many live nodes, this one included, the peer
// check needs to tell an outlier: with two, neither knows which is off.
const peerCheckNodes = 3

// metrics are the policy's own metrics; the node registers them.
type metrics struct {
	steps       *prometheus.CounterVec
	lastStep    prometheus.Gauge
	ntpFailures prometheus.Counter
	peerSkew    prometheus.Gauge
	unchecked   prometheus.Gauge
}

func newMetrics() metrics {
	m := metrics{
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "firn_clock_steps_total",
			Help: "Steps of the wall clock against the monotonic clock, by direction."}, []string{"direction"}),
		lastStep: prometheus.NewGauge(prometheus.GaugeOpts{Name: "firn_clock_last_step_seconds",
			Help: "Size of the last clock step (negative: backward)."}),
		ntpFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "firn_ntp_check_failures_total",
			Help: "NTP checks that failed (unreachable, too few answers, or offset beyond the limit)."}),
		peerSkew: prometheus.NewGauge(prometheus.GaugeOpts{Name: "firn_peer_clock_skew_seconds",
			Help: "This node's clock minus the median of its live peers' clocks."}),
		unchecked: prometheus.NewGauge(prometheus.GaugeOpts{Name: "firn_clock_unchecked",
			Help: "1 while nothing checks this node's clock: no NTP answering (none configured, or --ntp-required=false and unreachable) and fewer than 3 live nodes in the peer check. The node then does not serve (cause CLOCK_UNCHECKED) unless --unchecked-clock-ok or on its own embedded coordinator."}),
	}
	for _, d := range []string{"backward", "forward"} {
		m.steps.WithLabelValues(d)
	}
	return m
}

// Collectors are the policy's own metrics, for the node to register.
func (p *Policy) Collectors() []prometheus.Collector {
	m := p.m
	return []prometheus.Collector{m.steps, m.lastStep, m.ntpFailures, m.peerSkew, m.unchecked}
}

// New is the clock policy of gens, reading clock; nothing runs until Run.
func New(cfg Config, clock clockguard.Clock, log *slog.Logger, gens []Generator) *Policy {
	p := &Policy{cfg: cfg, clock: clock, log: log, gens: gens, m: newMetrics(),
		kick: make(chan struct{}, 1), manual: map[string]bool{}}
	wall, mono := clock.Now()
	p.gate.top = clockOffset(wall, mono)
	return p
}

// --- steps and rollbacks ----------------------------------------------------

// OnStep reacts to a step of the wall clock seen by the step detector,
// also while no call arrives.
func (p *Policy) OnStep(st clockguard.Step) {
	if st.Backward() {
		p.m.steps.WithLabelValues("backward").Inc()
	} else {
		p.m.steps.WithLabelValues("forward").Inc()
	}
	p.m.lastStep.Set(-st.Size.Seconds())
	p.log.Warn("clock step", "step", st.String(), "size", -st.Size)
	if holdsOnRollback(st) {
		for _, gen := range p.gens {
			lead, ok := gen.Lead(st.Wall)
			if !ok || st.Size <= gen.MaxLead() {
				continue
			}
			if lead > gen.MaxLead() {
				p.setRollback(gen, &generator.RollbackError{Step: st.Size, Limit: gen.MaxLead()})
				if p.cfg.RollbackRecovery == "manual" {
					p.setManual(gen.Name(), true)
				}
			}
		}
	}
	// Either way: the forward-step gate sees the reading, NTP is asked at
	// once, every wait sized from the old clock is woken, and the holders
	// size their reservation-expiry timers again and write at once.
	p.gateReading(st.Wall, st.Mono)
	if p.AskNTP != nil {
		p.AskNTP()
	}
	for _, gen := range p.gens {
		gen.Wake()
		gen.WriteNow()
	}
}

// setManual sets or clears gen's manual hold and reports whether it was
// set.
func (p *Policy) setManual(name string, on bool) bool {
	p.manualMu.Lock()
	defer p.manualMu.Unlock()
	was := p.manual[name]
	p.manual[name] = on
	return was
}

// setRollback holds gen out for a backward step beyond max-lead (from the
// step detector, or a generator's RollbackError) and makes the probe loop
// check for recovery often.
func (p *Policy) setRollback(gen Generator, rb *generator.RollbackError) {
	gen.State().SetCause(clockguard.SourceClockRollback, rb.Error(),
		clockguard.Detail{Limit: rb.Limit.String(), Measured: rb.Step.Round(time.Millisecond).String()})
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// NoteError feeds the serving state from a generator's typed errors on the
// request path.
func (p *Policy) NoteError(gen Generator, err error) {
	var rb *generator.RollbackError
	switch {
	case errors.As(err, &rb):
		p.setRollback(gen, rb)
	case errors.Is(err, generator.ErrClockRange):
		gen.State().Set(clockguard.SourceClockRange, err.Error())
	}
}

// The probe loop: every generator's lead is compared with the clock once
// a second, and every probeFast while a rollback hold waits for the clock.
const (
	probeSlow = time.Second
	probeFast = 100 * time.Millisecond
)

// Run probes every generator's lead against the clock until ctx ends.
func (p *Policy) Run(ctx context.Context) {
	t := time.NewTimer(probeSlow)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kick:
		}
		held := false
		for _, gen := range p.gens {
			if p.probe(gen) {
				held = true
			}
		}
		next := probeSlow
		if held {
			next = probeFast
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}

// probe holds gen out of service while its logical time is more than
// max-lead ahead of the clock after a backward step beyond it, lets it
// serve again once the clock caught up (auto recovery), and holds it out
// while the clock lies outside the layout's range. It reports whether a
// rollback hold is still waiting.
func (p *Policy) probe(gen Generator) bool {
	wall, _ := p.clock.Now()
	if _, held := gen.State().Holds(clockguard.SourceClockRollback); held {
		lead, ok := gen.Lead(wall)
		if !ok {
			return true
		}
		p.manualMu.Lock()
		manual := p.manual[gen.Name()]
		p.manualMu.Unlock()
		if lead <= gen.MaxLead() && p.cfg.RollbackRecovery == "auto" && !manual {
			gen.State().Clear(clockguard.SourceClockRollback)
			p.log.Info("clock caught up after a rollback; serving again", "generator", gen.Name(), "lead", lead)
			return false
		}
		return true
	}
	if u := gen.Layout().Units(wall); u < 0 || u > gen.Layout().MaxTime() {
		gen.State().Set(clockguard.SourceClockRange, (&generator.RangeError{Clock: wall, Epoch: gen.Layout().Epoch, End: gen.Layout().End()}).Error())
	} else {
		gen.State().Clear(clockguard.SourceClockRange)
	}
	return false
}

// Resume ends a manual-recovery hold (POST /admin/resume), refusing while
// the clock is still behind the last ID by more than max-lead, and reports
// whether there was a hold to end.
func (p *Policy) Resume(gen Generator) (bool, error) {
	wall, _ := p.clock.Now()
	if lead, ok := gen.Lead(wall); ok {
		if lead > gen.MaxLead() {
			return false, fmt.Errorf("clock still %v behind the last ID (max-lead %v): not resumed", lead.Round(time.Millisecond), gen.MaxLead())
		}
	}
	held := p.setManual(gen.Name(), false)
	for _, src := range []clockguard.Source{clockguard.SourceClockRollback, clockguard.SourceManual} {
		if _, ok := gen.State().Holds(src); ok {
			held = true
		}
	}
	gen.State().Clear(clockguard.SourceClockRollback)
	gen.State().Clear(clockguard.SourceManual)
	return held, nil
}

// --- the forward-step gate ----------------------------------------------------

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
func (p *Policy) gateReading(wall time.Time, mono time.Duration) {
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
	case g.pending:
		g.size = jump
		g.mu.Unlock()
		p.setGateReason(jump)
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
	p.setGateReason(jump)
	if p.AskNTP != nil {
		p.AskNTP()
	}
}

func (p *Policy) setGateReason(size time.Duration) {
	reason := fmt.Sprintf("clock stepped forward %v, beyond --max-clock-offset %v: not serving until NTP or the peer median confirms the clock, or it comes back",
		size.Round(time.Millisecond), p.cfg.MaxClockOffset)
	for _, gen := range p.gens {
		gen.State().SetCause(clockguard.SourceClockStep, reason,
			clockguard.Detail{Limit: p.cfg.MaxClockOffset.String(), Measured: size.Round(time.Millisecond).String()})
	}
}

// confirmGate accepts the pending step, if the evidence was taken after it
// (fromMono: the monotonic reading when the evidence began).
func (p *Policy) confirmGate(fromMono time.Duration, why string) {
	g := &p.gate
	g.mu.Lock()
	if !g.pending || fromMono < g.stepMono {
		g.mu.Unlock()
		return
	}
	wall, mono := p.clock.Now()
	g.top = clockOffset(wall, mono)
	g.pending, g.peerOK = false, 0
	g.held.Store(false)
	size := g.size
	g.mu.Unlock()
	p.log.Warn("forward clock step confirmed: "+why, "size", size)
	p.confirmGenerators()
	p.gateClosed()
}

// gateClosed clears the gate's reason and wakes every generator.
func (p *Policy) gateClosed() {
	for _, gen := range p.gens {
		gen.State().Clear(clockguard.SourceClockStep)
		gen.Wake()
	}
}

// confirmGenerators makes every running generator follow the clock as it
// reads now.
func (p *Policy) confirmGenerators() {
	for _, gen := range p.gens {
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
	p.gateReading(wall, mono)
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
		p.gateReading(wall, mono)
	}
}

// --- NTP ------------------------------------------------------------------

// WaitFirstNTP holds every generator out until the first NTP verdict.
func (p *Policy) WaitFirstNTP() {
	for _, gen := range p.gens {
		gen.State().SetCause(clockguard.SourceNTP, "waiting for the first NTP check", clockguard.Detail{Code: clockguard.CodeStarting})
	}
}

// OnNTP takes an NTP verdict.
func (p *Policy) OnNTP(res clockguard.NTPResult, err error) {
	p.ntpMu.Lock()
	p.ntpLast, p.ntpErr, p.ntpHave = res, err, true
	p.ntpMu.Unlock()
	if err != nil || !res.OK {
		p.m.ntpFailures.Inc()
	}
	var reason string
	var d clockguard.Detail
	switch {
	case err == nil && res.OK:
	case errors.Is(err, clockguard.ErrOffsetTooLarge):
		reason = fmt.Sprintf("NTP offset %v beyond --max-clock-offset %v", res.Offset.Round(time.Millisecond), p.cfg.MaxClockOffset)
		d = clockguard.Detail{Code: clockguard.CodeNTPOffset, Limit: p.cfg.MaxClockOffset.String(), Measured: res.Offset.Round(time.Millisecond).String()}
	case err != nil && p.cfg.NTPRequired:
		reason = "NTP required and unreachable: " + err.Error()
		d = clockguard.Detail{Code: clockguard.CodeNTPUnreachable}
	case err != nil:
		p.log.Warn("NTP unreachable (not required): serving with drift unchecked", "err", err)
	default:
		reason = fmt.Sprintf("NTP check failed: %d of %d usable answers", res.Valid, res.Need)
	}
	// Whether the clock is checked at all, judged before NTP's own reason
	// is cleared: the generator must not serve for a moment in between.
	p.judgeClock()
	for _, gen := range p.gens {
		if reason == "" {
			p.clearDoubt(gen, clockguard.SourceNTP)
		} else {
			gen.State().SetCause(clockguard.SourceNTP, reason, d)
		}
	}
	// The forward-step gate: a check begun after the step that agrees
	// confirms it. Unreachable NTP confirms nothing, required or not: the
	// gate then holds until NTP answers, the peers agree, or the clock
	// comes back (its reason says so).
	if err == nil && res.OK {
		p.confirmGate(res.StartMono, "NTP agrees with the clock")
	}
}

// LastNTPOffset is the offset of the last usable NTP verdict.
func (p *Policy) LastNTPOffset() (time.Duration, bool) {
	p.ntpMu.Lock()
	defer p.ntpMu.Unlock()
	if !p.ntpHave || p.ntpErr != nil {
		return 0, false
	}
	return p.ntpLast.Offset, true
}

// --- peers ------------------------------------------------------------------

// WaitFirstPeers holds every generator out until the clock was compared
// with the live peers once: a node started far off their clocks never
// serves.
func (p *Policy) WaitFirstPeers() {
	for _, gen := range p.gens {
		gen.State().SetCause(clockguard.SourcePeers, "checking the clock against live peers' heartbeats", clockguard.Detail{Code: clockguard.CodeStarting})
	}
}

// peerBeatAge bounds how old a heartbeat read (rather than received as it
// was written) can be: holders write one with each reservation, about once
// a second. Read at the right time, it makes a peer seem behind by as much.
const peerBeatAge = time.Second

// alone reports whether no peer reading since start ever saw another live
// node: a node deployed alone. A node that has seen peers waits for them
// to confirm a step even while none holds a worker (after a restore, say,
// when every node is held out and no heartbeat flows).
func (p *Policy) alone() bool {
	p.peerMu.Lock()
	defer p.peerMu.Unlock()
	return p.peerMost <= 1
}

// PeerStatus is the last peer comparison, for the status page: whether
// there was one, the live nodes counted (this one included) and this
// clock's skew from their median.
func (p *Policy) PeerStatus() (checked bool, count int, skew time.Duration) {
	p.peerMu.Lock()
	defer p.peerMu.Unlock()
	return p.peerChecked, p.peerCount, p.peerSkew
}

// OnPeers takes one reading of the live holders' heartbeats: the workers
// in use per generator, the peer clock check, and the forward-step gate.
//
// The check takes the median clock offset over all live nodes, this one
// included (offset 0), one entry per instance; the node stops serving only
// when it is the outlier beyond --max-peer-skew among at least 3. The first
// check at start acts on its one reading: it refuses a skew beyond
// --max-peer-skew by more than peerBeatAge (what a heartbeat read rather
// than received may add), so that a node started far off never serves, and
// otherwise lets the node serve; later checks act on two readings in a row
// beyond the limit.
func (p *Policy) OnPeers(self string, beats []coordinator.PeerBeat, first bool) {
	latest := map[string]coordinator.PeerBeat{}
	for _, b := range beats {
		id := b.Heartbeat.Node.InstanceID
		if id == self || b.Received.IsZero() {
			continue // this node, or not received as a fresh heartbeat yet
		}
		if old, ok := latest[id]; !ok || b.Received.After(old.Received) {
			latest[id] = b
		}
	}
	offsets := []time.Duration{0}
	for _, b := range latest {
		offsets = append(offsets, b.Heartbeat.Wall.Sub(b.Received))
	}
	skew := -median(offsets) // this node's clock minus the median
	p.m.peerSkew.Set(skew.Seconds())
	abs := max(skew, -skew)
	p.peerMu.Lock()
	p.peerSkew, p.peerCount, p.peerChecked = skew, len(offsets), true
	p.peerMost = max(p.peerMost, len(offsets))
	switch {
	case first && abs > p.cfg.MaxPeerSkew+peerBeatAge:
		p.peerOver = 2
	case first:
		p.peerOver = 0
	case abs > p.cfg.MaxPeerSkew:
		p.peerOver++
	default:
		p.peerOver = 0
	}
	over := p.peerOver
	p.peerMu.Unlock()
	var reason string
	d := clockguard.Detail{Code: clockguard.CodePeerSkew, Limit: p.cfg.MaxPeerSkew.String(), Measured: skew.Round(time.Millisecond).String()}
	if abs > p.cfg.MaxPeerSkew && over >= 2 {
		if len(offsets) >= 3 {
			reason = fmt.Sprintf("clock %v from the peer median of %d nodes, beyond --max-peer-skew %v",
				skew.Round(time.Millisecond), len(offsets), p.cfg.MaxPeerSkew)
		} else {
			p.log.Warn("clock differs from the only peer; with 2 nodes firn only warns",
				"skew", skew.Round(time.Millisecond), "max_peer_skew", p.cfg.MaxPeerSkew)
		}
	}
	p.peerGateReading(latest)
	// Judged before the peers' reason is cleared (the first reading
	// clears the start's), so that an unchecked node never serves for a
	// moment in between.
	p.judgeClock()
	for _, gen := range p.gens {
		if reason == "" {
			p.clearDoubt(gen, clockguard.SourcePeers)
		} else {
			gen.State().SetCause(clockguard.SourcePeers, reason, d)
		}
	}
}

// clearDoubt clears a clock check's reason; when one was held, the
// holder's reservations were held with it, and it is asked to write at
// once rather than at its next tick.
func (p *Policy) clearDoubt(gen Generator, src clockguard.Source) {
	if _, held := gen.State().Holds(src); !held {
		return
	}
	gen.State().Clear(src)
	gen.WriteNow()
}

// peerGateReading feeds the forward-step gate a peer reading made only of
// heartbeats received after the step (a heartbeat received before it says
// nothing of the stepped clock), when at least one other node gave one.
// Unlike the outlier rule, which stops a node only among three, one peer
// is enough here: the question is not whether to stop a serving node but
// whether to believe a step, and one peer that agrees on two readings is
// evidence, one that disagrees is reason enough to wait.
func (p *Policy) peerGateReading(latest map[string]coordinator.PeerBeat) {
	pending, stepWall := p.gatePending()
	if !pending {
		return
	}
	offsets := []time.Duration{0}
	for _, b := range latest {
		if !b.Received.Before(stepWall) {
			offsets = append(offsets, b.Heartbeat.Wall.Sub(b.Received))
		}
	}
	if len(offsets) < 2 {
		return
	}
	skew := -median(offsets)
	p.gatePeerReading(max(skew, -skew) <= p.cfg.MaxPeerSkew)
}

// median of a non-empty slice (sorted in place); the mean of the middle two
// for an even count.
func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	if len(d)%2 == 0 {
		return (d[len(d)/2-1] + d[len(d)/2]) / 2
	}
	return d[len(d)/2]
}

// --- the unchecked clock ------------------------------------------------------

// ntpChecks reports whether NTP checks the clock now: it is configured,
// and either required (unreachable is then its own reason, held by OnNTP)
// or its last check got usable answers. Before the first verdict NTP
// holds the generators itself.
func (p *Policy) ntpChecks() bool {
	if !p.cfg.NTP {
		return false
	}
	if p.cfg.NTPRequired {
		return true
	}
	p.ntpMu.Lock()
	defer p.ntpMu.Unlock()
	return !p.ntpHave || p.ntpErr == nil || errors.Is(p.ntpErr, clockguard.ErrOffsetTooLarge)
}

// judgeClock decides, after each peer reading and NTP verdict, whether
// anything checks the clock: NTP answering, or at least peerCheckNodes live
// nodes (this one included) for the peer check. When nothing does, a
// clock that is off would stamp IDs with its time, reserve its worker that
// far ahead, and pass that lead on to the next coordinator bump's floor:
// unless told otherwise (--unchecked-clock-ok, or the node's own embedded
// coordinator) every generator is held out, CLOCK_UNCHECKED, and its
// reservations with it (holder.clockInDoubt). Nothing is judged before the
// first peer reading: the peers' start reason holds the generators until
// then.
func (p *Policy) judgeClock() {
	p.judgeMu.Lock()
	defer p.judgeMu.Unlock()
	p.peerMu.Lock()
	checked, count := p.peerChecked, p.peerCount
	p.peerMu.Unlock()
	if !checked {
		return
	}
	unchecked := count < peerCheckNodes && !p.ntpChecks()
	if unchecked {
		p.m.unchecked.Set(1)
	} else {
		p.m.unchecked.Set(0)
	}
	if was := p.unchecked.Swap(unchecked); was != unchecked {
		switch {
		case !unchecked:
			p.log.Info("clock checked again", "check", p.checkText(false, count))
		case p.cfg.RefuseUnchecked:
			p.log.Warn("CLOCK UNCHECKED: not serving: "+p.uncheckedCause(count), "live_nodes", count)
		default:
			p.log.Warn("CLOCK UNCHECKED: serving on it, "+p.cfg.UncheckedWhy+": "+p.uncheckedCause(count), "live_nodes", count)
		}
	}
	if !p.cfg.RefuseUnchecked {
		return
	}
	reason := "clock unchecked: " + p.uncheckedCause(count) +
		": configure --ntp, run three nodes, or serve on an unchecked clock with --unchecked-clock-ok"
	d := clockguard.Detail{Code: clockguard.CodeClockUnchecked, Limit: nodes(peerCheckNodes), Measured: nodes(count)}
	for _, gen := range p.gens {
		if unchecked {
			gen.State().SetCause(clockguard.SourceClockUnchecked, reason, d)
		} else {
			p.clearDoubt(gen, clockguard.SourceClockUnchecked)
		}
	}
}

// uncheckedCause says why nothing checks the clock, given the live nodes
// counted.
func (p *Policy) uncheckedCause(count int) string {
	ntp := "no NTP configured"
	if p.cfg.NTP {
		ntp = "NTP unreachable (--ntp-required=false)"
	}
	return fmt.Sprintf("%s, and %s in the peer check (it needs %d)", ntp, nodes(count), peerCheckNodes)
}

// nodes is "1 live node", "2 live nodes".
func nodes(n int) string {
	if n == 1 {
		return "1 live node"
	}
	return fmt.Sprintf("%d live nodes", n)
}

// ClockCheck says how the clock is checked now, for the status page and
// Info: unchecked is true when nothing checks it.
func (p *Policy) ClockCheck() (unchecked bool, text string) {
	p.peerMu.Lock()
	checked, count := p.peerChecked, p.peerCount
	p.peerMu.Unlock()
	if !checked {
		if p.ntpChecks() {
			return false, "NTP; peers not checked yet"
		}
		return false, "not checked yet"
	}
	unchecked = p.unchecked.Load()
	return unchecked, p.checkText(unchecked, count)
}

func (p *Policy) checkText(unchecked bool, count int) string {
	switch {
	case unchecked && p.cfg.RefuseUnchecked:
		return "unchecked: not serving (" + p.uncheckedCause(count) + "; --unchecked-clock-ok would serve on it)"
	case unchecked:
		return "unchecked, " + p.cfg.UncheckedWhy + " (" + p.uncheckedCause(count) + ")"
	case count >= peerCheckNodes && p.ntpChecks():
		return fmt.Sprintf("NTP and peers (%s)", nodes(count))
	case count >= peerCheckNodes:
		return fmt.Sprintf("peers (%s)", nodes(count))
	}
	return "NTP"
}
