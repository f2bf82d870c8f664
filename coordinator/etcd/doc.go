// Package etcd is the coordinator backend on etcd (client v3).
//
// Keys, under a configurable prefix and cluster, per generator:
//
//	/<prefix>/<cluster>/<generator>/pin             layout, fixed datacenter, incarnation, schema (JSON)
//	/<prefix>/<cluster>/<generator>/cursor          next cursor position (19-digit decimal)
//	/<prefix>/<cluster>/<generator>/owner/<dc>-<w>  holder record and heartbeat (JSON), bound to an etcd lease
//	/<prefix>/<cluster>/<generator>/reserved/<dc>-<w>  reserved[w] (19-digit decimal), never lease-bound, never deleted
//	/<prefix>/<cluster>/<generator>/floor           generator floor set by Bump (19-digit decimal), never lowered
//
// Fences, exactly as the design has them. Acquisition is one txn
// If(CreateRevision(owner)==0, CreateRevision(pin)==pinRev,
// ModRevision(reserved)==scanned, ModRevision(floor)==scanned) Then(Put(owner, lease), Get(reserved),
// advance cursor). Every later write of the holder (Reserve with its
// heartbeat, Release) and a force-release is one txn guarded by
// CreateRevision(owner)==rev, the revision at which the holder created the
// key. Taking one's own stale worker back (same instance ID, heartbeat older
// than coordinator.TakeBackAge) is a Delete guarded by the old create
// revision followed by the normal acquisition; never a Put over the old key.
// No write of an owner record is unconditional.
//
// All leases of one Coordinator share one etcd lease (granted on first use,
// again after it is lost); that is why a lease compare would not be a fence.
// Reserve raises reserved[w] with a value compare (it never lowers it, so a
// bump survives), and reports a value found below what this lease had
// acknowledged as *coordinator.RolledBackError.
//
// Hazards: the keepalive channel can close after etcd already expired the
// lease; Done only triggers re-acquisition, safety rests on the fences. A
// frozen member would hang calls without the gRPC keepalive (1 s) and the
// per-call timeout (Timing.Timeout): both are always set. Under build tag
// firn_weakfence the fence is deliberately weakened (lease-only compare,
// Put-based take-back) so that the fence tests can show they fail.
package etcd
