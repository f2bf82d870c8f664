package clockpolicy

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
)

// The clock policy on its own, driven with a fake clock: inputs in,
// reasons out (docs/design.md, Clock policy).

type policyRig struct {
	t        *testing.T
	clock    *clockguard.Fake
	p        *Policy
	rt       *testGen
	ntpAsked int
}

// testGen is one generator as the policy sees it: a real generator and
// serving state, without holders.
type testGen struct {
	state   *clockguard.ServingState
	gen     *generator.Generator
	layout  generator.Layout
	written int // WriteNow calls
}

func (g *testGen) Name() string                    { return "g" }
func (g *testGen) State() *clockguard.ServingState { return g.state }
func (g *testGen) MaxLead() time.Duration          { return time.Second }
func (g *testGen) Layout() generator.Layout        { return g.layout }
func (g *testGen) Lead(wall time.Time) (time.Duration, bool) {
	return g.gen.Lead(wall), true
}
func (g *testGen) Wake()         { g.gen.Wake() }
func (g *testGen) WriteNow()     { g.written++ }
func (g *testGen) ConfirmClock() { g.gen.ConfirmClock() }

func newPolicyRig(t *testing.T, cfg Config) *policyRig {
	t.Helper()
	clock := clockguard.NewFake(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	if cfg.MaxClockOffset == 0 {
		cfg.MaxClockOffset = 250 * time.Millisecond
	}
	if cfg.MaxPeerSkew == 0 {
		cfg.MaxPeerSkew = time.Second
	}
	if cfg.RollbackRecovery == "" {
		cfg.RollbackRecovery = "auto"
	}
	l, ok := generator.Preset("snowflake")
	if !ok {
		t.Fatal("no snowflake preset")
	}
	g, err := generator.New(generator.Config{Layout: l, Worker: 1, Clock: clock, Floor: -1,
		Reserved: generator.NoReservation, MaxLead: time.Second, MaxForwardStep: cfg.MaxClockOffset})
	if err != nil {
		t.Fatal(err)
	}
	rt := &testGen{state: clockguard.NewServingState("g", clockguard.WithStateClock(clock)), gen: g, layout: l}
	rt.state.Ready()
	r := &policyRig{t: t, clock: clock, rt: rt}
	r.p = New(cfg, clock, slog.New(slog.NewTextHandler(io.Discard, nil)), []Generator{rt})
	r.p.AskNTP = func() { r.ntpAsked++ }
	return r
}

// step moves the wall clock by d and tells the policy, as the detector
// would.
func (r *policyRig) step(d time.Duration) {
	r.clock.Step(d)
	wall, mono := r.clock.Now()
	r.p.OnStep(clockguard.Step{Size: -d, Wall: wall, Mono: mono})
}

func (r *policyRig) reason() string { return r.rt.state.Reason() }

func (r *policyRig) now() time.Time {
	wall, _ := r.clock.Now()
	return wall
}

// retryAt is the RetryAt of the reason source holds (zero: none).
func (r *policyRig) retryAt(source clockguard.Source) time.Time {
	for _, c := range r.rt.state.Snapshot().Causes {
		if c.Source == source {
			return c.RetryAt
		}
	}
	return time.Time{}
}

func (r *policyRig) wantServing(want bool, what string) {
	r.t.Helper()
	if got := r.rt.state.Serving(); got != want {
		r.t.Fatalf("%s: serving %v, want %v (reason %q)", what, got, want, r.reason())
	}
}

// An NTP verdict as from a check begun now.
func (r *policyRig) ntpOK() {
	_, mono := r.clock.Now()
	r.p.OnNTP(clockguard.NTPResult{OK: true, StartMono: mono}, nil)
}

func TestPolicyForwardStepConfirmedByNTP(t *testing.T) {
	r := newPolicyRig(t, Config{NTP: true, NTPRequired: true})
	_, before := r.clock.Now()
	r.clock.Advance(time.Second)
	r.step(time.Hour)
	r.wantServing(false, "after +1h")
	if !strings.Contains(r.reason(), "stepped forward 1h0m0s") || r.ntpAsked == 0 || !r.p.GateHeld() {
		t.Fatalf("reason %q, NTP asked %d, held %v", r.reason(), r.ntpAsked, r.p.GateHeld())
	}
	// The refusals say when the step is next judged (RetryInfo).
	if at, wall := r.retryAt(clockguard.SourceClockStep), r.now(); at.Sub(wall) != confirmWithin {
		t.Fatalf("the forward step's hold retries at %v, %v from now; want %v", at, at.Sub(wall), confirmWithin)
	}
	// A verdict from a check begun before the step confirms nothing.
	r.p.OnNTP(clockguard.NTPResult{OK: true, StartMono: before}, nil)
	r.wantServing(false, "after a verdict older than the step")
	// One begun after it does, and the generator follows the clock.
	r.ntpOK()
	r.wantServing(true, "after NTP agreed")
	if _, err := r.rt.gen.TryBatch(make([]uint64, 1)); err != nil {
		t.Fatalf("the generator still refuses the confirmed clock: %v", err)
	}
}

func TestPolicyForwardStepCorrected(t *testing.T) {
	r := newPolicyRig(t, Config{NTP: true, NTPRequired: true})
	r.clock.Advance(time.Second)
	r.step(time.Hour)
	r.wantServing(false, "after +1h")
	// Unreachable NTP confirms nothing.
	r.p.OnNTP(clockguard.NTPResult{}, errors.New("unreachable"))
	r.p.OnNTP(clockguard.NTPResult{OK: true}, nil) // a verdict from before the step
	r.wantServing(false, "with NTP unreachable")
	r.step(-time.Hour)
	if r.p.GateHeld() || strings.Contains(r.reason(), "stepped") {
		t.Fatalf("the correction did not close the gate: %q", r.reason())
	}
}

func TestPolicyForwardStepAcceptedWithNothingToAsk(t *testing.T) {
	r := newPolicyRig(t, Config{})
	r.step(10 * time.Second)
	r.wantServing(true, "a lone node without NTP")
	if r.p.GateHeld() {
		t.Fatal("reservations held with nothing to confirm the step")
	}
}

// Steps each within the limit are followed one by one (as slews are); a
// generator idle through them sees their sum at its next call, refuses it,
// and the policy, which followed them, tells it to follow the clock.
func TestPolicySmallStepsFollowed(t *testing.T) {
	r := newPolicyRig(t, Config{NTP: true})
	gen := r.rt.gen
	if _, err := gen.TryBatch(make([]uint64, 1)); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		r.step(100 * time.Millisecond)
	}
	r.wantServing(true, "after four steps of 100ms")
	_, err := gen.TryBatch(make([]uint64, 1))
	var fs *generator.ForwardStepError
	if !errors.As(err, &fs) {
		t.Fatalf("the idle generator: %v; want it to refuse the 400ms it did not see", err)
	}
	r.p.ForwardRefused(fs)
	r.wantServing(true, "after the refusal")
	if n, err := gen.TryBatch(make([]uint64, 1)); err != nil || n != 1 {
		t.Fatalf("after the policy's answer: %d, %v", n, err)
	}
}

