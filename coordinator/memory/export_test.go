package memory

import "github.com/firnid/firn/coordinator"

// ClientOf is the client a lease of this package was acquired through.
func ClientOf(l coordinator.Lease) *Client {
	if ml, ok := l.(*lease); ok {
		return ml.c
	}
	return nil
}

// TokenOf is a lease's ownership token.
func TokenOf(l coordinator.Lease) int64 { return l.(*lease).token }

// WeakTakeBack reports whether this build has the weak take-back.
const WeakTakeBack = weakTakeBack

// SetAfterTake installs a hook that runs in Acquire after the take and
// before the lease is tracked.
func SetAfterTake(c *Client, f func()) { c.afterTake = f }

// GiveUpSession gives the client's current session up on its side, as a
// renewal unanswered for a TTL does; the store keeps it until its TTL
// runs out.
func GiveUpSession(c *Client) {
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		c.sessionLost(s, "given up by the test")
	}
}
