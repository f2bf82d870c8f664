// Package local keeps a node's coordinator state in its data directory: its
// instance ID, and per generator its own last reservation, the pin's
// incarnation ID and the last reservation R acknowledged for each worker
// slot it held.
//
// Invariants:
//
//   - the last reservation is written and fsynced before each Reserve is
//     sent (BeforeReserve), so after a crash a restart starts above every
//     time the node may have used, whichever worker it gets; it is lowered
//     only by a release, to the highest time actually produced;
//   - Check refuses a lease whose pin incarnation differs from the one
//     remembered (coordinator.ErrRecreated, "coordinator state recreated")
//     or whose reservation read at acquisition is below the R last
//     acknowledged for that slot (coordinator.ErrRolledBack, "coordinator
//     state rolled back");
//   - every file is replaced atomically: written to a temporary file,
//     fsynced, renamed over the old one, and the directory fsynced.
//
// Hazards: the acknowledged R of a slot is persisted with the next write
// (the next BeforeReserve), not on its own: after a crash the remembered
// value may be one reservation old, which weakens rollback detection by
// one refresh and never its safety. A data directory copied to another
// machine carries its instance ID with it; the embedded coordinator checks
// for that (coordinator/embedded).
package local
