package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/embedded"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/coordinator/zookeeper"
	"github.com/firnid/firn/server/core"
)

// coordConfig is the coordinator as the flags, the environment and the
// --config file name it: which one (etcd, ZooKeeper, or with neither the
// embedded etcd), where, how to authenticate, on which cluster, and the
// timing. `firn serve`, `firn workers` and `firn coordinator bump` read
// the same flags, so one file serves them all.
type coordConfig struct {
	// Etcd and ZooKeeper name an external coordinator (host:port lists,
	// etcd also URLs). Neither: the embedded single-node etcd.
	Etcd, ZooKeeper []string
	// EtcdPrefix and ZooKeeperPrefix are the key prefix / chroot.
	EtcdPrefix, ZooKeeperPrefix string
	// Cluster names the ID space within the coordinator.
	Cluster string
	// Etcd TLS and authentication.
	EtcdCA, EtcdCert, EtcdKey, EtcdUser, EtcdPassword string
	// ZooKeeper digest authentication (user:password).
	ZooKeeperAuth string
	// The same secrets read from files (a mounted Secret), so they appear
	// in no process listing or environment.
	EtcdPasswordFile, ZooKeeperAuthFile string
	// The timing (coordinator.Timing; the refresh interval is fixed at 1 s).
	LeaseTTL, ReservationWindow, CoordinatorTimeout time.Duration
	// EmbeddedClientAddr is the embedded etcd's client listener: the one a
	// node starts, and the one the admin commands reach with neither
	// --etcd nor --zookeeper.
	EmbeddedClientAddr string
	// EmbeddedPeerAddr and AcceptMovedDataDir concern starting the
	// embedded etcd (serve only).
	EmbeddedPeerAddr   string
	AcceptMovedDataDir bool
}

// defaultCoordConfig returns the defaults of the coordinator flags.
func defaultCoordConfig() coordConfig {
	t := coordinator.DefaultTiming()
	return coordConfig{
		EtcdPrefix:         "/firn",
		ZooKeeperPrefix:    "/firn",
		Cluster:            "default",
		LeaseTTL:           t.LeaseTTL,
		ReservationWindow:  t.ReservationWindow,
		CoordinatorTimeout: t.Timeout,
		EmbeddedClientAddr: "127.0.0.1:7310",
		EmbeddedPeerAddr:   "127.0.0.1:7311",
	}
}

// register defines the coordinator flags every command that reaches the
// coordinator shares.
func (c *coordConfig) register(fs *pflag.FlagSet) {
	fs.Var(listFlag{&c.Etcd, commaItems}, "etcd", "external etcd endpoints, a list of host:port or URLs (default: embedded etcd)")
	fs.Var(listFlag{&c.ZooKeeper, commaItems}, "zookeeper", "ZooKeeper servers, a list of host:port")
	fs.StringVar(&c.EtcdPrefix, "etcd-prefix", c.EtcdPrefix, "etcd key prefix")
	fs.StringVar(&c.ZooKeeperPrefix, "zookeeper-prefix", c.ZooKeeperPrefix, "ZooKeeper path prefix (chroot)")
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "cluster name: a separate ID space within the coordinator")
	fs.StringVar(&c.EtcdCA, "etcd-ca", c.EtcdCA, "CA of the etcd servers")
	fs.StringVar(&c.EtcdCert, "etcd-cert", c.EtcdCert, "client certificate for etcd")
	fs.StringVar(&c.EtcdKey, "etcd-key", c.EtcdKey, "client key for etcd")
	fs.StringVar(&c.EtcdUser, "etcd-user", c.EtcdUser, "etcd user name")
	fs.StringVar(&c.EtcdPassword, "etcd-password", c.EtcdPassword, "etcd password")
	fs.StringVar(&c.ZooKeeperAuth, "zookeeper-auth", c.ZooKeeperAuth, "ZooKeeper digest credentials user:password (ACLs on every node firn creates)")
	fs.StringVar(&c.EtcdPasswordFile, "etcd-password-file", c.EtcdPasswordFile, "file holding the etcd password (instead of --etcd-password)")
	fs.StringVar(&c.ZooKeeperAuthFile, "zookeeper-auth-file", c.ZooKeeperAuthFile, "file holding the ZooKeeper credentials user:password (instead of --zookeeper-auth)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "worker lease TTL (etcd lease, ZooKeeper session timeout)")
	fs.DurationVar(&c.ReservationWindow, "reservation-window", c.ReservationWindow, "how far ahead reservations are kept")
	fs.DurationVar(&c.CoordinatorTimeout, "coordinator-timeout", c.CoordinatorTimeout, "timeout of each coordinator call")
	fs.StringVar(&c.EmbeddedClientAddr, "embedded-client-addr", c.EmbeddedClientAddr, "embedded etcd client listener (loopback)")
}

