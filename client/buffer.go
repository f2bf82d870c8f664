package client

import (
	"math"
	"sync/atomic"
)

// batch is one NextIDs response as the buffer holds it. Takers claim
// indexes with one atomic add on pos; an index below n belongs to its
// taker alone, so no ID reaches two callers. pos only grows: a batch is
// retired (exhausted or dropped as stale) by pushing pos past n, never by
// lowering it.
type batch struct {
	ids    []uint64 // 24 bytes
	n      int64    // len(ids)
	half   int64    // the index whose taker wakes the refiller
	expire int64    // the last tick at which its IDs may be handed out
	// retired is set (under Client.mu) once the batch's served count has
	// been added to Client.retired.
	retired bool
	_       [cacheLine - 24 - 8*3 - 1]byte
	pos     atomic.Int64 // next index to claim; written by every taker
	_       [cacheLine - 8]byte
}

const cacheLine = 64

func newBatch(ids []uint64, expire int64) *batch {
	return &batch{ids: ids, n: int64(len(ids)), half: int64(len(ids)) / 2, expire: expire}
}

// newEmptyBatch is the sentinel installed when the buffer holds nothing: it
// never expires and has no IDs, so every take falls to the slow path.
func newEmptyBatch() *batch {
	b := &batch{expire: math.MaxInt64, retired: true}
	return b
}

// served is how many IDs takers got from b so far.
func (b *batch) served() int64 { return min(b.pos.Load(), b.n) }

// remaining is how many IDs are left to claim.
func (b *batch) remaining() int64 { return b.n - b.served() }
