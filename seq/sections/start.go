//go:build !firn_weakseq

package sections

// startAbove is the value every key of a section starts above after a
// take: the maximum the take's write replaced, at or above every value
// any earlier owner handed out. The weakened build firn_weakseq starts at
// half of it, and the checker must catch it (test/run.sh).
func startAbove(prev uint64) uint64 { return prev }
