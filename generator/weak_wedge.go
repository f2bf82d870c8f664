//go:build firn_wedge && !firn_weakstep

package generator

// firn_wedge: the wedge the review found comes back — the generator
// follows a forward step it should refuse, a reservation wait ends only
// when the reservation reaches the time it was sized from, and the ring's
// filler waits in it holding its lock. The simulator must catch it.
const (
	weakStep = false
	wedge    = true
)
