//go:build firn_weakstep

package generator

import "time"

// firn_weakstep, a weakened build for the simulator (test/run.sh): a
// backward step beyond MaxLead is waited out instead of failing closed.
// The simulator must catch it.
func rollbackFails(s, limit time.Duration) bool { return false }

func forwardHeld(step, limit time.Duration) bool { return step > limit }
