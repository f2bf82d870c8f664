//go:build !firn_weakstep && !firn_wedge

package generator

import "time"

// rollbackFails reports whether a backward step s of the wall clock fails
// closed: beyond the limit the lead absorbs (MaxLead).
func rollbackFails(s, limit time.Duration) bool { return s > limit }

// forwardHeld reports whether a forward step is held until ConfirmClock:
// beyond MaxForwardStep.
func forwardHeld(step, limit time.Duration) bool { return step > limit }
