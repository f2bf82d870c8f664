//go:build !firn_weakjournal

package datadir

// behind reports whether a coordinator that shows seen for a slot (its
// reservation, or a bump's generator floor above it) is behind acked, the
// last reservation this data dir acknowledged for the slot: a restore
// from an older snapshot. test/run.sh's weakened build firn_weakjournal
// swaps it (journal_weak.go), and the simulator must catch it.
func behind(seen, acked int64) bool { return seen < acked }
