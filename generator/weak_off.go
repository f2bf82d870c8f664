//go:build !firn_weakstep && !firn_wedge

package generator

// The simulator's weakened builds (test/run.sh): under firn_weakstep a
// backward step beyond MaxLead is absorbed instead of failing closed;
// under firn_wedge the wait of the "promise under hazards" review comes
// back (a reservation wait that ignores the clock coming back, and a
// filler that waits in it). Every real build has both off.
const (
	weakStep = false
	wedge    = false
)
