package zookeeper

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"
	"unicode"

	"github.com/go-zookeeper/zk"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

// Dialer opens one TCP connection to a ZooKeeper server; it has the shape
// of go-zookeeper's zk.Dialer.
type Dialer func(network, address string, timeout time.Duration) (net.Conn, error)

// Config configures the ZooKeeper backend. DefaultConfig fills every field
// but Servers and Clock.
type Config struct {
	// Servers are the ensemble's client addresses, host:port. Required.
	Servers []string
	// Prefix is the node path under which everything lives, default
	// "/firn". It plays the part of a chroot: firn creates and touches
	// nothing outside it (missing ancestors are created with firn's ACL).
	Prefix string
	// Cluster names the ID space within the prefix (--cluster), default
	// "default".
	Cluster string
	// Auth is digest credentials "user:password". When set, the session
	// authenticates with them and every node firn creates carries an ACL
	// granting all permissions to that identity alone; when empty, nodes
	// are created open to anyone (world:anyone).
	Auth string

	// Timing holds the lease TTL (requested as the session timeout), the
	// call timeout (--coordinator-timeout) and the reservation window that
	// Validate checks against both.
	Timing coordinator.Timing
	// DialTimeout bounds the wait for the first session. Default 5 s.
	DialTimeout time.Duration

	// Clock gives heartbeat wall readings for the owner record written at
	// acquisition, take-back ages and the receipt times of peers'
	// heartbeats. Required.
	Clock clockguard.Clock
	// Logger receives one line per state change. Default slog.Default().
	Logger *slog.Logger
	// Dialer, when set, opens the TCP connections (tests put a proxy or a
	// session recorder here). Default net.DialTimeout.
	Dialer Dialer
}

// DefaultConfig returns the defaults: prefix "/firn", cluster "default",
// coordinator.DefaultTiming() (session timeout 5 s, window 5 s, call
// timeout 1 s), dial timeout 5 s.
func DefaultConfig() Config {
	return Config{
		Prefix:      "/firn",
		Cluster:     "default",
		Timing:      coordinator.DefaultTiming(),
		DialTimeout: 5 * time.Second,
	}
}

// validNodeName reports whether s can be one element of a ZooKeeper path
// that firn creates: 1..128 bytes, no '/', not "." or "..", and none of the
// characters ZooKeeper refuses in paths (controls, surrogates, private-use
// and specials ranges).
func validNodeName(s string) bool {
	if s == "" || len(s) > 128 || s == "." || s == ".." || strings.ContainsRune(s, '/') {
		return false
	}
	for _, r := range s {
		switch {
		case r == unicode.ReplacementChar, r == 0,
			r <= 0x1f, r >= 0x7f && r <= 0x9f,
			r >= 0xd800 && r <= 0xf8ff, r >= 0xfff0:
			return false
		}
	}
	return true
}

// Validate refuses a configuration naming the field and the bound. Errors
// match coordinator.ErrInvalidSpec. The relation to the negotiated session
// timeout is checked again by New once the server has answered.
func (c Config) Validate() error {
	inv := coordinator.ErrInvalidSpec
	switch {
	case len(c.Servers) == 0:
		return fmt.Errorf("%w: zookeeper servers are empty", inv)
	case !strings.HasPrefix(c.Prefix, "/") || c.Prefix == "/" || strings.HasSuffix(c.Prefix, "/"):
		return fmt.Errorf("%w: zookeeper prefix %q must be an absolute path like /firn (no trailing '/')", inv, c.Prefix)
	case !validNodeName(c.Cluster):
		return fmt.Errorf("%w: cluster %q must be a valid ZooKeeper node name of 1..128 bytes", inv, c.Cluster)
	case c.Clock == nil:
		return fmt.Errorf("%w: zookeeper Config.Clock is nil", inv)
	case c.DialTimeout <= 0:
		return fmt.Errorf("%w: zookeeper dial timeout %v must be positive", inv, c.DialTimeout)
	}
	for _, el := range strings.Split(c.Prefix[1:], "/") {
		if !validNodeName(el) || el == "zookeeper" {
			return fmt.Errorf("%w: zookeeper prefix %q: element %q is not a valid node name", inv, c.Prefix, el)
		}
	}
	for _, s := range c.Servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("%w: zookeeper server %q must be host:port: %v", inv, s, err)
		}
	}
	if c.Auth != "" {
		user, pass, ok := strings.Cut(c.Auth, ":")
		if !ok || user == "" || pass == "" {
			return fmt.Errorf("%w: zookeeper auth must be user:password with both parts non-empty", inv)
		}
	}
	if err := c.Timing.Validate(); err != nil {
		return err
	}
	return c.checkSession(c.Timing.LeaseTTL, "requested")
}

// SessionStall is how long a session can go without a server answering
// before the client gives up on that server and fails over: two thirds of
// the negotiated session timeout (the client's receive timeout).
func SessionStall(session time.Duration) time.Duration { return coordinator.SessionStall(session) }

// checkSession refuses a reservation window that one frozen server (the
// client waits SessionStall before it fails over) would outlast; which is
// "requested" or "negotiated".
func (c Config) checkSession(session time.Duration, which string) error {
	return c.Timing.ValidateSession(session, which+" ZooKeeper session timeout", coordinator.DefaultTimingNames)
}

// acl is what every node firn creates carries.
func (c Config) acl() []zk.ACL {
	if c.Auth == "" {
		return zk.WorldACL(zk.PermAll)
	}
	user, pass, _ := strings.Cut(c.Auth, ":")
	return zk.DigestACL(zk.PermAll, user, pass)
}
