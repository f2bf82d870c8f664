//go:build !firn_weakfence && !firn_weakfence_lease

package etcd

import (
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/coordinator"
)

// ownerGuard is the compare every write after acquisition carries: the
// owner key still has the create revision at which this holder created it,
// and is still bound to the etcd lease this holder bound it to.
//
// The create revision alone is not enough: a restore from a snapshot
// without --bump-revision reuses revision numbers, so another holder's
// owner key created after the restore can carry the same create revision
// (build tag firn_weakfence_lease drops the lease compare, and
// TestFenceLease shows it fails). The lease alone is not enough either: one
// etcd lease outlives an acquisition (it is shared by every lease of one
// client), and a re-created key under the same lease would pass it (build
// tag firn_weakfence).
func ownerGuard(ownerKey string, rev int64, lease clientv3.LeaseID) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", rev),
		clientv3.Compare(clientv3.LeaseValue(ownerKey), "=", lease),
	}
}

// counterGuard is the fence of a segment generator's counter write: the
// stored counter is still, byte for byte, the record the writer read.
// Every write raises the counter's seq, so equal bytes mean no write came
// between. The mod revision alone is not enough: a restore that reuses
// revision numbers can give a counter written since the revision of one
// read before it (build tag firn_weakfence_lease compares the revision
// alone, and TestFenceLeaseCounterRestore fails).
func counterGuard(key string, prev coordinator.CounterRecord) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", string(prev.Raw))}
}
