// Package core owns the node core: a Core is the node's generators with
// everything that keeps each one serving or says why it does not, without
// listeners. server.Node wires gRPC, HTTP, health and metrics around one;
// the simulator (test/sim) runs several on a memory coordinator in
// virtual time.
//
//   - Core (core.go): the requests for IDs, one method per kind (NextID,
//     IDs, NextIDs, NextRange), the lifecycle (Start, Drain, Stop, Crash),
//     the step detector, NTP checker and peer loop that feed the clock
//     policy (server/clockpolicy: the forward-step gate, rollback
//     recovery, NTP verdicts, the peer median).
//   - Generator (runtime.go): one named generator — its serving state, its
//     ring buffer, the current holdings, the issue path — and a holder per
//     worker it holds (holder.go: one lease's lifecycle — acquire, wait
//     until the clock reaches the floor, first reservation, serve while
//     the coordinator.Reserver keeps the reservation one window ahead,
//     release, acquire again; members.go: a generator of several workers,
//     which serves while any of them does, from a generator.Wide over
//     them, and --workers auto); the data-dir journal with its deadline
//     (journal.go). What a request is let in with and in which order — the
//     queue bound, turns by flow, --client-rate — is server/admission's.
//     A segment generator (segment.go) is a Generator with none of that:
//     its issue path takes runs from a segment/source over the
//     coordinator's counter, outside the clock policy.
//   - Config (config.go): what a node consumes, validated by Finish, whose
//     refusals name the `firn serve` flag. Flags, environment, the --config
//     file, TLS files and the choice of coordinator are cmd/firn's: a node
//     is given its coordinator, data-dir state, clock and name already
//     opened.
//   - errors.go: the errors a request is refused with (NotServingError
//     with its cause, RequestError naming the field and the bound,
//     UnknownGeneratorError); the transports map them to codes.
//
// # Invariants
//
// The design is docs/design.md; the sections named here are its sections.
//
//   - Uniqueness (Why duplicates cannot happen): a holder builds a
//     generator for one lease, for life, with the lease's floor (raised by
//     the data-dir record of the same worker) and a reservation bound of −1
//     until the coordinator acknowledges the first reservation; the bound
//     is raised only from the Reserver's acknowledgement, after the data
//     dir recorded it. After any lease loss the next holding is a new
//     generator from a fresh acquisition.
//   - Restores (Restarts, shutdown, restores): a reservation or data-dir
//     record above what the coordinator shows makes the holder write the
//     generator's restore marker and release without lowering; graceful
//     release lowers the reservation to the highest time produced.
//   - A generator serves exactly while its serving state holds no reason
//     (Node states). The moment the state leaves serving the node holds
//     the generator (generator.Hold), so every call waiting inside it is
//     refused at once with the cause (Liveness rules: not serving means
//     refused at once).
//   - Ready means it serves (Liveness rules): the reservation-expiry timer
//     takes a generator out of service shortly before its reservation
//     runs out (twice the slowest recent write); a failed first
//     reservation and an unconfirmed forward step keep it out.
//   - Clock policy (Clock policy): backward steps beyond max-lead fail
//     closed until the clock catches up (or POST /admin/resume with manual
//     recovery); a forward step beyond --max-clock-offset holds every
//     generator and every reservation below the step until NTP begun after
//     it or the peer median (two readings) agrees, or the clock comes
//     back. The policy reads time only from its clock, so its unit tests
//     drive it with clockguard.Fake.
//   - The issue path (Ring buffer): IDs come from the ring first, the rest
//     are generated under the filler's lock, so no response from one node
//     is older than an earlier one.
//
// # Hazards
//
//   - The time is read from the injected clockguard.Clock only (with
//     fault injection, the node's Offset clock, moved by the fault
//     listener and never the machine's). The timers (the
//     reservation-expiry AfterFunc, sized from that clock's readings; the
//     holder's and the peer loop's backoffs) are the Go runtime's: real
//     time, or virtual time inside a testing/synctest bubble. A clock step
//     wakes every wait sized from the old reading.
//   - The data-dir fsync before each reservation has a deadline (2 × the
//     coordinator timeout): a stalled disk fails the write rather than
//     stalling the holder, and the reservation is then not sent.
//   - Stop drains first (every generator refuses with "shutting down"),
//     then stops the holders, which release; Crash releases and writes
//     nothing, as a killed process would.
//   - The coordinator given to New must have been built with the same
//     coordinator.Timing as Config.Timing: the holders size their window,
//     writes and deadlines from it.
package core
