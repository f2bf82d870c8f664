// Package client is firn's Go client: it hides the network behind a local
// prefetch buffer and fails over across a node list.
//
//	c, err := client.New([]string{"10.0.0.1:7300", "10.0.0.2:7300"})
//	...
//	defer c.Close()
//	id, err := c.Next(ctx)
//	runs, err := c.NextRange(ctx, 100_000) // many IDs as runs of consecutive IDs
//
//	chats, err := client.New([]string{"10.0.0.1:7300"}, client.WithGenerator("chats")) // a sequence generator
//	first, err := chats.NextSeq(ctx, []byte("chat:42"), 1) // the key's next value
//
// It imports only firn's proto package, gRPC and the standard library, and
// declares the one interface it needs, a Clock (the method set of
// clockguard's clocks).
//
// # What it owns
//
// A buffer of runs of consecutive IDs, fetched with NextRange (NextIDs
// from a node without it), one refill goroutine that keeps it filled, a
// grpc.health.v1 watch per endpoint, and the choice of endpoint.
//
// # Invariants
//
//   - No ID reaches two callers. A batch is one run, its first ID and its
//     length, and a claim counter: every take is one atomic add, and an
//     index below the run's length belongs to its taker alone, who gets
//     the ID first+index. A batch is retired by pushing its counter past
//     the end, never by lowering it. A run costs the same whatever its
//     length: the buffer never expands runs into IDs, and NextN expands
//     only the IDs it returns.
//   - Freshness: no ID is handed out later than MaxAge after the start of
//     the RPC that fetched it. Each run carries the monotonic reading at
//     which it expires (the reading taken just before its RPC was sent,
//     plus MaxAge), and every take — Next, NextN, NextRange — reads the
//     monotonic clock and compares: no goroutine has to run first, so the
//     bound holds also when the process resumes from a freeze (SIGSTOP, a
//     paused VM). A NextN or NextRange that waits — for a refill, or for
//     a direct fetch of the rest — checks again, as it returns, what it
//     took from the buffer, and takes again in place of what expired
//     meanwhile (counted dropped). IDs fetched directly for a call are
//     handed out as it returns, however long its fetches took. A node
//     serves IDs at most its --max-staleness old, so a buffered ID's own
//     time is at most MaxAge + max-staleness (+ the node's clock error)
//     behind the moment a caller gets it.
//   - Next takes no lock and allocates nothing while the buffer holds
//     fresh IDs (one atomic load, one monotonic clock read, one atomic
//     add); only an empty or stale buffer sends it to the slow path,
//     which waits for a refill.
//   - Demand sizes the batches: the refiller measures the rate at which
//     callers take IDs, asks for rate × BatchWindow IDs per refill (at least
//     doubling while callers wait), keeps two refills buffered or in flight
//     (one in flight at a time) while they would be used before they go
//     stale, and falls back to MinBatch when idle. An idle client with an empty buffer runs no timer.
//   - Failover: a fetch is a round of attempts, one per endpoint at most.
//     An attempt that fails with UNAVAILABLE, on the connection, with a
//     shed (OVERLOADED), or by running out of its time moves the request
//     to the next endpoint at once. An endpoint that answers NOT_FOUND (it does not run the
//     generator: a rollout adding one has not reached it) sends the
//     request on too, and is put behind the others for 30 s. A caller sees
//     an error only when every endpoint failed in one round
//     (ErrUnavailable wrapping the last error; NOT_FOUND when none runs
//     the generator), when an endpoint refused the request itself (a bad
//     count), or when its context ended.
//   - Close ends the direct calls in flight (NextN and NextRange beyond
//     the buffer, Info, Decode) and waits for them; each returns
//     ErrClosed, and marks no endpoint down. Every call during or after
//     Close returns ErrClosed.
//   - An attempt's time: a deadline fixed when it starts and sent with its
//     RPCs (on an endpoint's first use a health check (none once it
//     answered UNIMPLEMENTED, or while its health watch speaks) and Info,
//     then NextRange or NextIDs): CallTimeout, or, while another endpoint
//     follows in the round, half of the caller's remaining time if that
//     is sooner (but not under 10ms), so an endpoint that hangs leaves the
//     caller the other half to fail over; the round's last endpoint may
//     use all of it. Until an endpoint has answered once, the round's last
//     attempt at it gets 10s where CallTimeout is shorter: its connection,
//     TLS handshake and first calls are inside it, and a process starting
//     on a loaded machine can take seconds over them. The direct fetches of NextN and NextRange are the
//     caller's own attempts. Next's refills are shared: a refill's
//     deadline is the share of the most patient caller waiting for it
//     (CallTimeout if one waits without a deadline), and a caller that
//     starts waiting while the refill is in flight cuts it to that same
//     share, to fail over in time; a caller that gives up cuts nothing.
//     So one impatient caller never shortens or fails a refill that others
//     wait for, and nothing is cut at the round's last endpoint.
//   - What counts against an endpoint: UNAVAILABLE, a connection error, a
//     shed, and no answer by the deadline it was sent — the bound a firn
//     node promises, since it answers within a request's deadline or
//     refuses at once. A caller that gives up before that deadline (its
//     own deadline, or a cancellation), and a waiting caller's cut, say
//     nothing against the endpoint: the request fails over (or ends), and
//     the endpoint keeps its place. An endpoint that counts is put down for
//     a second: it is tried after the others, as are endpoints whose
//     health says NOT_SERVING or whose connection is in transient failure.
//     An endpoint whose health says SERVING but whose ID calls hang thus
//     misses the first deadline it is sent (a caller's share, or
//     CallTimeout) and later calls go to the others.
//   - Asked to wait: an endpoint whose refusal carries a RetryInfo (a
//     shed, or a node that knows when it serves again) is not asked at
//     all until that time has passed (at least 10ms, at most 5s), and then
//     by one round at a time until it answers. A round that finds every
//     endpoint asked to wait fails at once, asking none, with the refusal
//     of the one free first and a RetryInfo of the time left; the refill
//     waits as long; a caller waiting for IDs whose deadline ends before
//     then is refused so at once, whichever call met the refusal. However
//     many callers call meanwhile, a node that
//     sheds is asked about once per RetryInfo it gives. A shed also halves
//     the refill size; the count above which NextN and NextRange fetch
//     directly stays the one the demand asks for.
//   - Order: the runs of one endpoint are handed out in increasing order,
//     so each caller's successive IDs from Next increase while one
//     endpoint serves. Refills are fetched one at a time: two in flight
//     to one node would come back interleaved. Should a run still arrive
//     behind one from the same node already being handed out, and its
//     refill have been in flight with that one's, it is dropped; one
//     still queued is put back in order.
//
// # Ranges
//
// NextRange(ctx, n) returns n IDs as increasing runs of consecutive IDs:
// a few runs instead of n IDs, on the wire and in memory. Small counts
// come from the buffer, larger ones from the nodes directly, with the
// failover, deadline shares and errors of NextN. A node's runs end where
// its IDs jump (a new millisecond, another worker), so a count of 100,000
// takes a few dozen runs, not one.
//
// Refills and direct fetches ask NextRange, within the max_range the
// node's Info gives (an INVALID_ARGUMENT halves the client's idea of it).
// A node of an older version answers NextRange UNIMPLEMENTED: the client
// then asks that endpoint NextIDs, within its max_batch and the largest
// batch of WithBatchBounds (8 bytes an ID on the wire), and tries
// NextRange again a minute later, so a node upgraded in place gets
// ranges. Other endpoints are not affected.
//
// # Sequences
//
// NextSeq, NextSeqs and CurrentSeq serve a sequence generator
// (--generator NAME=seq): per-key values, each key's own sequence. What
// is promised, and by whom:
//
//   - Per-key order is the nodes' promise, not the client's: for one key,
//     a call that returned before another began got smaller values,
//     whichever clients and nodes served them. The client adds routing and
//     retries only, and buffers nothing: every call is one request to a
//     node (a buffer would hand a later caller a value below one an
//     earlier caller of another client already got). A retry asks again
//     and returns only the answer of the request that succeeded; values a
//     request got whose answer was lost are never handed out (gaps, never
//     repeats).
//   - Routing: only the node owning a key's section answers for it (the
//     section is FNV-1a-64(key) mod sections). The client reads the section
//     map from Info on its first sequence call, again every 3 s while
//     sequence calls are made (nothing runs on a client that makes none),
//     and soon after any refusal, and sends each key to its owner's gRPC
//     address, so that while the map holds no call is refused WRONG_NODE
//     (Stats.SeqRedirects stays 0). An owner's address need not be among
//     the endpoints given to New: it is dialled on demand, with the same
//     dial options and TLS, and closed by Close (or once the map no longer
//     names it). A key whose section has no known owner goes to an
//     endpoint, which names the owner or says that the section moves.
//   - Retries: a WRONG_NODE refusal is followed at once to the owner it
//     names (at most 3 in a row; then as a move). A section between
//     owners (SECTION_MOVING, for about 0.5 to 6 s), an owner that does not
//     serve or answer (UNAVAILABLE, a connection error, no answer within
//     CallTimeout) or sheds (OVERLOADED) is asked again after the wait its
//     RetryInfo gives (at most 5 s; else 25 ms doubling to 1 s, jittered),
//     until the caller's deadline (10 s without one): a call whose next
//     wait would pass the deadline fails at once with ErrUnavailable
//     wrapping the last refusal, which Reason and RetryAfter read. Any
//     other refusal (INVALID_ARGUMENT: a bad key or count, a generator of
//     another kind; NOT_FOUND) returns at once.
//   - NextSeqs splits its items by owner and sends each owner one request
//     (1000 items at most each) at once; the results come back in the
//     items' order. Each item is retried alone as above; an item refused
//     otherwise carries its refusal in its SeqResult.Err and the others are
//     served.
//   - Bounds checked before any request: a key is 1 to MaxSeqKey bytes
//     (ErrInvalidKey), a count 1 to MaxSeqCount (ErrInvalidCount).
//
// # Hazards
//
//   - Order: across a failover IDs do not increase. NextN and NextRange
//     sort what one call returns, but their direct fetches take IDs newer
//     than those still buffered, so a Next after one may return a lower
//     ID. Uniqueness across endpoints is the nodes' promise (one
//     coordinator, cluster and generator), not the client's.
//   - Buffered IDs are lost, never reused, on Close and when they go stale:
//     a buffer sized to demand keeps that waste small.
//   - A RESOURCE_EXHAUSTED that is not a node shedding load (a message too
//     large) halves the endpoint's bound like an INVALID_ARGUMENT; a shed
//     (OVERLOADED) fails over and halves the refill size instead, leaving
//     the endpoint's bound alone.
//   - A node that is merely slow — a GC pause longer than the deadline it
//     was sent — counts against itself like one that hangs: the client
//     cannot tell them apart by the deadline.
//   - An RPC slower than MaxAge delivers IDs that are already stale: they
//     are dropped and the caller keeps waiting. MaxAge must exceed the
//     round trip by a margin.
//   - Next ignores ctx while the buffer holds IDs; ctx bounds only the wait
//     for a refill.
//   - The freshness check is a monotonic clock read on every take: about
//     28ns on a VM's kvm-clock, most of Next's cost (see
//     docs/performance.md).
//   - Sequence owners are dialled at the address they give, which is the
//     address their gRPC listener is bound to: a node bound to a wildcard
//     address ("0.0.0.0:7300") gives one no client can dial, and the
//     client then cannot route that node's keys (a WRONG_NODE naming it
//     is returned as the error). With TLS, an owner that is not one of
//     the endpoints is verified against the host of its address (an IP
//     address) unless WithTLS's config sets ServerName.
//   - Sequence calls ask only the key's owner: while a section moves, its
//     calls wait (within their deadlines) instead of failing over.
package client
