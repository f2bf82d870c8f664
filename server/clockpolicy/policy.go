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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/firnid/firn/clockguard"
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
	// gens are the generators the policy acts on: a list replaced whole
	// when one is added (Add), read without a lock.
	gens  atomic.Pointer[[]Generator]
	addMu sync.Mutex
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
	peerOver    int  // consecutive checks beyond --max-peer-skew
	peerHeard   bool // a reading held a peer: the start rule is spent
	peerMost    int  // the most live nodes any reading saw, this one included

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
	p := &Policy{cfg: cfg, clock: clock, log: log, m: newMetrics(),
		kick: make(chan struct{}, 1), manual: map[string]bool{}}
	gens = slices.Clip(gens)
	p.gens.Store(&gens)
	wall, mono := clock.Now()
	p.gate.top = clockOffset(wall, mono)
	return p
}

// generators are the generators the policy acts on.
func (p *Policy) generators() []Generator { return *p.gens.Load() }

// nodeSources are the causes the policy sets on every generator alike:
// what it knows of the node's clock, not of one generator's lead.
var nodeSources = []clockguard.Source{clockguard.SourceNTP, clockguard.SourcePeers,
	clockguard.SourceClockStep, clockguard.SourceClockUnchecked}

// Add makes the policy act on gen too: a generator a running node
// started (a definition the coordinator holds). gen takes the causes the
// policy holds on the node's clock from a generator it already acts on
// (NTP, the peers, a forward step awaiting confirmation, an unchecked
// clock) — a clock the node doubts serves no new generator either — or,
// with none to take them from, waits for the next NTP check and peer
// comparison, as at start, and NTP is asked at once.
func (p *Policy) Add(gen Generator) {
	p.addMu.Lock()
	defer p.addMu.Unlock()
	old := p.generators()
	gens := append(slices.Clone(old), gen)
	p.gens.Store(&gens)
	if len(old) == 0 {
		if p.cfg.NTP {
			gen.State().SetCause(clockguard.SourceNTP, "waiting for the next NTP check", clockguard.Detail{Code: clockguard.CodeStarting})
		}
		gen.State().SetCause(clockguard.SourcePeers, "checking the clock against live peers' heartbeats", clockguard.Detail{Code: clockguard.CodeStarting})
		if p.AskNTP != nil {
			p.AskNTP()
		}
		return
	}
	// Published first, then copied: a change the policy makes from now on
	// reaches gen after its sibling, so that a cause the copy set which
	// the sibling no longer holds was cleared meanwhile, and is cleared
	// here too.
	sib := old[0].State()
	for _, c := range sib.Snapshot().Causes {
		if slices.Contains(nodeSources, c.Source) {
			gen.State().SetCause(c.Source, c.Reason, c.Detail)
		}
	}
	for _, src := range nodeSources {
		if _, held := sib.Holds(src); !held {
			gen.State().Clear(src)
		}
	}
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
		for _, gen := range p.generators() {
			lead, ok := gen.Lead(st.Wall)
			if !ok || st.Size <= gen.MaxLead() {
				continue
			}
			if lead > gen.MaxLead() {
				p.setRollback(gen, &generator.RollbackError{Step: st.Size, Limit: gen.MaxLead()}, st.Wall.Add(lead-gen.MaxLead()))
				if p.cfg.RollbackRecovery == "manual" {
					p.setManual(gen.Name(), true)
				}
			}
		}
	}
	// Either way: the forward-step gate sees the reading, NTP is asked at
	// once, every wait sized from the old clock is woken, and the holders
	// size their reservation-expiry timers again and write at once.
	p.gateReading(st.Wall, st.Mono, true)
	if p.AskNTP != nil {
		p.AskNTP()
	}
	for _, gen := range p.generators() {
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
// check for recovery often. retryAt is when the clock, running on from
// where it stepped to, brings the generator's lead back within max-lead
// and the hold ends by itself (zero: unknown): the refusals' RetryInfo.
// Under --rollback-recovery manual the hold waits for an operator, and no
// time is promised.
func (p *Policy) setRollback(gen Generator, rb *generator.RollbackError, retryAt time.Time) {
	if p.cfg.RollbackRecovery == "manual" {
		retryAt = time.Time{}
	}
	gen.State().SetCause(clockguard.SourceClockRollback, rb.Error(),
		clockguard.Detail{Limit: rb.Limit.String(), Measured: rb.Step.Round(time.Millisecond).String(), RetryAt: retryAt})
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
		var at time.Time
		if rb.RetryAfter > 0 {
			wall, _ := p.clock.Now()
			at = wall.Add(rb.RetryAfter)
		}
		p.setRollback(gen, rb, at)
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
		for _, gen := range p.generators() {
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
