package clockpolicy

import (
	"errors"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

// A second forward step while the gate holds the first: an NTP check
// begun between the two measured the clock before the second, and must
// not confirm it. Before the gate counted evidence from the last step, it
// confirmed both, and the node served a clock an hour ahead that no check
// had seen.
func TestGateEvidenceCountsFromTheLastStep(t *testing.T) {
	r := newPolicyRig(t, Config{NTP: true, NTPRequired: true})
	if _, err := r.rt.gen.TryBatch(make([]uint64, 1)); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(time.Second)
	r.step(10 * time.Second) // a correction NTP would agree with
	r.wantServing(false, "after +10s")
	r.clock.Advance(50 * time.Millisecond)
	_, checkBegan := r.clock.Now() // an NTP check measures the clock now
	r.clock.Advance(50 * time.Millisecond)
	asked := r.ntpAsked
	r.step(time.Hour) // a bogus step, after the check measured
	r.wantServing(false, "after a further +1h")
	if r.ntpAsked == asked {
		t.Fatal("NTP was not asked again after the second step")
	}
	r.p.OnNTP(clockguard.NTPResult{OK: true, StartMono: checkBegan}, nil)
	if _, err := r.rt.gen.TryBatch(make([]uint64, 1)); err == nil || !r.p.GateHeld() || r.rt.state.Serving() {
		t.Fatalf("a +1h step confirmed by an NTP check begun before it: gate held %v, serving %v, generator err %v",
			r.p.GateHeld(), r.rt.state.Serving(), err)
	}
	// A check begun after the second step confirms it.
	r.clock.Advance(100 * time.Millisecond)
	r.ntpOK()
	r.wantServing(true, "after an NTP check begun after the last step")
}

// A forward step of an hour, then corrected to within --max-peer-skew
// but not within --max-clock-offset (net +500 ms): peers whose clocks read
// 500 ms behind agree with the clock as it now reads, and confirm it on
// two readings, as they confirm a plain +500 ms step. Before, the gate
// kept filtering heartbeats by the wall reading taken after the first
// step, an hour ahead: no heartbeat counted for an hour, and the node
// stayed out of service although its peers agreed.
func TestGatePeersConfirmAStepPartlyCorrected(t *testing.T) {
	for _, detour := range []bool{false, true} {
		r := newPolicyRig(t, Config{})
		r.p.OnPeers("self", []coordinator.PeerBeat{r.beat("a", 0), r.beat("b", 0)})
		r.wantServing(true, "among agreeing peers")
		r.clock.Advance(100 * time.Millisecond)
		if detour {
			r.step(time.Hour)
			r.clock.Advance(100 * time.Millisecond)
			r.step(-time.Hour + 500*time.Millisecond)
		} else {
			r.step(500 * time.Millisecond)
		}
		r.wantServing(false, "after a net +500ms step")
		for range 2 {
			r.clock.Advance(time.Second)
			r.p.OnPeers("self", []coordinator.PeerBeat{r.beat("a", -500*time.Millisecond), r.beat("b", -500*time.Millisecond)})
		}
		if !r.rt.state.Serving() {
			t.Fatalf("detour %v: two readings of peers within --max-peer-skew did not confirm the step: reason %q", detour, r.reason())
		}
	}
}

// Three live nodes, one of whose heartbeats stopped arriving before the
// step: the one peer heard since disagrees with the step by its whole
// size, beyond --max-peer-skew, and must not confirm it. Before, the
// gate's median counted this node's own offset beside that peer's, which
// halved the disagreement (1.5 s read as 750 ms) and confirmed the step.
func TestGateAsksThePeersAlone(t *testing.T) {
	r := newPolicyRig(t, Config{RefuseUnchecked: true})
	r.p.WaitFirstPeers()
	old := r.beat("b", 0) // b's last heartbeat, received before the step
	r.p.OnPeers("self", []coordinator.PeerBeat{r.beat("a", 0), old})
	r.wantServing(true, "three nodes agreeing")
	r.clock.Advance(100 * time.Millisecond)
	r.step(1500 * time.Millisecond)
	r.wantServing(false, "after +1.5s")
	for range 3 {
		r.clock.Advance(time.Second)
		r.p.OnPeers("self", []coordinator.PeerBeat{r.beat("a", -1500*time.Millisecond), old})
	}
	if !r.p.GateHeld() || r.rt.state.Serving() {
		t.Fatalf("a +1.5s step confirmed by the only peer heard since, which disagrees by 1.5s: gate held %v, serving %v",
			r.p.GateHeld(), r.rt.state.Serving())
	}
	// The same peer agreeing confirms it on two readings.
	for range 2 {
		r.clock.Advance(time.Second)
		r.p.OnPeers("self", []coordinator.PeerBeat{r.beat("a", 0), old})
	}
	r.wantServing(true, "after two readings of the one peer agreeing")
}

// A second forward step that the step detector has not polled yet when
// an NTP verdict arrives: the check began after the first step and
// measured the clock as it read then, so it confirms that reading, not
// one an hour further on. Before, confirming adopted the clock as it read
// at the verdict — the second hour included — and made the generators
// follow it: IDs an hour ahead of anything a check had seen, and the
// detector's poll then found no step to hold (the gate's baseline had
// moved with it).
func TestGateConfirmsOnlyWhatTheEvidenceSaw(t *testing.T) {
	r := newPolicyRig(t, Config{NTP: true, NTPRequired: true})
	if _, err := r.rt.gen.TryBatch(make([]uint64, 1)); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(time.Second)
	r.step(time.Hour)
	r.wantServing(false, "after +1h")
	r.clock.Advance(100 * time.Millisecond)
	_, checkBegan := r.clock.Now() // an NTP check begun after the step
	r.clock.Advance(50 * time.Millisecond)
	r.clock.Step(time.Hour) // a further hour, not polled yet
	r.p.OnNTP(clockguard.NTPResult{OK: true, StartMono: checkBegan}, nil)
	if _, err := r.rt.gen.TryBatch(make([]uint64, 1)); err == nil || !r.p.GateHeld() || r.rt.state.Serving() {
		t.Fatalf("a second +1h step no check saw, adopted with the first one's NTP verdict: gate held %v, serving %v, generator err %v",
			r.p.GateHeld(), r.rt.state.Serving(), err)
	}
	// A check begun after the second step confirms it.
	r.clock.Advance(100 * time.Millisecond)
	r.ntpOK()
	r.wantServing(true, "after an NTP check begun after the last step")
}

// A forward step nothing confirms yet (NTP unreachable, not required) is
// held on: its refusals keep telling the caller when to come back, as the
// first ones did (confirmWithin from the step). Before, the hint was the
// step's reading plus confirmWithin, set once: two seconds on, every
// refusal of the held step came without RetryInfo.
func TestGateRefusalKeepsItsRetryHint(t *testing.T) {
	r := newPolicyRig(t, Config{NTP: true})
	r.clock.Advance(time.Second)
	r.step(time.Hour)
	for range 3 {
		r.clock.Advance(time.Second)
		r.p.OnNTP(clockguard.NTPResult{}, errors.New("unreachable")) // retried every second
	}
	ref := r.rt.state.Snapshot().Refusal()
	if ref.Code != clockguard.CodeClockStep {
		t.Fatalf("3 s after an unconfirmed +1h step: refused %s (%q), want CLOCK_STEP", ref.Code, ref.Reason)
	}
	if !ref.RetryAt.After(r.now()) && ref.RetryEvery <= 0 {
		t.Fatalf("3 s after an unconfirmed +1h step: refused CLOCK_STEP with no retry hint (RetryAt %v, %v before now; RetryEvery %v)",
			ref.RetryAt, r.now().Sub(ref.RetryAt), ref.RetryEvery)
	}
}
