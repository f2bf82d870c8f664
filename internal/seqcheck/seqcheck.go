// Package seqcheck is the per-key linearizability checker of sequence
// generators: given every call that returned values (its key, its values,
// when it began and when it returned, on one clock), it finds a value
// handed out twice for one key, and a call that returned before another
// of the same key began but got values not all below the later call's.
// The simulator, the chaos suite, the server tests and `firn bench --mode
// seq` feed it every response they saw.
package seqcheck

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Call is one call that returned values: First … First+Count−1 for Key,
// begun at Start and returned at End (End ≥ Start, any one clock).
type Call struct {
	Key        string
	First      uint64
	Count      uint64
	Start, End time.Duration
	Who        string // for the report: the caller, the node
}

// Last is the call's last value.
func (c Call) Last() uint64 { return c.First + c.Count - 1 }

func (c Call) String() string {
	return fmt.Sprintf("[%d, %d] of key %q (%s, began %v, returned %v)", c.First, c.Last(), c.Key, c.Who, c.Start, c.End)
}

// Violation is one broken rule.
type Violation struct {
	Rule   string // "twice" or "order"
	Before Call   // for "order": the call that returned first
	After  Call
}

func (v Violation) String() string {
	if v.Rule == "twice" {
		return fmt.Sprintf("value handed out twice: %v and %v", v.Before, v.After)
	}
	return fmt.Sprintf("order: %v returned before %v began, and its values are not all below", v.Before, v.After)
}

// Recorder collects calls from many goroutines.
type Recorder struct {
	mu    sync.Mutex
	calls []Call
}

// Add records one call (Count 0 is ignored).
func (r *Recorder) Add(c Call) {
	if c.Count == 0 {
		return
	}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

// Calls is every call recorded.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// Len is the number of calls recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// Check returns the violations among calls, at most limit of them
// (limit ≤ 0: all), per key sorted, keys in order. O(n log n).
func Check(calls []Call, limit int) []Violation {
	byKey := map[string][]Call{}
	for _, c := range calls {
		if c.Count > 0 {
			byKey[c.Key] = append(byKey[c.Key], c)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []Violation
	full := func() bool { return limit > 0 && len(out) >= limit }
	for _, k := range keys {
		cs := byKey[k]
		// No value twice: sorted by First, each run must begin above the
		// largest value before it.
		sort.Slice(cs, func(i, j int) bool { return cs[i].First < cs[j].First })
		hi := -1
		for i := range cs {
			if hi >= 0 && cs[i].First <= cs[hi].Last() {
				out = append(out, Violation{Rule: "twice", Before: cs[hi], After: cs[i]})
				if full() {
					return out
				}
			}
			if hi < 0 || cs[i].Last() > cs[hi].Last() {
				hi = i
			}
		}
		// Real-time order: for each call, every call that returned before
		// it began must have a last value below its first. Sweep the calls
		// by start, keeping the call with the largest last value among
		// those that returned earlier.
		byEnd := append([]Call(nil), cs...)
		sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].End < byEnd[j].End })
		sort.Slice(cs, func(i, j int) bool { return cs[i].Start < cs[j].Start })
		j := 0
		var best *Call
		for i := range cs {
			for j < len(byEnd) && byEnd[j].End < cs[i].Start {
				if best == nil || byEnd[j].Last() > best.Last() {
					best = &byEnd[j]
				}
				j++
			}
			if best != nil && best.Last() >= cs[i].First {
				out = append(out, Violation{Rule: "order", Before: *best, After: cs[i]})
				if full() {
					return out
				}
			}
		}
	}
	return out
}
