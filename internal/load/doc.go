// Package load is `firn bench`, the load tool, as a library: Main drives a
// firn node's gRPC API, or the no-op floor server, and reports what it
// measured. The binary wires Main as `firn bench` and NoopMain as the
// hidden subcommand NoopCommand ("__bench-noop").
//
// # What it measures
//
// K callers (--callers) share C connections (--conns) for a measured
// window (--duration) after an unmeasured warmup, in one of four modes:
// unary (NextID), batch (NextIDs with --batch N), prefetch (the Go
// client's Next, C clients) or ranges (NextRange with --batch N). It
// prints a progress line to stderr once a second, and at the end RPC/s,
// IDs/s, call latency p50/p90/p99/p99.9, errors by gRPC code, and the
// duplicate IDs received: every ID of the measured window (up to --record)
// is appended to one preallocated slice, sorted and checked after the
// window. A duplicate makes Main exit with code 3.
//
// Ranges mode checks every ID instead, as runs: each caller adds its
// responses' runs to an interval set of its own (internal/intervals,
// memory per gap between runs, not per ID), counting the IDs it held
// already, and the union of the callers' sets counts those between
// callers. It checks each response against NextRange's contract (runs
// non-empty, increasing, adding up to the count asked; a breach makes Main
// exit with code 1), and reports IDs/s over the generator's capacity: the
// workers it holds (Info's workers, at least 1; the more of the readings
// before and after the window) times its layout's rate. --batch must not
// exceed the generator's max_range (Info), checked before each run.
//
// --target noop runs the no-op floor: this same binary re-executed
// (os.Args[0]) as a child process, serving the same IDService with
// server/grpcopt's options (the node's) and a counter behind it: the gRPC
// floor of the machine. --compare noop runs the node and the no-op server
// in at least 5 interleaved pairs and reports the median of the node/noop
// ratios. In ranges mode the no-op server is started with the node's
// layout, worker IDs and max_range (from its Info), so its Info gives the
// same capacity and its NextRange cuts the counter into the runs the node
// would return: one per worker's per-unit block, joined where the workers'
// IDs meet; for a segment generator (Info's kind) one run per call, as a
// segment generator's take is, and no capacity (no layout bounds a
// counter). With --generator the no-op server serves that name, so the
// same calls go to both. --pin puts the servers on the last CPU and the load on the others
// (sched_setaffinity on every thread). --idle D reads a process's CPU time
// (from /proc/<pid>/stat) and RSS over D without calls; the node's PID comes
// from --pid or from the process listening on the target's port. With TLS
// flags the node is dialled with TLS or mTLS, and the no-op server gets an
// ephemeral certificate chain of the same kind (--noop-tls).
//
// Beside its rates each run reports the serving process's CPU over the
// window (from /proc/<pid>/stat, in 10 ms ticks), as a share of a core
// and per call, where the PID is known: always for the no-op child, for
// the node from --pid or its loopback port; --compare adds the median
// node/noop ratio of CPU per call. With --node-metrics (the node's
// /metrics URL) each node window also reports a segment generator's
// counter writes: firn_segment_claims_total and the IDs claimed over the
// window, per second, and the step at its close.
//
// # Invariants
//
//   - Counters and latency samples come from the measured window only; the
//     IDs checked for duplicates are those of the window.
//   - The callers' hot loops allocate nothing of their own: IDs go into the
//     caller's part of the preallocated slice, latencies into a
//     fixed-size log-linear histogram (buckets under 1.6% wide). In prefetch
//     mode one call in 64 is timed, since a clock read costs as much as a
//     Next. In ranges mode a caller's interval set is preallocated and
//     grows (amortised) only past one interval per response that does not
//     continue its previous one.
//   - The no-op child never outlives the run: it exits when its stdin (a
//     pipe from the parent) closes, and Main stops it (SIGTERM, then SIGKILL)
//     before returning. It listens on loopback only.
//
// # Hazards
//
//   - On a shared 2-core machine the figures move with everything else that
//     runs; compare interleaved pairs (--compare), never runs made at
//     different times.
//   - --record bounds the duplicate check: at millions of IDs per second a
//     10 s run receives more IDs than are kept; the report says how many
//     were checked. (Not in ranges mode, whose memory is 16 bytes per
//     interval: about one per RPC when many callers interleave.)
//   - --pin pins this process's threads and the node's, and restores both
//     when Main returns (threads the node starts during the run inherit
//     the pin and keep it).
package load
