// Package datadir keeps a node's coordinator state in its data directory: its
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
//     remembered (coordinator.RecreatedError, "coordinator state
//     recreated") until a bump's generator floor lies above everything
//     the node reserved or saw acknowledged, and then takes the new one;
//     and one whose reservation read at acquisition is below the R last
//     acknowledged for that slot (coordinator.ErrRolledBack, "coordinator
//     state rolled back");
//   - the instance file is replaced atomically (a temporary file, fsynced,
//     renamed, the directory fsynced); a generator's state, written every
//     second, goes in place into the older of two slot files, each record
//     with a sequence number and a checksum, and is fsynced: a crash tears
//     at most the record being written, and a load takes the newest whole
//     one (slots.go).
//
// Hazards: the acknowledged R of a slot is persisted with the next write
// (the next BeforeReserve), not on its own: after a crash the remembered
// value may be one reservation old, which weakens rollback detection by
// one refresh and never its safety. A data directory copied to another
// machine carries its instance ID with it; the embedded coordinator checks
// for that (coordinator/embedded).
package datadir
