// Package load is `firn bench`, the load tool, as a library: Main drives a
// firn node's gRPC API, or the no-op floor server, and reports what it
// measured. The binary wires Main as `firn bench` and NoopMain as the
// hidden subcommand NoopCommand ("__bench-noop").
//
// # What it measures
//
// K callers (--callers) share C connections (--conns) for a measured
// window (--duration) after an unmeasured warmup, in one of six modes:
// unary (NextID), batch (NextIDs with --batch N), prefetch (the Go
// client's Next, C clients), ranges (NextRange with --batch N), or the
// sequence modes seq and seqs (below). It
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
// # The sequence modes
//
// --mode seq calls NextSeq of a sequence generator (Info's kind "seq")
// with count --batch (default 1, at most seq.MaxCount); --mode seqs calls
// NextSeqs with --batch keys (default 100, at most seq.MaxItems) of count
// 1 each, and its IDs/s are values/s (keys × calls) beside RPC/s. Keys are
// "k0" … "k<N-1>" (--keys N, default 100,000), drawn per caller from a
// generator seeded by --seed and the caller's index, so runs repeat: with
// --key-dist uniform alike, with zipf as math/rand's Zipf with s = 1.1,
// v = 1 (P(k) ∝ (1+k)^-1.1: k0 hottest, about 13 % of the draws at
// 100,000 keys, the ten hottest about 36 %). A NextSeqs batch may draw one
// key more than once.
//
// Routing: the run reads the section map of --target's Info (sections,
// section_owners) and sends each key to the owner of its section
// (seq.Hash(key) mod sections, seq.Definition.Section), over --conns
// connections per owner; --target is any one node, the others are learned
// from the map (an owner advertising an unspecified host, 0.0.0.0:P or
// :P, is dialled at the target's host). A WRONG_NODE refusal (a
// FAILED_PRECONDITION whose ErrorInfo names the owner; in NextSeqs an
// item's reason and owner) moves the section to the owner named — dialled
// on first use — and the call, or the refused items, go there at once, at
// most maxSeqHops times; the report counts these refusals, which in
// steady state are 0. A SECTION_MOVING refusal fails the call (its
// RetryInfo waited out, as for any refusal) and is counted apart. In seq
// mode a call is one key's NextSeq, its latency from its first attempt
// to its answer, and RPCs count the followed refusals too; in seqs mode a
// caller's batch is split by owner into one NextSeqs each (items per RPC
// reported), and a call is one such RPC.
//
// The checker: every response of the measured window (a NextSeq, a
// NextSeqs item) is kept — key index, values, the start and end of the
// attempt that answered on the run's monotonic clock, the owner — in one
// record preallocated before the run, 32 bytes a response, --seq-record
// of them (default 4 Mi: 128 MiB), shared by the callers in equal parts
// as the IDs of --record are. After the window the record is sorted by key
// and each key's calls go through seqcheck.Check (no value twice for a
// key; a call that returned before another began got smaller values),
// one key at a time, so the check needs beyond the record only its
// busiest key's calls, about 200 bytes each. Any violation makes Main exit
// with code 3 (as a duplicate ID does), naming the first of them; at most
// maxViolations are collected. A response whose count is not the one
// asked is malformed (exit 1).
//
// --compare noop in a sequence mode starts the no-op server as a
// sequence generator of the node's sections (Info) whose Info owns every
// section at its own address, so the same routing reaches it. It answers
// from one counter, one atomic add per call whatever the keys (no
// per-key map, no lock, no hashing): every value once across all keys and
// increasing in real time, so it passes the checker, and it costs the
// gRPC path and the messages alone. With --node-metrics each node window
// also reports firn_seq_writes_total over the window per second (the
// writes of the sections' persisted maxima to the coordinator) and
// firn_seq_keys at its close.
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
//     --seq-record bounds the sequence checker the same way: each caller
//     keeps the first responses of its window that fit its part, and the
//     report says how many of how many were checked.
//   - --pin pins this process's threads and the node's, and restores both
//     when Main returns (threads the node starts during the run inherit
//     the pin and keep it).
package load
