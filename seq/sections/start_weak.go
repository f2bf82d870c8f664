//go:build firn_weakseq

package sections

// startAbove, weakened: one step below the persisted maximum, so that a
// new owner hands out values an earlier owner may have handed out.
func startAbove(prev uint64) uint64 { return prev - min(prev, DefaultMinStep) }
