package cluster

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/segment"
)

// Bounds are the allowances of the bounded-disorder check.
type Bounds struct {
	MaxLead      time.Duration
	MaxStaleness time.Duration
	Prefetch     time.Duration // the client's prefetch age bound (0 without)
	Skew         time.Duration // the largest injected clock offset (absolute)
	// Segment names the segment generators among those received: their
	// IDs are numbers from a counter, with no time, worker or holder
	// interval. They are checked for uniqueness within the generator and
	// for order per caller and node process (Received.Run); CheckCounter
	// checks them against the counter the coordinator keeps.
	Segment []string
}

// CheckResult summarises the checks of one scenario.
type CheckResult struct {
	IDs      int
	Problems []string
}

// Check runs checks 1–4 of every scenario on what the clients received and
// what the nodes logged: uniqueness within the generator, every ID inside
// its holder's interval with one worker's intervals disjoint, per-caller
// order, and bounded disorder. It fails t on any problem.
func Check(t testing.TB, layout generator.Layout, got []Received, nodes []*Node, b Bounds) CheckResult {
	t.Helper()
	var holders []*Interval
	for _, n := range nodes {
		holders = append(holders, n.Intervals()...)
	}
	res, worst, bound := CheckHistory(layout, got, holders, b)
	for _, pr := range res.Problems {
		t.Error(pr)
	}
	t.Logf("checked %d IDs: %d problems; worst time disorder %v (bound %v)", len(got), len(res.Problems), worst, bound)
	return res
}

// CheckHistory is Check on a history: the IDs received and the holder
// intervals the nodes logged. It returns the problems found (the first
// 20), the worst time disorder and its bound. check_test.go feeds it
// crafted histories, each breaking one promise, to show that each check
// can fail.
func CheckHistory(layout generator.Layout, got []Received, holders []*Interval, b Bounds) (res CheckResult, worst, bound time.Duration) {
	res.IDs = len(got)
	for i := range got {
		if got[i].Generator == "" {
			got[i].Generator = "default" // the nodes' default generator
		}
	}
	p := &problems{}
	checkUnique(p, got)
	// The bit-layout checks see the snowflake generators' IDs only.
	timed := got
	if len(b.Segment) > 0 {
		timed = nil
		for _, r := range got {
			if !slices.Contains(b.Segment, r.Generator) {
				timed = append(timed, r)
			}
		}
	}
	checkIntervals(p, layout, timed, holders)
	checkOrder(p, got, b.Segment)
	worst, bound = checkDisorder(p, layout, timed, b)
	res.Problems = p.list
	return res, worst, bound
}

// problems collects the first 20 problems a history shows.
type problems struct{ list []string }

func (p *problems) add(format string, args ...any) {
	if len(p.list) < 20 {
		p.list = append(p.list, fmt.Sprintf(format, args...))
	}
}

// checkUnique is check 1: no ID received twice from one generator.
// It sorts each generator's IDs as plain numbers, and looks up the records
// of a duplicate only when there is one: a scenario's history is millions
// of records, and sorting or copying them under the race detector was
// most of a long scenario's time.
func checkUnique(p *problems, got []Received) {
	n := map[string]int{}
	for i := range got {
		n[got[i].Generator]++
	}
	byGen := make(map[string][]uint64, len(n))
	for gen, k := range n {
		byGen[gen] = make([]uint64, 0, k)
	}
	for i := range got {
		r := &got[i]
		byGen[r.Generator] = append(byGen[r.Generator], r.ID)
	}
	for _, gen := range slices.Sorted(maps.Keys(byGen)) {
		ids := byGen[gen]
		slices.Sort(ids)
		for k := 1; k < len(ids); k++ {
			if ids[k] != ids[k-1] || (k > 1 && ids[k] == ids[k-2]) {
				continue // distinct, or a third copy of one already reported
			}
			// The first two records of the duplicate, in the order received.
			var first *Received
			for i := range got {
				r := &got[i]
				if r.ID != ids[k] || r.Generator != gen {
					continue
				}
				if first == nil {
					first = r
					continue
				}
				p.add("DUPLICATE ID %d of generator %s: from %s (client %d call %d) and %s (client %d call %d)",
					r.ID, gen, first.Node, first.Client, first.Call, r.Node, r.Client, r.Call)
				break
			}
			if len(p.list) >= 20 {
				return
			}
		}
	}
}

