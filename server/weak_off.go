//go:build !firn_weakstep

package server

// weakStep is on only in the simulator's weakened build firn_weakstep (see
// generator/weak_off.go): the clock policy then absorbs a backward step
// beyond max-lead instead of holding the generators out.
const weakStep = false
