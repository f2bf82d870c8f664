//go:build firn_wedge && !firn_weakstep

package generator

import "time"

func rollbackFails(s, limit time.Duration) bool { return s > limit }

// firn_wedge, a weakened build for the simulator (test/run.sh; see
// await_wedge.go): a forward step is followed at once, the step the wedge
// starts from.
func forwardHeld(step, limit time.Duration) bool { return false }