// beat is a heartbeat of node id whose clock reads offset from this one's,
// received now.
func (r *policyRig) beat(id string, offset time.Duration) coordinator.PeerBeat {
	wall, _ := r.clock.Now()
	return coordinator.PeerBeat{Generator: "g", Slot: coordinator.Slot{Worker: uint64(len(id))},
		Heartbeat: coordinator.Heartbeat{Node: coordinator.NodeInfo{InstanceID: id}, Wall: wall.Add(offset)}, Received: wall}
}

func TestPolicyPeersConfirmOnlyWithBeatsAfterTheStep(t *testing.T) {
	r := newPolicyRig(t, Config{})
	old := []coordinator.PeerBeat{r.beat("a", 0), r.beat("b", 0)}
	r.p.OnPeers("self", old) // live peers: the gate has someone to ask
	r.clock.Advance(100 * time.Millisecond)
	r.step(time.Hour)
	r.wantServing(false, "after +1h among three")
	// Heartbeats received before the step say nothing of it, however often
	// they are read.
	for range 3 {
		r.p.OnPeers("self", old)
	}
	r.wantServing(false, "on heartbeats from before the step")
	// Beats received after the step, with the peers an hour behind: the
	// median disagrees; the node is the outlier.
	r.clock.Advance(time.Second)
	stepped := []coordinator.PeerBeat{r.beat("a", -time.Hour), r.beat("b", -time.Hour)}
	r.p.OnPeers("self", stepped)
	r.p.OnPeers("self", stepped)
	r.wantServing(false, "while the peers disagree")
	if !strings.Contains(r.reason(), "peer median") {
		t.Fatalf("reason %q does not name the peer median", r.reason())
	}
}

