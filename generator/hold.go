//go:build !firn_weakhold

package generator

// heldNow reports whether the generator is held out of service: by its
// own Hold, or by the Wide it is a member of. The Wide's hold is the
// member's; the build tag firn_weakhold gives members a hold of their
// own, set only on those present at each Wide.Hold (hold_weak.go), and
// the simulator must catch it.
func (g *Generator) heldNow() bool {
	if g.held.Load() {
		return true
	}
	w := g.owner.Load()
	return w != nil && w.held.Load()
}

// holdMembers is the members' part of Wide.Hold: nothing, as they read
// the Wide's hold themselves (heldNow).
func holdMembers([]*Generator, bool) {}
