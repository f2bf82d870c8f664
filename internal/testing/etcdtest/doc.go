// Package etcdtest starts real etcd servers for tests and chaos runs: an
// in-process single member (server/v3/embed), a cluster of Debian's etcd
// binary on loopback, and an etcd with TLS and authentication (certificates
// made on the fly with crypto/x509). It also implements the coordtest
// Backend over any of them, and saves and restores a member's snapshot
// with Debian's etcdctl (RestoreSnapshot: a lost member restored into a
// fresh data directory, as an operator would).
//
// Every starter registers cleanup that stops what it started, by PID, even
// when the test fails. Ports are probed free on 127.0.0.1.
//
// Hazards: a member frozen with Freeze must be thawed (cleanup does it)
// before it can be stopped; etcd 3.4 members take seconds to exit once their
// peers are gone, so Stop waits on the PID with a bound and then kills.
package etcdtest