// checkIntervals is check 2: one worker's holder intervals are disjoint,
// and every ID lies in an interval of the node that answered it.
func checkIntervals(p *problems, layout generator.Layout, got []Received, holders []*Interval) {
	type slotKey struct {
		gen    string
		dc, wk uint64
	}
	bySlot := map[slotKey][]*Interval{}
	for _, h := range holders {
		k := slotKey{h.Generator, h.Datacenter, h.Worker}
		bySlot[k] = append(bySlot[k], h)
	}
	upper := map[*Interval]int64{}
	for k, hs := range bySlot {
		sort.Slice(hs, func(i, j int) bool { return hs[i].Floor < hs[j].Floor })
		for i, h := range hs {
			up := h.Upper()
			if i+1 < len(hs) {
				if hs[i+1].Floor < up {
					p.add("generator %s dc=%d worker=%d: holder on %s (floor %d, upper %d) overlaps the next on %s (floor %d)",
						k.gen, k.dc, k.wk, h.Node, h.Floor, up, hs[i+1].Node, hs[i+1].Floor)
				}
				// A killed holder may have had its last acknowledgement
				// unlogged; the next holder's floor is at least it.
				if !h.Released {
					up = max(up, hs[i+1].Floor)
				}
			}
			upper[h] = up
		}
	}
	for i := range got {
		r := &got[i] // (not a copy: a history is millions of records)
		id, err := layout.Decode(r.ID)
		if err != nil {
			p.add("ID %d from %s does not decode: %v", r.ID, r.Node, err)
			continue
		}
		found := false
		for _, h := range bySlot[slotKey{r.Generator, id.Datacenter, id.Worker}] {
			// IDs from the Go client ("" node) may come from any node.
			if (r.Node == "" || h.Node == r.Node) && id.Units > h.Floor && id.Units <= upper[h] {
				found = true
				break
			}
		}
		if !found {
			p.add("ID %d (time %d, dc %d, worker %d) from %s lies in no holder interval of that node", r.ID, id.Units, id.Datacenter, id.Worker, r.Node)
		}
	}
}

// callerKey is one caller's stream of IDs from one node (or one process
// of it: checkOrder).
type callerKey struct {
	client int
	node   string
	run    int
}

// checkOrder is check 3: a caller's IDs from one node go up — for a
// segment generator, from one process of the node: a restarted process
// gives out the remainders handed back first, below what went before.
func checkOrder(p *problems, got []Received, segment []string) {
	last := map[callerKey]*Received{}
	// Each client's records by call, in the order received within a call:
	// indices bucketed per client in the order received (a caller makes
	// one call at a time, so they are mostly in call order already), each
	// bucket sorted stably by call where it is not.
	n := map[int]int{}
	for i := range got {
		n[got[i].Client]++
	}
	byClient := make(map[int][]int, len(n))
	for c, k := range n {
		byClient[c] = make([]int, 0, k)
	}
	for i := range got {
		byClient[got[i].Client] = append(byClient[got[i].Client], i)
	}
	for _, c := range slices.Sorted(maps.Keys(byClient)) {
		idx := byClient[c]
		byCall := func(i, j int) int { return cmp.Compare(got[i].Call, got[j].Call) }
		if !slices.IsSortedFunc(idx, byCall) {
			slices.SortStableFunc(idx, byCall)
		}
		checkCallerOrder(p, got, idx, segment, last)
	}
}

// checkCallerOrder is checkOrder over one client's records, idx, in
// order of call.
func checkCallerOrder(p *problems, got []Received, idx []int, segment []string, last map[callerKey]*Received) {
	for _, i := range idx {
		r := &got[i]
		if r.Node == "" {
			continue // through the client's failover: no order promised
		}
		k := callerKey{r.Client, r.Node, 0}
		if slices.Contains(segment, r.Generator) {
			if r.Run == 0 {
				continue // answered by one of two processes
			}
			k.run = r.Run
		}
		if prev, ok := last[k]; ok && r.ID <= prev.ID {
			p.add("client %d on %s: ID %d (call %d) not above %d (call %d)", r.Client, r.Node, r.ID, r.Call, prev.ID, prev.Call)
		}
		last[k] = r
	}
}

// checkDisorder is check 4, bounded disorder. An ID is made while its call is in flight, so
// its time lies between the call's start less what may age in the
// ring (max-staleness plus the ring's freshness tick, a quarter of it:
// ringbuffer.Config; a prefetch buffer) and its receipt plus what the
// generator may lead the clock (max-lead); a unit of rounding, any
// injected skew and 50 ms of slack on each side. worst is the largest
// distance outside the call's own interval.
//
// A take judges the ring's IDs by its own clock reading
// (ringbuffer.Buffer.Take), so the ring's bound holds on a starved
// machine too. When takes judged by the tick the filler's timer advanced,
// a late timer let older IDs out: the overload scenario once saw 159 ms
// against max-staleness 100 ms + tick 25 ms + unit, and "kill -9 and
// restart loop under load" beside busy loops 236 ms against this bound's
// 176.
func checkDisorder(p *problems, layout generator.Layout, got []Received, b Bounds) (worst, bound time.Duration) {
	behind := b.MaxStaleness + b.MaxStaleness/4 + layout.Unit + b.Prefetch + b.Skew + 50*time.Millisecond
	ahead := b.MaxLead + layout.Unit + b.Skew + 50*time.Millisecond
	bound = max(behind, ahead)
	for i := range got {
		r := &got[i]
		id, err := layout.Decode(r.ID)
		if err != nil {
			continue
		}
		sent := r.Sent
		if sent.IsZero() {
			sent = r.At
		}
		switch {
		case id.Time.Before(sent):
			d := sent.Sub(id.Time)
			worst = max(worst, d)
			if d > behind {
				p.add("ID %d from %s: its time is %v before its call began, bound %v", r.ID, r.Node, d, behind)
			}
		case id.Time.After(r.At):
			d := id.Time.Sub(r.At)
			worst = max(worst, d)
			if d > ahead {
				p.add("ID %d from %s: its time is %v after its receipt, bound %v", r.ID, r.Node, d, ahead)
			}
		}
	}
	return worst, bound
}

