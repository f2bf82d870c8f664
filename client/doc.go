// Package client is firn's Go client: it hides the network behind a local
// prefetch buffer and fails over across a node list.
//
//	c, err := client.New([]string{"10.0.0.1:7300", "10.0.0.2:7300"})
//	...
//	defer c.Close()
//	id, err := c.Next(ctx)
//
// It imports only firn's proto package, gRPC and the standard library, and
// declares the one interface it needs, a Clock (the method set of
// clockguard's clocks).
//
// # What it owns
//
// A buffer of fetched NextIDs batches, one refill goroutine that keeps it
// filled, a grpc.health.v1 watch per endpoint, and the choice of endpoint.
//
// # Invariants
//
//   - No ID reaches two callers. A batch is a slice and a claim counter:
//     every take is one atomic add, and an index below the batch's length
//     belongs to its taker alone. A batch is retired by pushing its
//     counter past the end, never by lowering it.
//   - Freshness: no ID is handed out later than MaxAge (plus one tick) after
//     the start of the RPC that fetched it. Each batch carries the tick at
//     which it expires; Next compares it with a coarse tick that the refill
//     goroutine advances from the clock (MaxAge/8 apart) while the buffer
//     holds IDs. Next reads no clock.
//   - Next takes no lock and allocates nothing while the buffer holds
//     fresh IDs (two atomic loads and one atomic add); only an empty or
//     stale buffer sends it to the slow path, which waits for a refill.
//   - Demand sizes the batches: the refiller measures the rate at which
//     callers take IDs, asks for rate × BatchWindow IDs per batch (at least
//     doubling while callers wait), keeps two batches buffered or in flight
//     while they would be used before they go stale, and falls back to
//     MinBatch when idle. An idle client with an empty buffer runs no timer.
//   - Failover: an RPC that fails with UNAVAILABLE, on the connection, or
//     by running out of its CallTimeout moves the request to the next
//     endpoint at once. Endpoints whose health says NOT_SERVING, whose
//     connection is in transient failure, or that failed in the last
//     second are tried after the others. A caller sees an error only when
//     every endpoint failed in one round (ErrUnavailable wrapping the last
//     error), or when an endpoint refused the request itself (NOT_FOUND).
//
// # Hazards
//
//   - Order: IDs from one endpoint increase; across a failover they do not.
//     Uniqueness across endpoints is the nodes' promise (one coordinator,
//     cluster and generator), not the client's.
//   - Buffered IDs are lost, never reused, on Close and when they go stale:
//     a buffer sized to demand keeps that waste small.
//   - An RPC slower than MaxAge delivers IDs that are already stale: they
//     are dropped and the caller keeps waiting. MaxAge must exceed the
//     round trip by a margin.
//   - Next ignores ctx while the buffer holds IDs; ctx bounds only the wait
//     for a refill.
package client
