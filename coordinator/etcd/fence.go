//go:build !firn_weakfence

package etcd

import clientv3 "go.etcd.io/etcd/client/v3"

// weakFence is false in every real build: see fence_weak.go.
const weakFence = false

// ownerGuard is the compare every write after acquisition carries: the
// owner key still has the create revision at which this holder created it.
// A lease compare would not do: one etcd lease outlives an acquisition (it
// is shared by every lease of one client), and a re-created key under the
// same lease would pass it.
func ownerGuard(ownerKey string, rev int64, _ clientv3.LeaseID) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", rev)
}
