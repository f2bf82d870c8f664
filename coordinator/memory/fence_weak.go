//go:build firn_weakfence

package memory

import "github.com/firnid/firn/coordinator"

// weakTakeBack, under build tag firn_weakfence only (for the fence tests):
// a take-back writes over the old owner record, keeping its token and its
// session, and holder writes compare only the session. Each TestFence test
// but the TestFenceLease ones must fail in such a build.
const weakTakeBack = true

func guard(o owner, _, session int64) bool { return o.session == session }

// counterGuard, under build tag firn_weakfence, compares nothing: a
// counter write lands whatever came between its read and it, and
// TestFenceCounter fails.
func counterGuard([]byte, int64, coordinator.CounterRecord) bool { return true }
