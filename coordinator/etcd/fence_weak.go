//go:build firn_weakfence

package etcd

import clientv3 "go.etcd.io/etcd/client/v3"

// weakFence replaces the fence with a weaker one, for the fence tests only
// (build tag firn_weakfence): writes compare only the etcd lease, and a
// take-back Puts over the old owner key, keeping its create revision. Each
// TestFence test but the TestFenceLease ones must fail in such a build.
const weakFence = true

func ownerGuard(ownerKey string, _ int64, lease clientv3.LeaseID) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(ownerKey), "=", lease)}
}
