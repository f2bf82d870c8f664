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