// coordDetailFlags are the coordinator flags past the essential ones
// (--etcd, --zookeeper, --cluster): help lists them under their own
// heading.
var coordDetailFlags = []string{"etcd-prefix", "zookeeper-prefix", "etcd-ca", "etcd-cert", "etcd-key", "etcd-user", "etcd-password",
	"etcd-password-file", "zookeeper-auth", "zookeeper-auth-file", "lease-ttl", "reservation-window", "coordinator-timeout",
	"embedded-client-addr"}

// coordFlagNames are the names of the flags register defines.
func coordFlagNames() map[string]bool {
	fs := pflag.NewFlagSet("", pflag.ContinueOnError)
	c := defaultCoordConfig()
	c.register(fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
	return names
}

// registerEmbeddedStart defines the flags of starting the embedded etcd
// (serve only).
func (c *coordConfig) registerEmbeddedStart(fs *pflag.FlagSet) {
	fs.StringVar(&c.EmbeddedPeerAddr, "embedded-peer-addr", c.EmbeddedPeerAddr, "embedded etcd peer listener (loopback)")
	fs.BoolVar(&c.AcceptMovedDataDir, "accept-moved-data-dir", c.AcceptMovedDataDir, "accept a data dir that was copied or moved")
}

// embedded reports whether the node runs on the embedded coordinator.
func (c *coordConfig) embedded() bool { return len(c.Etcd) == 0 && len(c.ZooKeeper) == 0 }

// timing is the coordination timing the coordinator and the node share.
func (c *coordConfig) timing() coordinator.Timing {
	return coordinator.Timing{LeaseTTL: c.LeaseTTL, ReservationWindow: c.ReservationWindow,
		Timeout: c.CoordinatorTimeout, RefreshInterval: time.Second}
}

// validate refuses a coordinator configuration naming the flag: the
// cluster name, --etcd with --zookeeper, and the timing relations
// (coordinator.Timing, with the ZooKeeper session rule on ZooKeeper).
func (c *coordConfig) validate() error {
	switch {
	case c.Cluster == "" || strings.ContainsAny(c.Cluster, "/ \t") || len(c.Cluster) > 64:
		return flagErr("cluster", "%q must be 1..64 characters without '/' or spaces", c.Cluster)
	case len(c.Etcd) > 0 && len(c.ZooKeeper) > 0:
		return flagErr("zookeeper", "cannot be combined with --etcd")
	}
	if err := c.readSecrets(); err != nil {
		return err
	}
	t := c.timing()
	if err := t.ValidateNamed(core.TimingFlags); err != nil {
		return timingErr(err)
	}
	if len(c.ZooKeeper) > 0 {
		if err := t.ValidateSession(t.LeaseTTL, "ZooKeeper session timeout (--lease-ttl)", core.TimingFlags); err != nil {
			return timingErr(err)
		}
	}
	return nil
}

// readSecrets fills the password and the ZooKeeper credentials from their
// files: the file's content without a trailing newline. A secret given both
// ways is refused.
func (c *coordConfig) readSecrets() error {
	for _, s := range []struct {
		flag, fileFlag string
		file           string
		dst            *string
	}{
		{"etcd-password", "etcd-password-file", c.EtcdPasswordFile, &c.EtcdPassword},
		{"zookeeper-auth", "zookeeper-auth-file", c.ZooKeeperAuthFile, &c.ZooKeeperAuth},
	} {
		if s.file == "" {
			continue
		}
		if *s.dst != "" {
			return flagErr(s.fileFlag, "cannot be combined with --%s", s.flag)
		}
		b, err := os.ReadFile(s.file)
		if err != nil {
			return flagErr(s.fileFlag, "%v", err)
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return flagErr(s.fileFlag, "%s is empty", s.file)
		}
		*s.dst = v
	}
	return nil
}

// timingErr renders a refused coordinator.Timing as "--flag: reason".
func timingErr(err error) error {
	var te *coordinator.TimingError
	if errors.As(err, &te) {
		return fmt.Errorf("%s: %s", te.Field, te.Reason)
	}
	return err
}

// openMode says who the coordinator is opened for.
type openMode int

const (
	// forNode: `firn serve`. With neither --etcd nor --zookeeper the
	// embedded etcd is started in the data dir. A coordinator that does
	// not answer is no error: the node starts on one that keeps dialling
	// (coordinator.Lazy), does not serve, and says why.
	forNode openMode = iota
	// forAdmin: `firn workers`, `firn coordinator bump`. With neither
	// --etcd nor --zookeeper the local node's embedded etcd is reached at
	// --embedded-client-addr. A coordinator that does not answer fails the
	// command.
	forAdmin
)

// openEnv is what opening a coordinator needs besides its flags.
type openEnv struct {
	clock clockguard.Clock
	log   *slog.Logger
	// dataDir holds the embedded etcd's data (forNode).
	dataDir string
	// stdout gets the embedded etcd's URL when it starts (forNode).
	stdout io.Writer
}

// openedCoordinator is a coordinator opened by openCoordinator.
type openedCoordinator struct {
	// Backend is the coordinator: its runtime part for a node, its admin
	// part for the admin commands.
	coordinator.Backend
	// name describes it for Info and the status page.
	name string
	// embeddedURL is the client URL of the embedded etcd this process
	// started ("" when none).
	embeddedURL string
	stop        func()
}

// Close closes the connection, then stops the embedded etcd if this
// process started one.
func (o *openedCoordinator) Close() error {
	err := o.Backend.Close()
	if o.stop != nil {
		o.stop()
	}
	return err
}

// openCoordinator opens the coordinator c names, for mode. c must have
// passed validate. Errors name the flag (--etcd, --zookeeper) or the
// embedded etcd.
func openCoordinator(c coordConfig, mode openMode, env openEnv) (*openedCoordinator, error) {
	timing := c.timing()
	if len(c.ZooKeeper) > 0 {
		zc := zookeeper.DefaultConfig()
		zc.Servers = c.ZooKeeper
		if c.ZooKeeperPrefix != "" {
			zc.Prefix = c.ZooKeeperPrefix
		}
		zc.Cluster = c.Cluster
		zc.Auth = c.ZooKeeperAuth
		zc.Timing = timing
		zc.Clock = env.clock
		zc.Logger = env.log
		b, err := connect(mode, func() (coordinator.Backend, error) { return zookeeper.New(zc) }, env.log)
		if err != nil {
			return nil, fmt.Errorf("--zookeeper: %w", err)
		}
		return &openedCoordinator{Backend: b, name: "zookeeper " + strings.Join(c.ZooKeeper, ",")}, nil
	}

	o := &openedCoordinator{}
	endpoints := c.Etcd
	o.name = "etcd " + strings.Join(endpoints, ",")
	what := "--etcd"
	if c.embedded() {
		switch mode {
		case forNode:
			es, err := embedded.Start(embedded.Config{DataDir: env.dataDir, ClientAddr: c.EmbeddedClientAddr,
				PeerAddr: c.EmbeddedPeerAddr, AcceptMoved: c.AcceptMovedDataDir, Logger: env.log})
			if err != nil {
				return nil, fmt.Errorf("embedded etcd: %w", err)
			}
			o.stop = func() { es.Close() }
			o.embeddedURL = es.ClientURL()
			endpoints = []string{o.embeddedURL}
			o.name = "embedded etcd " + o.embeddedURL
			if env.stdout != nil {
				fmt.Fprintf(env.stdout, "firn: embedded etcd at %s (a second local node joins with --etcd %s; two embedded coordinators are two separate ID spaces)\n",
					o.embeddedURL, o.embeddedURL)
			}
		case forAdmin:
			endpoints = []string{"http://" + c.EmbeddedClientAddr} // the embedded etcd of a local node
			o.name = "embedded etcd " + endpoints[0]
			what = "the local node's embedded etcd (--embedded-client-addr; or name the coordinator with --etcd or --zookeeper)"
		}
	}
	ec := etcd.DefaultConfig()
	ec.Endpoints = endpoints
	ec.Prefix = strings.Trim(c.EtcdPrefix, "/")
	ec.Cluster = c.Cluster
	ec.Username, ec.Password = c.EtcdUser, c.EtcdPassword
	ec.CAFile, ec.CertFile, ec.KeyFile = c.EtcdCA, c.EtcdCert, c.EtcdKey
	ec.Timing = timing
	ec.Clock = env.clock
	ec.Logger = env.log
	b, err := connect(mode, func() (coordinator.Backend, error) { return etcd.New(ec) }, env.log)
	if err != nil {
		if o.stop != nil {
			o.stop()
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	o.Backend = b
	return o, nil
}

// connect dials the coordinator. A configuration error fails at once. An
// unreachable coordinator fails an admin command; a node starts anyway,
// does not serve, says why (its generators' reason names the
// coordinator), and keeps dialling.
func connect(mode openMode, dial func() (coordinator.Backend, error), log *slog.Logger) (coordinator.Backend, error) {
	c, err := dial()
	switch {
	case err == nil:
		return c, nil
	case mode == forNode && errors.Is(err, coordinator.ErrUnavailable):
		log.Warn("coordinator unreachable at start: not serving until it answers", "err", err)
		return coordinator.NewLazy(func(context.Context) (coordinator.Backend, error) { return dial() }, time.Second, err), nil
	}
	return nil, err
}
