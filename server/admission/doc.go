// Package admission owns what a node lets in and in what order: per
// generator, the queue bound of --max-queue and the caller's deadline
// checked at once (FairShare.Admit), the turns in which callers that the
// ring could not serve get the generator's output (deficit round-robin
// over flows, FairShare.Acquire), and --client-rate, a token bucket per
// client (ClientLimits). A flow is a client: its verified certificate's
// name under mTLS, else its gRPC connection or HTTP remote host
// (FlowKey). A refusal is an *OverloadedError naming the bound that shed
// it and when to retry; it never waits. See docs/design.md, Overload.
//
// It knows nothing of generators or transports beyond the caller's
// identity in a context: the node's core (package server) sizes it from
// the layout and calls it on every request that needs more than the ring
// holds.
package admission
