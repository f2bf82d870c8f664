//go:build firn_weakhold

package generator

// The simulator's weakened build firn_weakhold: a member keeps a hold of
// its own, set on the members present at each Wide.Hold, so a member that
// was away when the Wide was let go (its reservation lapsed during the
// hold) joins again held, and the generator says it serves while its
// source refuses. The simulator must catch it.

func (g *Generator) heldNow() bool { return g.held.Load() }

func holdMembers(ms []*Generator, on bool) {
	for _, m := range ms {
		m.held.Store(on)
	}
}
