//go:build firn_weakstep

package generator

// firn_weakstep: a backward step beyond MaxLead is absorbed (waited out)
// instead of failing closed. The simulator must catch it.
const (
	weakStep = true
	wedge    = false
)
