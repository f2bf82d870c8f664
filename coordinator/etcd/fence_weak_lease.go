//go:build firn_weakfence_lease && !firn_weakfence

package etcd

import (
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/coordinator"
)

// ownerGuard, under build tag firn_weakfence_lease, drops the lease compare
// and keeps only the create revision, for the TestFenceLease tests: after a
// restore without --bump-revision another holder's owner key can carry the
// same create revision, and each TestFenceLease test must fail in such a
// build.
func ownerGuard(ownerKey string, rev int64, _ clientv3.LeaseID) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", rev)}
}

// counterGuard, under build tag firn_weakfence_lease, compares the mod
// revision alone: after a restore that reuses revisions, a counter written
// since can carry the revision of one read before, and
// TestFenceLeaseCounterRestore fails.
func counterGuard(key string, prev coordinator.CounterRecord) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", prev.Version)}
}
