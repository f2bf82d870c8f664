// Package embedded is firn's default coordinator: etcd's own server
// (server/v3/embed, the same release as the client) run in-process as a
// single member in the node's data directory, on loopback, used through the
// ordinary etcd backend. A second local node can join it with --etcd and
// the client URL Start returns (and logs).
//
// It owns the data directory's identity record: at first start it records
// the instance ID (from datadir), the machine ID (/etc/machine-id,
// else the hostname) and the data directory's absolute path, plus the
// member's client and peer URLs (so they stay the same across restarts).
// Start refuses with reason "data dir copied or moved" when any of the
// three differs, unless Config.AcceptMoved is set (--accept-moved-data-dir),
// which records the new values.
//
// Invariant: one embedded coordinator is one node's private ID space. Two
// nodes on two copies of one data directory would issue the same IDs, which
// is what the identity check exists to stop; for the same reason `firn
// serve` refuses non-loopback serving addresses on the embedded
// coordinator unless explicitly allowed (--embedded-serve-remote; the
// loopback rule in cmd/firn), and the member itself listens on loopback
// only.
//
// Hazards: the member's state is in DataDir/embedded/etcd; deleting it
// recreates the pins (nodes then refuse with "coordinator state recreated"
// through datadir). Compaction runs hourly so the one write per
// second per generator does not grow the database without bound.
package embedded
