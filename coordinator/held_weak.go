//go:build firn_weakheld

package coordinator

// firn_weakheld: a taker's own other slots (Spec.Held) are offered like
// any other, so a wide generator's holder may take a sibling's slot whose
// lease ended without the sibling knowing yet. TestPlanSkipsHeldSlots
// must fail (test/run.sh says why the simulator no longer can).
func held(Spec, Slot) bool { return false }
