//go:build !firn_weakfence && !firn_weakfence_lease

package memory

import (
	"bytes"

	"github.com/firnid/firn/coordinator"
)

// weakTakeBack is false in every real build: a take-back deletes the stale
// owner record and creates a new one with a new token in the taker's
// session (see fence_weak.go).
const weakTakeBack = false

// guard is the fence every holder write (Reserve, Release) passes: the
// owner record still carries the token of this holder's acquisition and is
// still bound to the session this holder bound it to.
//
// The token alone is not enough: a Restore puts the revision counter back,
// so an acquisition after it can create another holder's record with the
// same token (build tag firn_weakfence_lease drops the session compare, and
// TestFenceLeaseRestore shows it fails). The session alone is not enough
// either: one session outlives an acquisition (every lease of a client
// shares it), and a record re-created in it would pass (build tag
// firn_weakfence).
func guard(o owner, token, session int64) bool { return o.token == token && o.session == session }

// counterGuard is the fence of a counter write: the stored counter is
// still, byte for byte, the record the writer read. Every write raises the
// counter's Seq, so equal bytes mean no write came between. The revision
// alone is not enough: a Restore puts the revision counter back, and a
// counter written after it can carry the revision of one read before it
// (build tag firn_weakfence_lease compares the revision alone, and
// TestFenceLeaseCounterRestore fails).
func counterGuard(stored []byte, _ int64, prev coordinator.CounterRecord) bool {
	return bytes.Equal(stored, prev.Raw)
}