func TestPolicyPeersConfirmOnTwoReadings(t *testing.T) {
	r := newPolicyRig(t, Config{})
	r.p.OnPeers("self", []coordinator.PeerBeat{r.beat("a", 0), r.beat("b", 0)})
	r.step(2 * time.Second)
	r.wantServing(false, "after +2s")
	r.clock.Advance(time.Second)
	agree := []coordinator.PeerBeat{r.beat("a", 0), r.beat("b", 0)}
	r.p.OnPeers("self", agree)
	r.wantServing(false, "after one agreeing reading")
	r.p.OnPeers("self", agree)
	r.wantServing(true, "after two agreeing readings")
}

func TestPolicyPeerOutlierTwoReadings(t *testing.T) {
	r := newPolicyRig(t, Config{})
	fine := []coordinator.PeerBeat{r.beat("a", 0), r.beat("b", 0)}
	r.p.OnPeers("self", fine)
	r.wantServing(true, "among agreeing peers")
	far := []coordinator.PeerBeat{r.beat("a", -3*time.Second), r.beat("b", -3*time.Second)}
	r.p.OnPeers("self", far)
	r.wantServing(true, "after one reading beyond the limit")
	r.p.OnPeers("self", far)
	r.wantServing(false, "after two readings beyond the limit")
	r.p.OnPeers("self", fine)
	r.wantServing(true, "back within the limit")
	// At start one reading beyond the limit plus a heartbeat's age is
	// enough.
	r2 := newPolicyRig(t, Config{})
	r2.p.OnPeers("self", []coordinator.PeerBeat{r2.beat("a", -3*time.Second), r2.beat("b", -3*time.Second)})
	r2.wantServing(false, "started 3s off")
}

// The start rule acts on the first reading that holds a peer, not on the
// first reading: on ZooKeeper a node's first reading is empty (heartbeats
// are reported from their next write on). Before, the rule was spent on
// that empty reading, and a node started an hour off its two peers served
// (three live nodes: a checked clock) until the third reading.
func TestPolicyStartRuleWaitsForAPeer(t *testing.T) {
	r := newPolicyRig(t, Config{RefuseUnchecked: true})
	r.p.WaitFirstPeers()
	r.p.OnPeers("self", nil)
	r.wantServing(false, "one live node, refusing an unchecked clock")
	r.clock.Advance(time.Second)
	r.p.OnPeers("self", []coordinator.PeerBeat{r.beat("a", -time.Hour), r.beat("b", -time.Hour)})
	r.wantServing(false, "an hour off both peers, on the first reading that holds them")
	if !strings.Contains(r.reason(), "--max-peer-skew") {
		t.Fatalf("reason %q does not name --max-peer-skew", r.reason())
	}
}

// Backward steps of 800 ms, each within max-lead (1 s), with a call after
// each: they add up, and the node fails closed once their sum since the
// generator last adopted a reading passes max-lead, never waiting longer
// than max-lead for the clock. The first is absorbed (the call is served
// ahead of the clock, and the generator adopts the stepped reading); after
// the second the generator stands 1.6 s ahead and a call waits 600 ms
// (as after one absorbed step while borrowing at the limit: "calls wait at
// most the step"); the third is a rollback of 1.6 s from the adopted
// reading, and the call that meets it holds the generator out
// (CLOCK_ROLLBACK) until the clock catches up.
func TestPolicyBackwardStepsAddUp(t *testing.T) {
	r := newPolicyRig(t, Config{})
	gen := r.rt.gen
	if _, err := gen.TryBatch(make([]uint64, 1)); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		r.step(-800 * time.Millisecond)
		r.wantServing(true, fmt.Sprintf("after step %d of -800ms (absorbed)", i+1))
		r.clock.Advance(10 * time.Millisecond)
		n, err := gen.TryBatch(make([]uint64, 1))
		if i == 0 && (err != nil || n != 1) {
			t.Fatalf("a call after the absorbed step: %d, %v", n, err)
		}
		if i == 1 && (err != nil || n != 0) {
			// TryBatch says "wait for the clock" with 0 IDs and no error.
			t.Fatalf("a call 1.6s ahead: %d, %v, want a wait", n, err)
		}
	}
	r.step(-800 * time.Millisecond)
	var rb *generator.RollbackError
	_, err := gen.TryBatch(make([]uint64, 1))
	if !errors.As(err, &rb) || rb.Step <= time.Second {
		t.Fatalf("after a third -800ms: err %v, want a RollbackError beyond max-lead", err)
	}
	r.p.NoteError(r.rt, err)
	r.wantServing(false, "after the rollback met by a call")
	if rb.RetryAfter <= time.Second || rb.RetryAfter > 1500*time.Millisecond {
		t.Fatalf("RetryAfter %v, want the time until the lead is back within max-lead (~1.4s)", rb.RetryAfter)
	}
	r.clock.Advance(1500 * time.Millisecond)
	r.p.probe(r.rt)
	r.wantServing(true, "once the clock caught up")
}

