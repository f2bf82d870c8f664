package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
)

// TestViolationKindsByOwnText: a violation's kind is named by the check's
// own words, never by a word of the refusal or the reason it quotes. run.sh
// counts a weakened build as caught when a failed seed shows one of the
// kinds of the rule it weakens (firn_weakfence: duplicate, holder-overlap,
// holder-bounds): a refusal's violation whose quoted reason says
// "acknowledged" (a lost session's "no renewal acknowledged", a restore's
// "… had reservation 9 acknowledged") must not pass for holder-bounds.
func TestViolationKindsByOwnText(t *testing.T) {
	w := &world{start: time.Now(), holders: map[holderKey][]*interval{}, closed: map[coordinator.Slot][]*interval{}}
	slot := coordinator.Slot{Worker: 3}
	// The holder checks' own violations: holder-bounds.
	w.holderEvent("n1", "holder_open", 1, slot, 10, -1, -1)
	w.holderEvent("n1", "holder_close", 1, slot, 10, 20, 30) // issued 30, acknowledged 20
	w.checkHolderLocked("n1", "n1/c1", slot, 25, 12345)      // above the closed holder's acknowledged 20
	// The refusal checks' violations (sim.go: checkRefusal, checkHeld),
	// quoting reasons the nodes give.
	lost := `session ended: no renewal acknowledged for 3s: coordinator unavailable`
	restored := `coordinator state rolled back: generator "default" dc=0 worker=3: coordinator shows reservation 5, this node saw 9 acknowledged`
	w.violate("%s: %s refused %s %q while its generator's state served throughout the call (not serving needs a cause held)",
		"n1/c1", "NextIDs(10)", "LEASE_LOST", lost)
	w.violate("%s: %s refused %s %q, a cause its generator's state did not hold during the call (its states: %s)",
		"n1/c1", "NextIDs(10)", "RESTORE_DETECTED", restored, "serving")
	w.violate("%s: %s: a call ran to its deadline (%v): %v", "n1/c2", "NextRange(100)", 2*time.Second,
		`generator "default" not serving: `+lost)
	want := []string{"holder-bounds", "holder-bounds", "refused-while-serving", "cause-not-held", "deadline"}
	if len(w.violations) != len(want) {
		t.Fatalf("%d violations, want %d:\n%s", len(w.violations), len(want), strings.Join(w.violations, "\n"))
	}
	for i, v := range w.violations {
		if got := kindOf(v); got != want[i] {
			t.Errorf("kind %q, want %q: %s", got, want[i], v)
		}
	}
}

// TestTwoHoldingsOfOneWorker: a node's holding whose lease ended, not yet
// closed, beside another holding of the same node that took the worker
// again (a wide generator's holders, after the node's session ended):
// both open at once, the older closes having acknowledged nothing, and
// the newer's IDs are its own — no violation. The checks still hold for
// each: an ID above what the closed newer one acknowledged is one.
func TestTwoHoldingsOfOneWorker(t *testing.T) {
	w := &world{start: time.Now(), holders: map[holderKey][]*interval{}, closed: map[coordinator.Slot][]*interval{}}
	slot := coordinator.Slot{Worker: 15}
	w.holderEvent("n1", "holder_open", 7, slot, 100, -1, -1) // took the worker again
	w.holderEvent("n1", "holder_open", 6, slot, 100, -1, -1) // its lease ended before it opened
	w.holderEvent("n1", "holder_close", 6, slot, 100, -1, -1)
	w.checkHolderLocked("n1", "n1/c1", slot, 101, 1)
	w.checkHolderLocked("n1", "n1/c1", slot, 150, 2)
	w.holderEvent("n1", "holder_close", 7, slot, 100, 160, 150)
	if len(w.violations) != 0 {
		t.Fatalf("violations:\n%s", strings.Join(w.violations, "\n"))
	}
	w.checkHolderLocked("n1", "n1/c1", slot, 161, 3)
	w.holderEvent("n1", "holder_close", 7, slot, 100, 160, 150)
	want := []string{"above its closed holder's acknowledged 160", "closed a holder interval of dc=0 worker=15 it never opened"}
	if len(w.violations) != len(want) {
		t.Fatalf("%d violations, want %d:\n%s", len(w.violations), len(want), strings.Join(w.violations, "\n"))
	}
	for i, v := range w.violations {
		if !strings.Contains(v, want[i]) {
			t.Errorf("violation %d: %s; want it to say %q", i, v, want[i])
		}
	}
}
