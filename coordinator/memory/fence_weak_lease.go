//go:build firn_weakfence_lease && !firn_weakfence

package memory

import "github.com/firnid/firn/coordinator"

// weakTakeBack is false: this build weakens only the session half of the
// guard.
const weakTakeBack = false

// guard, under build tag firn_weakfence_lease, compares the token alone,
// for the TestFenceLease tests: after a Restore another holder's record
// can carry the same token, and each TestFenceLease test must fail in such
// a build.
func guard(o owner, token, _ int64) bool { return o.token == token }

// counterGuard, under build tag firn_weakfence_lease, compares the
// counter's revision alone: after a Restore a counter written since can
// carry the revision of one read before, and TestFenceLeaseCounterRestore
// fails.
func counterGuard(_ []byte, rev int64, prev coordinator.CounterRecord) bool {
	return rev == prev.Version
}
