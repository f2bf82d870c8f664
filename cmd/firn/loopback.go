package main

import (
	"fmt"
	"net"

	"github.com/firnid/firn/server/core"
)

// loopbackRule is the rule, written once, that keeps a listener on
// loopback unless an operator lifts it with a flag: the node's gRPC and
// HTTP listeners on the embedded coordinator (every node on it is its own
// ID space, so serving remote clients from one is a fleet waiting to issue
// duplicates) and the fault-injection listener (whoever reaches it moves
// the node's clock).
type loopbackRule struct {
	// lifted: the flag that lifts the rule was given.
	lifted bool
	// why ends the refusal: what is at stake, and the flag that lifts
	// the rule.
	why string
}

// check refuses addr, the value of --flag, unless it is host:port and,
// while the rule stands, on loopback ("localhost" or a loopback IP).
func (r loopbackRule) check(flag, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return flagErr(flag, "%q is not host:port", addr)
	}
	if r.lifted || isLoopbackHost(host) {
		return nil
	}
	return flagErr(flag, "%s is not loopback; %s", addr, r.why)
}

func isLoopbackHost(host string) bool { return core.LoopbackHost(host) }

// flagErr is a refused flag value: "--flag: what is wrong and the bound".
func flagErr(flag, format string, args ...any) error {
	return fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...))
}
