// Package memory is an in-process coordinator backend with the semantics
// of the real ones, and faults that tests inject into it: for conformance
// runs without servers, and for simulations that drive whole nodes through
// fault schedules in virtual time (testing/synctest).
//
// # What it owns
//
// A Store is one coordinator's state (one ID space: one cluster of one
// coordinator): per generator the pin (layout, fixed datacenter,
// incarnation, schema), the cursor, the owner records, the reservations,
// the generator floor and the restore marker; the live sessions; and a
// revision counter that every write advances. A Client (Store.Connect) is
// one connection to it, shaped like the etcd backend's Coordinator: it
// implements coordinator.Coordinator and coordinator.Admin, and all its
// leases share one session that it keeps alive.
//
// # Semantics, as the real backends have them
//
//   - Sessions are etcd leases: granted on a client's first Acquire (and
//     again after one is lost), renewed every TTL/5 by the client, ended by
//     the store once a TTL passes without a renewal, deleting every owner
//     record bound to it. A client gives its session up (its leases' Done
//     close) when a renewal finds the store no longer knows it, or at the
//     first failed renewal once a TTL has passed since the last
//     acknowledged one was sent: the store may have let it go a little
//     earlier, as with etcd, and safety never waits on Done (the fences
//     hold). A frozen or killed client loses its ownership after the TTL. Renewals, expiry and every injected delay are Go
//     timers, so inside a testing/synctest bubble they run in virtual time.
//   - Acquire is coordinator.Plan over the generator's state, decided and
//     taken in one step under the store's lock: the pin created when
//     absent and checked, the restore marker refusing, the name in use,
//     one's own stale record taken back first (heartbeat older than
//     coordinator.TakeBackAge on the client's clock), then the cursor walk,
//     slots reserved past Spec.MaxFloor (or under a generator floor past
//     it) skipped, exhaustion naming the live holders. The take reads the
//     reservation in the same step; the lease's Floor is at least it,
//     Spec.LocalFloor and the generator floor. Failures matching
//     coordinator.ErrUnavailable are retried with backoff until the
//     context ends, and owner records of this client's session that no
//     lease holds (a take whose reply was lost) are deleted by the next
//     acquisition, as the etcd backend does.
//   - Fences: an owner record carries its ownership token (the revision of
//     the take that created it) and its session. Every holder write
//     (Reserve with its heartbeat, Release) is applied only while the
//     record still carries both, as etcd's guard compares CreateRevision
//     and LeaseValue. A take-back deletes the stale record and creates a
//     new one; it never writes over it. Under build tag firn_weakfence the
//     guard compares the session alone and a take-back writes over the old
//     record; under firn_weakfence_lease it compares the token alone: the
//     TestFence tests fail in those builds.
//   - Reservations are never lowered except by Release (to max(highest,
//     Floor), and not below a bump made meanwhile) and by what happens
//     behind the holders' back (Store.SetReserved, Store.Restore). A
//     holder that finds its reservation below what it had acknowledged
//     raises it again and reports a *coordinator.RolledBackError.
//   - MarkRestored, Bump (atomic: refused before any write, then floor,
//     reservations and marker in one step), Generators, Workers and
//     ForceRelease behave as coordtest checks them for every backend.
//   - Peers behaves as the etcd backend's: the first call reads every live
//     holder's heartbeat (received at that moment on the client's clock),
//     then each heartbeat is delivered as it is written and received at
//     that moment; a client that cannot reach the store answers at once
//     from what it had and reads everything again afterwards.
//
// What differs from a real coordinator: there is no network, so an
// operation is either answered or suffers an injected fault; the scan and
// the take are one atomic step, so an acquisition never loses a race to
// another; any positive TTL is accepted; a Store has no cluster names (two
// stores are two ID spaces).
//
// # Injected faults
//
// Every fault is exported, safe for concurrent use, and deterministic: the
// outcome depends only on the calls made (lost replies are counted, never
// drawn at random; with Config.Incarnation even the pins repeat).
//
//	func (s *Store) Faults() *Faults           // every client's operations
//	func (c *Client) Faults() *Faults          // this client's (on top of the store's)
//	func (f *Faults) SetLatency(ops Op, d time.Duration)
//	func (f *Faults) SetAvailability(ops Op, a Availability) // Available, Hanging, Refusing
//	func (f *Faults) LoseReplies(ops Op, n int)              // acquisitions, reservations, releases
//	func (f *Faults) Pending(op Op) int
//	func (f *Faults) Clear()
//	func (c *Client) Expire() bool             // its session ends on the store now
//	func (s *Store) ExpireLease(l coordinator.Lease) bool // one lease's ownership ends now
//	func (c *Client) Freeze()                  // as SIGSTOP: no call returns, no renewal is sent
//	func (c *Client) Thaw()                    // as SIGCONT
//	func (c *Client) Kill()                    // a crash: no revoke, ownership lingers for the TTL
//	func (s *Store) Snapshot() *Snapshot       // a copy of the whole state
//	func (s *Store) Restore(snap *Snapshot)    // back to it, as a coordinator restore
//	func (s *Store) SetReserved(generator string, slot coordinator.Slot, r int64) // behind the holders' back
//
// and, for checks from outside the system under test, with no fault
// applied: Store.Holders, Store.Reserved, Store.Revision, Store.Sessions.
//
// Op selects kinds of operations (OpAcquire, OpReserve, OpRelease,
// OpRenew, OpMark, OpPeers, OpAdmin, OpCounter; OpWrites, OpAll). Latency delays an
// operation before it is applied; its context ending first fails it with
// coordinator.ErrUnavailable, unapplied. Hanging fails an operation after
// its context ends or Config.Timeout passes, Refusing at once, both with
// coordinator.ErrUnavailable and unapplied; renewals fail too, so leases
// run out after their TTL. A lost reply applies the write and answers
// coordinator.ErrUnavailable. Restore puts back reservations, floors,
// markers, pins, cursors, owner records and sessions as the snapshot has
// them (a session of the snapshot lives again, its TTL counted from the
// restore; one granted since is gone and its client learns so at its next
// renewal) and the revision counter, so acquisitions after the restore
// reuse ownership tokens handed out after the snapshot, as etcd reuses
// revisions after a restore without --bump-revision: the fence stands on
// the token and the session together. Each client reads heartbeats
// (Peers) and take-back ages from its own clock (Store.Connect).
//
// Hazards: create a Store and its clients inside the testing/synctest
// bubble that uses them, and close every client before the bubble ends
// (each runs one renewal goroutine). A frozen client's calls wait for Thaw
// (or Close) whatever their context says, as a stopped process's would. No
// lock is held across a wait: the waits are on channels and timers, which
// synctest counts as durably blocking.
package memory
