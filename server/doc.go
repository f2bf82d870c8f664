// Package server owns a firn node's transports: a Node is the gRPC, HTTP
// and fault listeners around a core.Core (server/core: the node's
// generators with everything that keeps each one serving or says why it
// does not). It turns requests into calls of the core and the core's
// refusals into gRPC statuses and HTTP errors; it decides nothing about
// IDs.
//
//   - Node (node.go): the gRPC listener (grpc.go: the IDService, health,
//     reflection), the HTTP listener (httpapi.go: /v1/ids,
//     /v1/decode/{id}, /metrics, /healthz, /readyz, POST /admin/resume;
//     statuspage.go and history.go: the status page and its charts), the
//     fault listener (fault.go), the health service, the metrics registry
//     (metrics.go), the lifecycle (Start, Shutdown) and the wiring of
//     serving states to health and metrics. It does wiring only.
//   - errors.go maps what a generator refuses with to gRPC codes and HTTP
//     statuses, naming the cause; grpcopt holds the gRPC server options
//     the node and the no-op floor of `firn bench` share.
//
// Dependencies point one way: server → server/core → {server/admission,
// server/clockpolicy}.
//
// # Hazards
//
//   - Shutdown drains first (every generator refuses with "shutting
//     down", health watches end), then stops the core, whose holders
//     release.
//   - The fault listener refuses any request with an Origin header
//     (Interfaces), so a web page cannot move a node's clock; on
//     loopback it also refuses a Host that is not loopback (LocalOnly, as
//     the profiler does), so a page that rebinds its own name to
//     127.0.0.1 cannot read it either. It is off unless fault injection
//     is on.
package server
