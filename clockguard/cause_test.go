package clockguard_test

import (
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
)

// A refusal names the first held reason's code and detail, the latest
// known release time, and the lifecycle's own codes around it.
func TestRefusal(t *testing.T) {
	s, _, clock := newState(t)
	now, _ := clock.Now()
	if r := s.Snapshot().Refusal(); r.Code != clockguard.CodeStarting {
		t.Fatalf("new state: refusal %+v, want STARTING", r)
	}
	s.SetCause(clockguard.SourceNTP, "NTP offset 2s beyond --max-clock-offset 250ms",
		clockguard.Detail{Code: clockguard.CodeNTPOffset, Limit: "250ms", Measured: "2s"})
	s.Set(clockguard.SourcePeers, "checking peers") // the source's usual code
	s.SetCause(clockguard.SourceLease, "waiting", clockguard.Detail{Code: clockguard.CodeStarting, RetryAt: now.Add(3 * time.Second)})
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	r := s.Snapshot().Refusal()
	if r.Code != clockguard.CodeNTPOffset || r.Limit != "250ms" || r.Measured != "2s" || !r.RetryAt.Equal(now.Add(3*time.Second)) {
		t.Fatalf("refusal %+v: want NTP_OFFSET, limit 250ms, measured 2s, retry at +3s", r)
	}
	if got := s.Snapshot().Causes[1].Code; got != clockguard.CodePeerSkew {
		t.Fatalf("peers reason set without a code has code %q, want PEER_SKEW", got)
	}
	// The same reason with a new detail replaces the detail.
	s.SetCause(clockguard.SourceNTP, "NTP offset 2s beyond --max-clock-offset 250ms",
		clockguard.Detail{Code: clockguard.CodeNTPOffset, Limit: "250ms", Measured: "3s"})
	if r := s.Snapshot().Refusal(); r.Measured != "3s" {
		t.Fatalf("refusal %+v after a new measurement, want measured 3s", r)
	}
	s.Clear(clockguard.SourceNTP)
	if r := s.Snapshot().Refusal(); r.Code != clockguard.CodePeerSkew || r.Limit != "" {
		t.Fatalf("refusal %+v after NTP cleared, want PEER_SKEW without a limit", r)
	}
	s.Clear(clockguard.SourcePeers)
	s.Clear(clockguard.SourceLease)
	if r := s.Snapshot().Refusal(); r != (clockguard.Refusal{}) {
		t.Fatalf("serving: refusal %+v, want none", r)
	}
	if err := s.Drain("shutting down"); err != nil {
		t.Fatal(err)
	}
	if r := s.Snapshot().Refusal(); r.Code != clockguard.CodeDraining {
		t.Fatalf("draining: refusal %+v, want DRAINING", r)
	}
}
