//go:build !firn_weakfence

package zookeeper

import "github.com/go-zookeeper/zk"

// takeBackReusesOwner is false: a take-back deletes the old owner node (at
// its version) and creates a new one in the taker's session, so the old
// process's next write fails on the versions it holds.
const takeBackReusesOwner = false

// acquireReservedOp is the acquiring multi's fence on the reservation: it
// rewrites the exact bytes read in the scan at the exact version read. If
// anyone wrote the reservation in between, the multi fails and the taker
// reads again; once it succeeds, every stale writer's version is stale.
func acquireReservedOp(path string, data []byte, version int32) any {
	return &zk.SetDataRequest{Path: path, Data: data, Version: version}
}

// reserveOps is every Reserve: the reservation and the owner record (the
// heartbeat), each at the version this holder last wrote. A holder whose
// slot was taken over fails on the reservation's version, which the new
// holder's acquisition advanced; a bare check of the owner node would not
// do, since a re-created node starts again at version 0. It returns the
// ops and the indexes of the reservation and owner writes.
func reserveOps(resPath string, res []byte, rv int32, ownerPath string, rec []byte, ov int32) ([]any, int, int) {
	return []any{
		&zk.SetDataRequest{Path: resPath, Data: res, Version: rv},
		&zk.SetDataRequest{Path: ownerPath, Data: rec, Version: ov},
	}, 0, 1
}

// releaseOps lowers the reservation and deletes the owner node in one
// multi, fenced like reserveOps. It returns the ops and the index of the
// reservation write.
func releaseOps(resPath string, res []byte, rv int32, ownerPath string, ov int32) ([]any, int) {
	return []any{
		&zk.SetDataRequest{Path: resPath, Data: res, Version: rv},
		&zk.DeleteRequest{Path: ownerPath, Version: ov},
	}, 0
}

// counterOp is the fenced write of a segment generator's counter: a
// SetData at the version the writer read. (ZooKeeper compares no values:
// a restore that puts the version back lets a write read before it land
// on a counter written since, which only the nodes' own memory of the
// counter's seq can notice; docs/design.md, Segment generators.)
func counterOp(path string, data []byte, version int32) any {
	return &zk.SetDataRequest{Path: path, Data: data, Version: version}
}
