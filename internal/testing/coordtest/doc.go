// Package coordtest is the one harness every coordinator backend runs: the
// same cases (sequential order and wrap-around, reuse rules, concurrent
// acquirers, exhaustion, the pin race, lease loss, a holder frozen with
// SIGSTOP in a separate process, release and restart, take-back through the
// fence, rollback detection, the generator-wide restore marker and the
// bump that clears it) against real servers the backend starts.
//
// A backend implements Backend and Cluster (backend.go documents them) and
// wires Main, Run and the Fence* cases into its own test package.
//
// Invariants checked everywhere: a slot is never held by two live leases; a
// new holder's Floor is at least every reservation a former holder had
// acknowledged; a holder whose ownership is gone never gets another
// reservation acknowledged.
//
// Hazards: the frozen-holder cases re-execute the test binary as a child
// (see Main) and wait multiples of the cluster's TTL, so keep the TTL small.
// A cluster no other process can reach (the memory coordinator) implements
// InProcessCluster: its children are goroutines on clients of their own,
// frozen through a Freezer instead of SIGSTOP. Every child is killed at
// cleanup, even when the test fails.
package coordtest
