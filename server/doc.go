// Package server owns one firn node: a Node is the listeners around a
// Core, and a Core is the node's generators with everything that keeps
// each one serving or says why it does not.
//
//   - Node (node.go): the gRPC listener (grpc.go: the IDService, health,
//     reflection), the HTTP listener (httpapi.go: /v1/ids,
//     /v1/decode/{id}, /metrics, /healthz, /readyz, POST /admin/resume;
//     statuspage.go: the status page), the fault listener (fault.go), the
//     health service, the metrics registry (metrics.go), the lifecycle
//     (Start, Shutdown) and the wiring of serving states to health and
//     metrics. It does wiring only.
//   - Core (core.go): per generator a genRuntime (runtime.go: its serving
//     state, its ring buffer, the current holding, the issue path) and a
//     holder per worker it holds (holder.go: one lease's lifecycle — acquire, wait
//     until the clock reaches the floor, first reservation, serve while the
//     coordinator.Reserver keeps the reservation one window ahead, release,
//     acquire again; members.go: a generator of several workers, which
//     serves while any of them does, from a generator.Wide over them, and
//     --workers auto), the clock policy (the subpackage clockpolicy: the
//     forward-step gate, rollback recovery, NTP verdicts, the peer median) fed by the
//     step detector, the NTP checker and the peers' heartbeats, and the
//     data-dir journal with its deadline (journal.go). NewCore runs one
//     without listeners, for embedding and for simulation. What a request
//     is let in with and in which order — the queue bound, turns by flow,
//     --client-rate — is the subpackage admission's.
//   - Config (config.go): what a node consumes, validated by Finish, whose
//     refusals name the `firn serve` flag. Flags, environment, the --config
//     file, TLS files and the choice of coordinator are cmd/firn's: a node
//     is given its coordinator, data-dir state, clock and name already
//     opened.
//   - errors.go maps what a generator refuses with to gRPC codes and HTTP
//     statuses, naming the cause; grpcopt holds the gRPC server options
//     the node and the no-op floor of `firn bench` share.
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
//   - Shutdown drains first (every generator refuses with "shutting
//     down", health watches end), then stops the holders, which release;
//     Core.Crash releases and writes nothing, as a killed process would.
//   - The fault listener refuses any request with an Origin header
//     (Interfaces), so a web page cannot move a node's clock; it is off
//     unless fault injection is on.
//   - The coordinator given to New must have been built with the same
//     coordinator.Timing as Config.Timing: the holders size their window,
//     writes and deadlines from it.
package server
