//go:build firn_weakfence_lease && !firn_weakfence

package memory

// weakTakeBack is false: this build weakens only the session half of the
// guard.
const weakTakeBack = false

// guard, under build tag firn_weakfence_lease, compares the token alone,
// for the TestFenceLease tests: after a Restore another holder's record
// can carry the same token, and each TestFenceLease test must fail in such
// a build.
func guard(o owner, token, _ int64) bool { return o.token == token }
