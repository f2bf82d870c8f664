package client

import (
	"cmp"
	"math"
	"slices"
	"sync/atomic"
)

// batch is one run of consecutive IDs as the buffer holds it: the IDs are
// first+0 … first+n-1, so a batch costs the same whatever its length and
// a take computes its ID instead of loading it. Takers claim indexes with
// one atomic add on pos; an index below n belongs to its taker alone, so
// no ID reaches two callers. pos only grows: a batch is retired
// (exhausted or dropped as stale) by pushing pos past n, never by
// lowering it.
type batch struct {
	first  uint64 // the ID at index 0
	n      int64  // how many IDs
	half   int64  // the index whose taker wakes the refiller; -1: none
	expire int64  // the last monotonic reading (ns) at which its IDs may be handed out
	// ep is the endpoint that issued the run. born is how many refills
	// had been delivered when its refill was launched, dseq its refill's
	// own number in delivery order: a batch with born below another's
	// dseq was in flight with it (see installLocked).
	ep   *endpoint
	born uint64
	dseq uint64
	// retired is set (under Client.mu) once the batch's served count has
	// been added to Client.retired.
	retired bool
	_       [cacheLine - 8*7 - 1]byte
	pos     atomic.Int64 // next index to claim; written by every taker
	_       [cacheLine - 8]byte
}

const cacheLine = 64

// newEmptyBatch is the sentinel installed when the buffer holds nothing: it
// never expires and has no IDs, so every take falls to the slow path.
func newEmptyBatch() *batch {
	return &batch{half: -1, expire: math.MaxInt64, retired: true}
}

// served is how many IDs takers got from b so far.
func (b *batch) served() int64 { return min(b.pos.Load(), b.n) }

// remaining is how many IDs are left to claim.
func (b *batch) remaining() int64 { return b.n - b.served() }

// runsOf splits ids (a NextIDs answer) into runs of consecutive IDs.
func runsOf(ids []uint64) []Run {
	var runs []Run
	for _, id := range ids {
		// id != 0: a run ending at the top of the range does not wrap.
		if k := len(runs) - 1; k >= 0 && id != 0 && runs[k].First+runs[k].Count == id {
			runs[k].Count++
			continue
		}
		runs = append(runs, Run{First: id, Count: 1})
	}
	return runs
}

// sortRuns sorts disjoint runs by their first ID and merges the ones that
// touch.
func sortRuns(runs []Run) []Run {
	slices.SortFunc(runs, func(a, b Run) int { return cmp.Compare(a.First, b.First) })
	out := runs[:0]
	for _, r := range runs {
		if k := len(out) - 1; k >= 0 && out[k].First+out[k].Count == r.First && r.First != 0 {
			out[k].Count += r.Count
			continue
		}
		out = append(out, r)
	}
	return out
}

// countOf is how many IDs runs hold.
func countOf(runs []Run) uint64 {
	var n uint64
	for _, r := range runs {
		n += r.Count
	}
	return n
}
