//go:build !firn_weakheld

package coordinator

// held reports whether the taker holds slot already (Spec.Held): such a
// slot is never a candidate.
func held(spec Spec, slot Slot) bool { return spec.Held[slot] }