// Unknown is what a scenario's callers and nodes do not know the outcome
// of: IDs may have been handed out or claimed, and lost, without anyone
// being told.
type Unknown struct {
	// Calls is the IDs asked for by calls that failed without an answer
	// (Failure.unknownOutcome): a node may have handed them out to a
	// caller that gave up.
	Calls uint64
	// Claims is how many segment claims the nodes logged as failed: a
	// claim whose reply was lost (the coordinator's timeout) may have
	// landed, and its IDs — one range — are then lost.
	Claims int
}

// CheckCounter is check 5, of a segment generator gen (definition def)
// against its counter c as the coordinator keeps it once every node
// stopped gracefully (each handed its unused claims back): every ID
// received lies in [def.Start, c.Next) — claimed — and in none of c.Free
// — not handed back after it was handed out, where the counter would give
// it out again. lost counts the IDs below c.Next neither received nor
// free: claimed, then never handed out nor back (a node killed, a claim
// whose reply was lost), or handed out to a call whose caller gave up.
// With exact, every lost ID must be explained by u: the u.Claims largest
// gaps may each be a claim whose reply was lost, and what the other gaps
// hold may not exceed u.Calls. With u zero, the IDs received and the free
// ranges are exactly [def.Start, c.Next): the counter dense. It returns
// the problems (the first 20) and lost.
func CheckCounter(got []Received, gen string, def segment.Definition, c segment.Counter, exact bool, u Unknown) (list []string, lost uint64) {
	p := &problems{}
	var ids []uint64
	for _, r := range got {
		if r.Generator != gen {
			continue
		}
		switch {
		case r.ID < def.Start:
			p.add("ID %d of %s from %s lies below the definition's start %d", r.ID, gen, r.Node, def.Start)
			continue
		case r.ID >= c.Next:
			p.add("ID %d of %s from %s lies at or above the counter's next %d: never claimed", r.ID, gen, r.Node, c.Next)
			continue
		}
		if i, ok := slices.BinarySearchFunc(c.Free, r.ID, func(f segment.Range, id uint64) int {
			switch {
			case f.Last < id:
				return -1
			case f.First > id:
				return 1
			}
			return 0
		}); ok {
			p.add("ID %d of %s from %s was handed out and lies in the free range %v: the counter gives it out again", r.ID, gen, r.Node, c.Free[i])
			continue
		}
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids) // a duplicate is check 1's
	// The covered ranges: the IDs received, then the free ones, in order.
	var covered []segment.Range
	for _, id := range ids {
		if k := len(covered); k > 0 && covered[k-1].Last+1 == id {
			covered[k-1].Last = id
		} else {
			covered = append(covered, segment.Range{First: id, Last: id})
		}
	}
	covered = append(covered, c.Free...)
	slices.SortFunc(covered, func(a, b segment.Range) int { return cmp.Compare(a.First, b.First) })
	var gaps []segment.Range
	at := def.Start
	for _, r := range append(covered, segment.Range{First: c.Next, Last: c.Next}) {
		if r.First > at {
			gaps = append(gaps, segment.Range{First: at, Last: r.First - 1})
			lost += r.First - at
		}
		at = max(at, r.Last+1)
	}
	if exact && lost > 0 {
		bySize := slices.Clone(gaps)
		slices.SortStableFunc(bySize, func(a, b segment.Range) int { return cmp.Compare(b.Len(), a.Len()) })
		var unexplained uint64
		for _, g := range bySize[min(u.Claims, len(bySize)):] {
			unexplained += g.Len()
		}
		if unexplained > u.Calls {
			p.add("%d IDs of %s lost below the counter's next %d (neither received nor handed back), in %d gaps, the first %v; "+
				"%d failed claims and calls of unknown outcome asking for %d IDs explain at most %d of them",
				lost, gen, c.Next, len(gaps), gaps[:min(len(gaps), 5)], u.Claims, u.Calls, lost-unexplained+u.Calls)
		}
	}
	return p.list, lost
}