func TestPolicyRollbackAndRecovery(t *testing.T) {
	for _, mode := range []string{"auto", "manual"} {
		t.Run(mode, func(t *testing.T) {
			r := newPolicyRig(t, Config{RollbackRecovery: mode})
			gen := r.rt.gen
			if _, err := gen.TryBatch(make([]uint64, 1)); err != nil {
				t.Fatal(err)
			}
			r.step(-5 * time.Second)
			r.wantServing(false, "after -5s")
			if !strings.Contains(r.reason(), "clock rolled back 5s, limit 1s") {
				t.Fatalf("reason %q", r.reason())
			}
			// Auto recovery ends the hold when the clock reaches the last
			// issued time less max-lead, about 4 s from now: the refusals
			// say so. Manual recovery promises no time.
			at := r.retryAt(clockguard.SourceClockRollback)
			if left := at.Sub(r.now()); mode == "auto" && (left < 3900*time.Millisecond || left > 4100*time.Millisecond) ||
				mode == "manual" && !at.IsZero() {
				t.Fatalf("%s: the rollback hold retries at %v (%v from now)", mode, at, left)
			}
			if !r.p.probe(r.rt) {
				t.Fatal("probe: hold not waiting while the clock is behind")
			}
			r.clock.Advance(4500 * time.Millisecond)
			r.p.probe(r.rt)
			if mode == "auto" {
				r.wantServing(true, "once the clock caught up")
				return
			}
			r.wantServing(false, "manual: until resumed")
			if held, err := r.p.Resume(r.rt); err != nil || !held {
				t.Fatalf("Resume: held %v, %v; want a hold ended", held, err)
			}
			r.wantServing(true, "after Resume")
			if held, err := r.p.Resume(r.rt); err != nil || held {
				t.Fatalf("Resume again: held %v, %v; want nothing held", held, err)
			}
		})
	}
}

func TestPolicyNTPVerdicts(t *testing.T) {
	r := newPolicyRig(t, Config{NTP: true, NTPRequired: true})
	r.p.WaitFirstNTP()
	r.wantServing(false, "before the first verdict")
	r.p.OnNTP(clockguard.NTPResult{Offset: time.Second}, &clockguard.OffsetError{Offset: time.Second, Limit: 250 * time.Millisecond})
	if !strings.Contains(r.reason(), "NTP offset 1s beyond --max-clock-offset 250ms") {
		t.Fatalf("reason %q", r.reason())
	}
	r.p.OnNTP(clockguard.NTPResult{}, clockguard.ErrNTPUnreachable)
	if !strings.Contains(r.reason(), "NTP required and unreachable") {
		t.Fatalf("reason %q", r.reason())
	}
	r.ntpOK()
	r.wantServing(true, "NTP agrees")

	loose := newPolicyRig(t, Config{NTP: true, NTPRequired: false})
	loose.p.OnNTP(clockguard.NTPResult{}, clockguard.ErrNTPUnreachable)
	loose.wantServing(true, "NTP unreachable, not required")
}

// A node that has seen peers waits for them to confirm a forward step even
// when none is live at the moment (after a restore every node is held out
// and no heartbeat flows); one that never saw another accepts it.
func TestPolicyOncePeeredWaits(t *testing.T) {
	r := newPolicyRig(t, Config{})
	r.p.OnPeers("self", []coordinator.PeerBeat{r.beat("a", 0)})
	r.p.OnPeers("self", nil) // the peer is gone, for now
	r.clock.Advance(time.Second)
	r.step(time.Hour)
	r.wantServing(false, "after +1h with no live peer, having seen one")
	if !r.p.GateHeld() {
		t.Fatal("reservations not held")
	}
}

