//go:build firn_weakfence

package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/coordinator"
)

// Build tag firn_weakfence replaces the fence with a weaker one, for the
// fence tests only: writes compare only the etcd lease, and a take-back
// Puts over the old owner key, keeping its create revision. Each TestFence
// test but the TestFenceLease ones must fail in such a build.
func ownerGuard(ownerKey string, _ int64, lease clientv3.LeaseID) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(ownerKey), "=", lease)}
}

// replaceStale, weakened: the take-back Puts over the old record, keeping
// its create revision and its etcd lease, so the old holder's weak guard
// still passes (what the strong take-back, takeback.go, exists to
// prevent).
func (c *Coordinator) replaceStale(_ context.Context, _ coordinator.Spec, ownerKey string, _ coordinator.Slot,
	o *ownerState, _ *session) (clientv3.Cmp, clientv3.OpOption, clientv3.LeaseID, int64, error) {
	return clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", o.createRev), clientv3.WithIgnoreLease(), o.lease, o.createRev, nil
}

// counterGuard, under build tag firn_weakfence, compares nothing: a
// counter write lands whatever came between its read and it, and
// TestFenceCounter fails.
func counterGuard(string, coordinator.CounterRecord) []clientv3.Cmp { return nil }
