// Package etcd is the coordinator backend on etcd (client v3).
//
// Keys, under a configurable prefix and cluster, per generator:
//
//	/<prefix>/<cluster>/<generator>/pin             layout, fixed datacenter, incarnation, schema (JSON)
//	/<prefix>/<cluster>/<generator>/cursor          next cursor position (19-digit decimal)
//	/<prefix>/<cluster>/<generator>/owner/<dc>-<w>  holder record and heartbeat (JSON), bound to an etcd lease
//	/<prefix>/<cluster>/<generator>/reserved/<dc>-<w>  reserved[w] (19-digit decimal), never lease-bound, never deleted
//	/<prefix>/<cluster>/<generator>/floor           generator floor set by Bump (19-digit decimal), never lowered
//	/<prefix>/<cluster>/<generator>/restored        restore marker (JSON evidence) written by MarkRestored, deleted by Bump
//	/<prefix>/<cluster>/<generator>/definition      the generator's definition (JSON, firn generator create), created if absent, never deleted
//
// Fences, exactly as the design has them. Acquisition is one txn
// If(CreateRevision(owner)==0, CreateRevision(pin)==pinRev,
// ModRevision(reserved)==scanned, ModRevision(floor)==scanned,
// CreateRevision(restored)==0) Then(Put(owner, lease), Get(reserved),
// advance cursor). Every later write of the holder (Reserve with its
// heartbeat, Release) and a force-release is one txn guarded by
// CreateRevision(owner)==rev AND LeaseValue(owner)==lease: rev is the
// revision at which the holder created the key, lease the etcd lease it
// bound it to. Neither half suffices alone: one etcd lease outlives an
// acquisition (all leases of one Coordinator share it), and a restore from
// a snapshot without --bump-revision reuses revision numbers, so another
// holder's key can carry the same create revision. Taking one's own stale
// worker back (same instance ID, heartbeat older than
// coordinator.TakeBackAge) is a Delete guarded by the old create revision
// followed by the normal acquisition; never a Put over the old key. No
// write of an owner record is unconditional.
//
// Numbers that decide safety (reservations, the generator floor) are read,
// parsed in the canonical encoding only — anything else is an error naming
// the key, never compared as text — decided numerically, written guarded
// on the mod revision read, and read back in the same txn. Inside a
// holder's txn the reservation write is a nested txn on the mod revision
// this holder last saw: when the value moved behind its back (an operator,
// a bump, a restore) nothing is written, the holder reads what is there
// and decides again; a value below what this lease had acknowledged is
// reported as *coordinator.RolledBackError once raised again. Reserve never
// lowers a reservation, so a bump survives. Only the cursor, which orders
// slots and never decides safety, is raised by a text compare.
//
// A restore marker refuses every acquisition of its generator while it
// stands (from the scan, and atomically in the take txn), a node with an
// empty data dir included. Bump refuses a By below its gap and a floor past
// BumpSpec.MaxTime before writing anything, and deletes the marker last,
// guarded by the mod revision it read.
//
// A take txn whose reply is lost may have been applied: its owner key,
// bound to this Coordinator's live etcd lease and carrying the node's
// instance ID, would hold the worker until the lease ends. The next
// Acquire deletes such keys (guarded by their create revision and lease)
// unless a lease of this Coordinator holds them or an acquisition of them
// is in flight. A take applied later still, after the retry's scan, is
// found by the session: once one of its takes went unanswered (or failed
// on an owner key already bound to it), every acknowledged renewal is
// followed by a sweep of the keys attached to the etcd lease, which
// deletes such strays the same way. A release whose reply is lost is
// retried, and the retry's guard fails on the key the release deleted: it
// reads back what the release left and reports it released when the owner
// key is no longer this holder's and the reservation holds what it sent
// (or a later holder's write). Session grants are serialised within each
// caller's context: no caller waits past its deadline on another's grant.
//
// Hazards: the keepalive channel can close after etcd already expired the
// lease; Done only triggers re-acquisition, safety rests on the fences. A
// frozen member would hang calls without the gRPC keepalive (1 s) and the
// per-call timeout (Timing.Timeout): both are always set. Under build tag
// firn_weakfence the guard is deliberately weakened to the lease compare
// alone, with a Put-based take-back; under firn_weakfence_lease to the
// create-revision compare alone: each TestFence test (TestFenceLease ones
// under the second tag) must fail in such a build.
package etcd
