// Package zktest starts real ZooKeeper servers for tests: a standalone
// server or an ensemble of several, each a java process running Debian's
// zookeeper package (/usr/share/java/zookeeper.jar), on free loopback ports,
// with its data and log in the test's temporary directory.
//
// It also carries the fault tools the coordination and chaos tests share:
// Freeze/Thaw (SIGSTOP/SIGCONT) and Kill/Start of one server, a TCP Proxy
// that can sever connections or drop one request or one reply, a Recorder
// dialer that learns a client's session credentials from the handshake, and
// ExpireSession, which ends a session from outside as the server's own
// expiry would. Backend implements the shared coordinator harness
// (coordtest) on servers a test started.
//
// Invariants: every process a test starts is killed by its PID at the
// test's cleanup, also when the test fails (a frozen process is killed as
// well; SIGKILL reaches a stopped process), and dies with the test binary
// if that exits without its cleanups (Pdeathsig). When a test fails, the
// tail of each server's log is written to the test log.
//
// Hazards: free ports are found by listening on port 0 and closing the
// listener, so another process can take one in between; Start retries with
// new ports when a server reports its address in use. Three JVMs starting
// at once on a small machine take several seconds: readiness waits are
// generous (ReadyTimeout). A frozen JVM still completes TCP handshakes (the
// kernel accepts), so "connected" never means "alive".
package zktest
