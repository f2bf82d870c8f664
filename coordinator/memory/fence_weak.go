//go:build firn_weakfence

package memory

// weakTakeBack, under build tag firn_weakfence only (for the fence tests):
// a take-back writes over the old owner record, keeping its token and its
// session, and holder writes compare only the session. Each TestFence test
// but the TestFenceLease ones must fail in such a build.
const weakTakeBack = true

func guard(o owner, _, session int64) bool { return o.session == session }
