//go:build firn_weakseq

package sections

// startAbove, weakened: half the persisted maximum, so that a new owner
// hands out values an earlier owner may have handed out (below the
// maximum, by up to the write-ahead step, lie the section's highest
// values; with a high rate the step is large, so half is needed to reach
// them reliably).
func startAbove(prev uint64) uint64 { return prev / 2 }
