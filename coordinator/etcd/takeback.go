//go:build !firn_weakfence

package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/coordinator"
)

// replaceStale prepares the take-back of this node's own stale owner
// record o of slot: it deletes the record, guarded by its create revision,
// so that the old holder's fence (ownerGuard) fails from then on; the take
// txn then creates a new record as for a free slot. It returns what the
// take carries: the compare on the owner key, the option and lease the new
// record is put with and guarded by, and the revision the holder is known
// by (0: the take txn's own).
func (c *Coordinator) replaceStale(ctx context.Context, spec coordinator.Spec, ownerKey string, slot coordinator.Slot,
	o *ownerState, sess *session) (clientv3.Cmp, clientv3.OpOption, clientv3.LeaseID, int64, error) {
	cctx, cancel := c.call(ctx)
	resp, err := c.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", o.createRev)).
		Then(clientv3.OpDelete(ownerKey)).
		Commit()
	cancel()
	if err != nil {
		return clientv3.Cmp{}, nil, 0, 0, unavailable("take back", err)
	}
	if !resp.Succeeded {
		return clientv3.Cmp{}, nil, 0, 0, errLostRace
	}
	c.log.Info("took back own stale worker", "generator", spec.Generator, "slot", slot.String(), "old_revision", o.createRev)
	return clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", 0), clientv3.WithLease(sess.id), sess.id, 0, nil
}
