//go:build firn_weakfence

package zookeeper

import "github.com/go-zookeeper/zk"

// Build tag firn_weakfence replaces the fence with a weaker one, for the
// fence tests only: acquisition does not fence the reservation, a
// take-back reuses the old owner node, and a holder's writes carry only a
// bare check of the owner node's version, writing the reservation at any
// version. Each TestFence test must fail in such a build.

// takeBackReusesOwner: the weak take-back adopts the old owner node as it
// is (the old record, its version) instead of replacing it, so the old
// process's bare version check still passes.
const takeBackReusesOwner = true

func acquireReservedOp(string, []byte, int32) any { return nil }

func reserveOps(resPath string, res []byte, _ int32, ownerPath string, rec []byte, ov int32) ([]any, int, int) {
	return []any{
		&zk.CheckVersionRequest{Path: ownerPath, Version: ov},
		&zk.SetDataRequest{Path: resPath, Data: res, Version: -1},
		&zk.SetDataRequest{Path: ownerPath, Data: rec, Version: -1},
	}, 1, 2
}

func releaseOps(resPath string, res []byte, _ int32, ownerPath string, ov int32) ([]any, int) {
	return []any{
		&zk.CheckVersionRequest{Path: ownerPath, Version: ov},
		&zk.SetDataRequest{Path: resPath, Data: res, Version: -1},
		&zk.DeleteRequest{Path: ownerPath, Version: -1},
	}, 1
}

// counterOp, under build tag firn_weakfence, writes the counter at any
// version: whatever came between its read and it, and TestFenceCounter
// fails.
func counterOp(path string, data []byte, _ int32) any {
	return &zk.SetDataRequest{Path: path, Data: data, Version: -1}
}
