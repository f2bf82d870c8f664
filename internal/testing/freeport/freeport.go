// Package freeport hands out loopback TCP ports for the servers tests
// start: etcd members, ZooKeeper servers, firn nodes.
//
// The ports lie below the kernel's ephemeral range. A port from that range
// (what listening on port 0 gives) is also what the kernel picks as the
// local port of an outgoing connection: a server a test kills and starts
// again on the same port can find it taken by some client's connection in
// between ("bind: address already in use"). Below the range, only another
// listener can take it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var (
	mu        sync.Mutex
	handedOut = map[int]bool{}
)

// Port returns a TCP port on 127.0.0.1 that was free a moment ago, lies
// outside the ephemeral range, and was not handed out before by this
// process.
func Port(t testing.TB) int {
	t.Helper()
	l := Listen(t, "127.0.0.1")
	l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Listen returns a listener on host at a port that lies outside the
// ephemeral range and was not handed out before by this process. A test
// that keeps it open until the server meant to use the port starts holds
// the port against other listeners too; closing it just before the
// server listens leaves only the moment in between.
func Listen(t testing.TB, host string) net.Listener {
	t.Helper()
	lo, hi := span()
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		if handedOut[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			continue
		}
		handedOut[p] = true
		return l
	}
	t.Fatalf("freeport: no free port in %d–%d on %s after 1000 probes", lo, hi-1, host)
	return nil
}

// Addr is Port as "127.0.0.1:PORT".
func Addr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", Port(t))
}

// span is the range ports are drawn from, [lo, hi): the ports from 10000 up
// to the start of the ephemeral range, or those above its end when that
// leaves more.
func span() (lo, hi int) {
	eLo, eHi := ephemeral()
	below, above := eLo-10000, 65536-(eHi+1)
	if below >= above && below > 0 {
		return 10000, eLo
	}
	if above > 0 {
		return eHi + 1, 65536
	}
	return 10000, 65536 // no room outside the range: probe anywhere
}

// ephemeral reads the kernel's ephemeral port range (Linux), or assumes
// the IANA one (49152–65535) where it cannot.
func ephemeral() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && l <= h {
				return l, h
			}
		}
	}
	return 49152, 65535
}
