// Package coordinator hands out worker-ID leases and stores time
// reservations. A node uses the runtime part, Coordinator (Acquire,
// MarkRestored, Peers, Close); the admin commands use Admin (Workers,
// ForceRelease, Bump, Generators). Every backend implements both
// (Backend): etcd, ZooKeeper, the embedded default (the etcd backend on an
// in-process etcd), memory (in-process, with injected faults, for tests
// and simulation) and Lazy over any of them. This package also holds what
// every backend shares: the Spec and its slot order (Spec.SlotAt: workers
// vary fastest, the datacenter comes from the same cursor unless fixed),
// the slot-choice policy (Plan over a backend's Scan: each backend keeps
// its scan, its take and its fences, and takes the plan's candidates in
// order), the typed errors, the Timing defaults and their relations
// (Timing.Validate, and ValidateSession for a session-based backend: the
// one place they are checked, by the backends, by a node's configuration
// and by cmd/firn, which names its flags through TimingNames), the
// Reserver, the slot key format (Slot.Key, ParseSlotKey), and the lease
// plumbing every backend runs alike: the Acquire loop (RetryAcquire) and
// the part of a lease that is not its fenced writes (LeaseCore).
//
// It knows nothing of ID generation: a layout is its canonical string plus
// its worker and datacenter limits, and a reservation is an opaque ordered
// int64 (the generator's time field).
//
// Invariants, per worker slot w of one (cluster, generator):
//
//   - reserved[w] is persistent, never bound to a lease, never deleted, and
//     only ever raised while held (Release may lower it to the highest time
//     actually issued, in the same fenced write that frees ownership);
//   - every write by a holder is fenced on still owning w (etcd: the owner
//     key's CreateRevision and its etcd lease; ZooKeeper: the exact
//     versions last written);
//   - stored numbers are parsed in their canonical encoding and compared
//     as numbers; anything else is an error naming the key;
//   - while a generator's restore marker stands (MarkRestored), no node
//     acquires for it — checked atomically with taking ownership — until
//     a Bump whose By covers the marker's gap clears it; a Bump past the
//     layout's last time value is refused before anything is written;
//   - a new holder reads reserved[w] in the same atomic step that takes
//     ownership, and its Floor is at least that value;
//   - the Reserver raises a generator's bound (OnAck) only after the
//     coordinator acknowledged a fenced write, and only after the node's
//     own record (Journal) was made durable; any error or timeout leaves
//     the bound where it was.
//
// Hazards: a lease's Done channel (etcd keepalive, ZooKeeper session events)
// can fire after the coordinator has already let the lease go. Safety never
// waits on it; it only triggers re-acquisition. The Timing relations
// (window >= 2 × timeout + 1.5 s; on ZooKeeper also >= 2/3 of the session
// timeout + 1.5 s) protect availability only; the test-only
// AllowShortWindow lifts them.
package coordinator
