// Package zookeeper is the ZooKeeper backend of package coordinator: it
// hands out worker-ID leases as ephemeral owner nodes and stores each
// slot's reservation in a persistent node, with fences made of exact node
// versions (github.com/go-zookeeper/zk).
//
// Layout, under Config.Prefix (which plays the part of a chroot) and the
// cluster name, per generator:
//
//	<prefix>/<cluster>/<generator>/pin             layout, fixed datacenter, incarnation, schema (JSON)
//	<prefix>/<cluster>/<generator>/cursor          next cursor position (decimal, never lowered)
//	<prefix>/<cluster>/<generator>/owner/<dc>-<w>  ephemeral: holder and heartbeat (JSON)
//	<prefix>/<cluster>/<generator>/reserved/<dc>-<w>  persistent: R (decimal), never deleted
//	<prefix>/<cluster>/<generator>/floor           persistent: generator floor set by Bump (decimal, -1: none), never lowered
//	<prefix>/<cluster>/<generator>/restored        persistent: restore marker (JSON evidence) written by MarkRestored, deleted by Bump
//	<prefix>/<cluster>/<generator>/restored-gen    persistent, empty: the marker's generation, created or set by every write of the marker, never deleted
//	<prefix>/<cluster>/<generator>/definition      persistent: the generator's definition (JSON, firn generator create), never deleted
//
// Every node firn creates carries the ACL of Config.Auth's digest identity
// (all permissions to it alone), or world:anyone when no credentials are
// configured.
//
// The fences (docs/design.md, Fences):
//
//   - Acquisition is one multi: check(pin, version read), check(floor,
//     version read; a bump between the read and the multi fails it),
//     create(restored) and delete(restored, 0) (they fail while a restore
//     marker exists, so a marker written after the scan still refuses the
//     acquisition), create the ephemeral owner node, setData(reserved, bytes read, version read), and
//     setData(cursor, raised, version read). If anyone wrote the
//     reservation between the read and the multi, the multi fails and the
//     taker reads again; a lost race on the owner node moves on to the next
//     slot; a moved cursor is re-read and the multi sent again. Taking back
//     one's own stale slot (same instance ID, heartbeat older than
//     coordinator.TakeBackAge on the taker's clock, another session) is the
//     same multi with a delete of the old owner node at its version, and
//     leaves the cursor alone.
//   - Every Reserve is multi(setData(reserved, v, rv), setData(owner,
//     heartbeat, ov)) with the versions this holder last wrote; Release is
//     multi(setData(reserved, lowered, rv), delete(owner, ov)). No write to
//     a reservation node uses version -1. A holder whose slot was freed and
//     taken by another fails on rv, which the new acquisition advanced; a
//     bare check of the owner node would not do, since a re-created node
//     starts again at version 0 (build tag firn_weakfence swaps in exactly
//     that weaker fence, so that the fence tests can show they catch it).
//   - After a failed or unanswered write the holder re-reads the
//     reservation, then the owner node, and keeps the lease only while the
//     owner node is still the one it created (same creation zxid, same
//     session). It then knows whether its write was applied (the
//     reservation holds what was sent), not applied (untouched), or
//     overtaken by a write behind its back (adopted; a value below one
//     acknowledged is a coordinator.RolledBackError). When the write or
//     the re-read failed because the client had lost its connection or
//     had none, the next request waits for the client's next handshake
//     (within the caller's deadline): with one server the client takes a
//     second or more to reconnect and fails its queue each time it
//     starts, so requests sent meanwhile would spend the write's four
//     rounds without reaching a server.
//
// Stored numbers (reservations, the cursor, the floor) are read in the
// canonical encoding only (what strconv.FormatInt writes); anything else is
// an error naming the path, and a holder never adopts the version of a
// node holding such a value, so none of its writes goes over it. A restore
// marker refuses every acquisition of its generator while it stands, a
// node with an empty data dir included; Bump refuses a By below its gap and
// a floor past BumpSpec.MaxTime before writing anything, and deletes the
// marker last, the one it read and no other. A marker's version does not
// identify it: one deleted and created anew starts again at version 0. So
// every multi that creates, replaces or deletes the marker also sets the
// restored-gen node at the version read before the marker (creates it,
// when it was read absent): a bump's
// delete, BumpCounter's and a MarkRestored's replacement land only on the
// exact marker read. (A marker written by hand, or by an older firn,
// leaves restored-gen alone; a delete by this one still moves it.)
//
// A take-back deletes the stale owner node at the version its scan read
// only after finding, read after the reservation, that the node still has
// the scan's creation zxid: a node created anew by another holder may have
// reached that version, and its take rewrote the reservation, which the
// multi checks. Workers and an exhaustion's list of holders refuse a
// reservation not in the canonical encoding, naming the node.
//
// A session expiry is a lease loss: the owner nodes are gone, the client
// library opens a new session by itself, and firn never re-creates the old
// owner node — every lease of the old session ends and the node acquires
// again through the fence. A connection loss shorter than the session
// timeout keeps the session and every lease.
//
// A server restored from an older copy of its data directory has a last
// zxid below the one the client has seen, and refuses that client's every
// reconnect for good: it accepts the TCP connection and closes it without
// answering the connect request (its log says "Refusing session request
// for client ... as it has seen zxid ..."); the client library retries
// once a second forever. The dialer wrapper counts such rounds (a
// connection the server ended before answering; a read deadline — a slow
// or frozen server — does not count, nor does a failed dial). When they
// have gone on, with no answer from any server in between, for at least
// the negotiated session timeout, the coordinator gives its client up:
// every lease of the session ends as on an expiry (Done closes, Reserve
// and Release return coordinator.ErrLeaseLost), the old client is closed,
// and a new client with a fresh state (no session, no zxid seen) connects
// and authenticates. Until it has, the old, closed client stays current
// and every call fails as coordinator.ErrUnavailable; Peers' watches are
// set again on the new client. The old session is gone for firn either
// way: its holders could not extend their reservations for a session
// timeout, so giving it up is never less safe than waiting (if the servers
// still keep it — an ensemble without quorum for that long — its owner
// nodes linger until it expires there, and a take-back or another slot
// serves meanwhile). The next acquisitions of each generator try the slots
// of the given-up session first (leaving the cursor alone), so that the
// reservation the restored data shows for them is compared with what the
// node acknowledged, and a restore marker written.
//
// Meanwhile, and whenever the client has no session, ReadCounter and
// MarkRestored go through a probe: a short-lived client with a fresh state,
// which the restored server takes, synced before it reads (a follower
// behind the leader must not show an older counter, which the node would
// take for a restore). A node that saw the writes a restore lost thus
// finds a segment counter rolled back within a read period of the
// server's return, not a session timeout later, while a fresh node's
// claims are still settling. A probe's answers do not count for the
// session (Lease.Assured).
//
// Hazards: the client library has no per-request deadline. A call given up
// on (Config.Timing.Timeout) stays queued and may still be applied later;
// every write is version-fenced, so at most one of several writes from one
// base version lands, and the next write's re-read learns which. The
// library's handshake waits up to ten receive timeouts on a frozen server;
// the dialer wrapper here bounds it to a third of the session timeout (at
// least 1 s) so that failover to a live server happens in time. A lease's
// Done channel closes on the expiry handshake, which may come long after
// the server let the session go: safety never waits on it. Peers reports a
// heartbeat only once its write has been seen through a watch, so a beat's
// Received time is within one round trip of the write.
package zookeeper