// Nothing checks the clock — no NTP, fewer than three live nodes — and the
// node was not told to serve on it: every generator is held out, CLOCK_UNCHECKED,
// judged again at every peer reading (3 → 2 → 3) and NTP verdict.
func TestPolicyUncheckedClock(t *testing.T) {
	r := newPolicyRig(t, Config{RefuseUnchecked: true})
	r.p.WaitFirstPeers()
	r.p.OnPeers("self", []coordinator.PeerBeat{r.beat("a", 0)})
	r.wantServing(false, "no NTP, two live nodes")
	sn := r.rt.state.Snapshot()
	if ref := sn.Refusal(); ref.Code != clockguard.CodeClockUnchecked || ref.Limit != "3 live nodes" || ref.Measured != "2 live nodes" {
		t.Fatalf("refusal %+v: want CLOCK_UNCHECKED, limit 3 live nodes, measured 2 live nodes", ref)
	}
	for _, want := range []string{"no NTP configured", "2 live nodes", "--ntp", "three nodes", "--unchecked-clock-ok"} {
		if !strings.Contains(r.reason(), want) {
			t.Fatalf("reason %q does not name %q", r.reason(), want)
		}
	}
	if u, text := r.p.ClockCheck(); !u || !strings.Contains(text, "unchecked: not serving") {
		t.Fatalf("clock check %v %q", u, text)
	}
	three := []coordinator.PeerBeat{r.beat("a", 0), r.beat("b", 0)}
	r.p.OnPeers("self", three)
	r.wantServing(true, "three live nodes")
	if u, text := r.p.ClockCheck(); u || text != "peers (3 live nodes)" {
		t.Fatalf("clock check %v %q", u, text)
	}
	r.p.OnPeers("self", three[:1])
	r.wantServing(false, "down to two")
	r.p.OnPeers("self", three)
	r.wantServing(true, "three again")

	// Serving never flickers on the way in: the unchecked hold is set
	// before the start's peers reason is cleared.
	r2 := newPolicyRig(t, Config{RefuseUnchecked: true})
	r2.p.WaitFirstPeers()
	served := false
	r2.rt.state.Subscribe(func(tr clockguard.Transition) {
		if tr.To == clockguard.StateServing {
			served = true
		}
	})
	r2.p.OnPeers("self", nil)
	r2.wantServing(false, "alone")
	if served {
		t.Fatal("the generator served for a moment between the start's peers reason and the unchecked one")
	}
}

// NTP checks the clock while it answers; NTP that is not required and
// unreachable is no check.
func TestPolicyUncheckedClockNTP(t *testing.T) {
	r := newPolicyRig(t, Config{NTP: true, RefuseUnchecked: true})
	r.p.OnPeers("self", nil)
	r.wantServing(true, "NTP configured, no verdict yet")
	r.p.OnNTP(clockguard.NTPResult{}, clockguard.ErrNTPUnreachable)
	r.wantServing(false, "NTP not required and unreachable, alone")
	if !strings.Contains(r.reason(), "NTP unreachable (--ntp-required=false)") {
		t.Fatalf("reason %q", r.reason())
	}
	r.ntpOK()
	r.wantServing(true, "NTP answers")
	if _, text := r.p.ClockCheck(); text != "NTP" {
		t.Fatalf("clock check %q", text)
	}
	// Required NTP that is unreachable says so itself.
	req := newPolicyRig(t, Config{NTP: true, NTPRequired: true, RefuseUnchecked: true})
	req.p.OnPeers("self", nil)
	req.p.OnNTP(clockguard.NTPResult{}, clockguard.ErrNTPUnreachable)
	if ref := req.rt.state.Snapshot().Refusal(); ref.Code != clockguard.CodeNTPUnreachable || len(req.rt.state.Snapshot().Causes) != 1 {
		t.Fatalf("required NTP unreachable: %+v, causes %+v", ref, req.rt.state.Snapshot().Causes)
	}
}

// Told to accept it, the node serves on the unchecked clock and says so.
func TestPolicyUncheckedClockAccepted(t *testing.T) {
	r := newPolicyRig(t, Config{UncheckedWhy: "accepted by --unchecked-clock-ok"})
	r.p.OnPeers("self", []coordinator.PeerBeat{r.beat("a", 0)})
	r.wantServing(true, "with --unchecked-clock-ok")
	if u, text := r.p.ClockCheck(); !u || !strings.HasPrefix(text, "unchecked, accepted by --unchecked-clock-ok") {
		t.Fatalf("clock check %v %q", u, text)
	}
}
