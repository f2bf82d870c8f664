package sim

import (
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/server/core"
)

// The refusal check. Each node life records its generator's serving
// states as they change (Core.Watch, with the causes and their codes from
// Core.StateSnapshot), and every refusal is held against the states of its
// call: from just before the call until its refusal came back. A refusal
// "not serving" must report a state held then — its code and its reason,
// as that state's Refusal gives them — and a generator whose state served
// through the whole call refuses nothing as not serving (docs/design.md,
// Liveness rules; Errors).

// stateEntry is one state the generator was in.
type stateEntry struct {
	state  clockguard.State
	reason string
	causes []clockguard.Cause
	// exact: causes are this state's. A transition whose snapshot, read
	// when it was delivered, already showed a later change keeps its
	// reason (exact, from the transition) but not its causes.
	exact bool
}

func entryOf(sn clockguard.Snapshot) stateEntry {
	return stateEntry{state: sn.State, reason: sn.Reason, causes: sn.Causes, exact: true}
}

// refusal is what a call refused in this state reports.
func (e stateEntry) refusal() clockguard.Refusal {
	return clockguard.Snapshot{State: e.state, Reason: e.reason, Causes: e.causes}.Refusal()
}

func (e stateEntry) String() string {
	if e.state == clockguard.StateServing {
		return "serving"
	}
	if !e.exact {
		return fmt.Sprintf("%s %q", e.state, e.reason)
	}
	r := e.refusal()
	return fmt.Sprintf("%s %s %q", e.state, r.Code, r.Reason)
}

// stateLog is one node life's serving states of one generator, in order.
type stateLog struct {
	gen     string // the generator's name
	mu      sync.Mutex
	entries []stateEntry
	// onEntry, when set, sees each state recorded (with h.mu held).
	onEntry func(stateEntry)
}

// watch records every transition of nc's generator h.gen.
func (h *stateLog) watch(nc *core.Core) error {
	_, err := nc.Watch(h.gen, func(tr clockguard.Transition) {
		sn, err := nc.StateSnapshot(h.gen)
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.onEntry != nil {
			defer func(n int) {
				for _, e := range h.entries[n:] {
					h.onEntry(e)
				}
			}(len(h.entries))
		}
		if err == nil && sn.State == tr.To && sn.Reason == tr.Reason {
			h.entries = append(h.entries, entryOf(sn))
			return
		}
		// Changed again before this delivery: the transition's state as
		// it names it, then the later one read (its own delivery
		// follows).
		h.entries = append(h.entries, stateEntry{state: tr.To, reason: tr.Reason})
		if err == nil {
			h.entries = append(h.entries, entryOf(sn))
		}
	})
	return err
}

// mark is where the states recorded from now on begin.
func (h *stateLog) mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.entries)
}

// since returns the states recorded from mark on.
func (h *stateLog) since(mark int) []stateEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]stateEntry(nil), h.entries[min(mark, len(h.entries)):]...)
}

// caughtUp reports whether the last state recorded is sn: the deliveries
// of the changes made before sn was read are in (a transition is delivered
// just after the change, on the goroutine that made it).
func (h *stateLog) caughtUp(sn clockguard.Snapshot) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.entries) == 0 {
		return true
	}
	e := h.entries[len(h.entries)-1]
	return e.state == sn.State && e.reason == sn.Reason
}

// callStates are the states of one call: the one read just before it,
// those recorded while it ran, and the one read after its answer, once
// the deliveries of the changes before that reading are in.
func (h *stateLog) callStates(nc *core.Core, pre stateEntry, mark int, spins int) []stateEntry {
	post, err := nc.StateSnapshot(h.gen)
	for i := 0; i < spins && err == nil && !h.caughtUp(post); i++ {
		runtime.Gosched()
	}
	states := append([]stateEntry{pre}, h.since(mark)...)
	if err == nil {
		states = append(states, entryOf(post))
	}
	return states
}

func servedThroughout(states []stateEntry) bool {
	for _, e := range states {
		if e.state != clockguard.StateServing {
			return false
		}
	}
	return true
}

// heldDuring reports whether a refusal with this code and reason is what
// one of the states refuses with: its code and its reason text, as the
// serving state reports them (Snapshot.Refusal). For a state whose causes
// were not caught, the reason text alone decides.
func heldDuring(states []stateEntry, code clockguard.Code, reason string) bool {
	for _, e := range states {
		if e.state == clockguard.StateServing {
			continue
		}
		if !e.exact {
			if e.reason == reason {
				return true
			}
			continue
		}
		if r := e.refusal(); r.Code == code && r.Reason == reason {
			return true
		}
	}
	return false
}

// describeStates lists the distinct states of a call, for a violation.
func describeStates(states []stateEntry) string {
	var out []string
	for i, e := range states {
		s := e.String()
		if i > 0 && s == out[len(out)-1] {
			continue
		}
		out = append(out, s)
		if len(out) == 6 {
			out = append(out, fmt.Sprintf("… %d more", len(states)-i-1))
			break
		}
	}
	return strings.Join(out, " → ")
}
