// Package load is `firn bench`, the load tool, as a library: Main drives a
// firn node's gRPC API, or the no-op floor server, and reports what it
// measured. The binary wires Main as `firn bench` and NoopMain as the
// hidden subcommand NoopCommand ("__bench-noop").
//
// # What it measures
//
// K callers (--callers) share C connections (--conns) for a measured
// window (--duration) after an unmeasured warmup, in one of three modes:
// unary (NextID), batch (NextIDs with --batch N) or prefetch (the Go
// client's Next, C clients). It prints a progress line to stderr once a
// second, and at the end RPC/s, IDs/s, call latency p50/p90/p99/p99.9,
// errors by gRPC code, and the duplicate IDs received: every ID of the
// measured window (up to --record) is appended to one preallocated slice,
// sorted and checked after the window. A duplicate makes Main exit with
// code 3.
//
// --target noop runs the no-op floor: this same binary re-executed
// (os.Args[0]) as a child process, serving the same IDService with
// server/grpcopt's options (the node's) and a counter behind it: the gRPC
// floor of the machine. --compare noop runs the node and the no-op server
// in at least 5 interleaved pairs and reports the median of the node/noop
// ratios. --pin puts the servers on the last CPU and the load on the others
// (sched_setaffinity on every thread). --idle D reads a process's CPU time
// (from /proc/<pid>/stat) and RSS over D without calls; the node's PID comes
// from --pid or from the process listening on the target's port. With TLS
// flags the node is dialled with TLS or mTLS, and the no-op server gets an
// ephemeral certificate chain of the same kind (--noop-tls).
//
// # Invariants
//
//   - Counters and latency samples come from the measured window only; the
//     IDs checked for duplicates are those of the window.
//   - The callers' hot loops allocate nothing of their own: IDs go into the
//     caller's part of the preallocated slice, latencies into a
//     fixed-size log-linear histogram (buckets under 1.6% wide). In prefetch
//     mode one call in 64 is timed, since a clock read costs as much as a
//     Next.
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
//     were checked.
//   - --pin pins this process's threads and restores them when Main
//     returns; the pinned node stays pinned.
package load
