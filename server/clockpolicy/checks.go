package clockpolicy

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

// WaitFirstNTP holds every generator out until the first NTP verdict.
func (p *Policy) WaitFirstNTP() {
	for _, gen := range p.generators() {
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
	p.setReason(clockguard.SourceNTP, reason, d)
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
	for _, gen := range p.generators() {
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
// reading that holds a peer acts alone: it refuses a skew beyond
// --max-peer-skew by more than peerBeatAge (what a heartbeat read rather
// than received may add), so that a node started far off never serves, and
// otherwise lets the node serve; later checks act on two readings in a row
// beyond the limit. A reading with no peer in it spends nothing (ZooKeeper
// reports heartbeats from their next write on, so a node's first reading
// there is empty).
func (p *Policy) OnPeers(self string, beats []coordinator.PeerBeat) {
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
	first := !p.peerHeard && len(latest) > 0
	p.peerHeard = p.peerHeard || len(latest) > 0
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
	p.setReason(clockguard.SourcePeers, reason, d)
}

// setReason sets a clock check's reason on every generator, or clears it
// (clearDoubt) when reason is "".
func (p *Policy) setReason(src clockguard.Source, reason string, d clockguard.Detail) {
	for _, gen := range p.generators() {
		if reason == "" {
			p.clearDoubt(gen, src)
		} else {
			gen.State().SetCause(src, reason, d)
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
// evidence, one that disagrees is reason enough to wait. The median is of
// the peers alone: this node's own clock is what is in question, and
// counted beside one peer it would halve that peer's disagreement.
func (p *Policy) peerGateReading(latest map[string]coordinator.PeerBeat) {
	pending, stepWall := p.gatePending()
	if !pending {
		return
	}
	var offsets []time.Duration
	for _, b := range latest {
		if !b.Received.Before(stepWall) {
			offsets = append(offsets, b.Heartbeat.Wall.Sub(b.Received))
		}
	}
	if len(offsets) == 0 {
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
	var reason string
	if unchecked {
		reason = "clock unchecked: " + p.uncheckedCause(count) +
			": configure --ntp, run three nodes, or serve on an unchecked clock with --unchecked-clock-ok"
	}
	d := clockguard.Detail{Code: clockguard.CodeClockUnchecked, Limit: nodes(peerCheckNodes), Measured: nodes(count)}
	p.setReason(clockguard.SourceClockUnchecked, reason, d)
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
