// Package clientnode tests the Go client (its own module, under client/)
// against what only this module has: real firn nodes built from cmd/firn,
// certificates from internal/devpki, and the client module's own
// dependency graph.
package clientnode
