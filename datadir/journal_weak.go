//go:build firn_weakjournal

package datadir

// firn_weakjournal: the data dir's record of what it acknowledged is
// never compared, so a restored coordinator goes unnoticed by the node
// that knows better. Its unit test TestCheck must fail (test/run.sh): the
// simulator's nodes share a coordinator whose restore guard covers a
// restore first.
func behind(seen, acked int64) bool { return false }
