//go:build firn_weakreserve

package generator

// firn_weakreserve: once anything is reserved, issue past it by up to
// four reservation windows' worth of units, as a generator that trusted
// its own idea of the next write would. The simulator must catch it.
func reserved(L, res int64) bool { return res >= 0 && L <= res+weakReserveSlack }

// weakReserveSlack is how far past the reservation the weakened build
// issues, in units.
const weakReserveSlack = 1 << 20
