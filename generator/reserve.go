//go:build !firn_weakreserve

package generator

// reserved reports whether time L may be issued under the acknowledged
// reservation res: only up to it (rule 1 of docs/design.md, Uniqueness).
// Every issuing path asks it; test/run.sh's weakened build
// firn_weakreserve swaps it (reserve_weak.go) and the simulator must
// catch the IDs above the reservation.
func reserved(L, res int64) bool { return L <= res }
