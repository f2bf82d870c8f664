// Package coordinator hands out worker-ID leases and stores time
// reservations, behind one interface that the etcd and ZooKeeper backends
// (and the embedded default, which is the etcd backend on an in-process
// etcd) implement.
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
//     key's CreateRevision; ZooKeeper: the exact versions last written);
//   - a new holder reads reserved[w] in the same atomic step that takes
//     ownership, and its Floor is at least that value.
//
// Hazards: a lease's Done channel (etcd keepalive, ZooKeeper session events)
// can fire after the coordinator has already let the lease go. Safety never
// waits on it; it only triggers re-acquisition.
package coordinator
