//go:build !firn_weakstep

package clockpolicy

import "github.com/firnid/firn/clockguard"

// holdsOnRollback reports whether a step the step detector saw may hold
// the generators out: a backward one (each generator then compares it
// with its own MaxLead).
func holdsOnRollback(st clockguard.Step) bool { return st.Backward() }
