package server

import (
	"errors"
	"flag"
	"fmt"
	"math/bits"
	"net"
	"strings"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/generator"
)

// ErrConfig marks a refused configuration; the message names the flag and
// the bound.
var ErrConfig = errors.New("server: invalid configuration")

func configErr(flagName, format string, args ...any) error {
	return fmt.Errorf("%w: --%s: %s", ErrConfig, flagName, fmt.Sprintf(format, args...))
}

// GeneratorConfig is one named generator (--generator name=layout).
type GeneratorConfig struct {
	Name   string
	Layout generator.Layout
	// MaxLead and MaxStaleness, resolved per generator from the node's
	// flags (zero there means the per-layout default).
	MaxLead      time.Duration
	MaxStaleness time.Duration
}

// Config is one node's configuration. Every field is a flag of `firn serve`
// (also FIRN_<FLAG> in the environment and a key of the --config file).
type Config struct {
	// DataDir holds the node's identity, its own last reservations and,
	// with the embedded coordinator, the etcd data. Default ./firn-data.
	DataDir string
	// GRPCAddr and HTTPAddr are the listeners (default loopback 7300/7301).
	GRPCAddr, HTTPAddr string
	// Etcd and ZooKeeper name an external coordinator (host:port lists,
	// etcd also URLs). Neither: the embedded single-node etcd.
	Etcd, ZooKeeper []string
	// EtcdPrefix and ZooKeeperPrefix are the key prefix / chroot.
	EtcdPrefix, ZooKeeperPrefix string
	// Cluster names the ID space within the coordinator.
	Cluster string
	// NodeName is a label (default hostname plus a short hash of the data
	// dir); never a credential.
	NodeName string
	// Generators; the first is the default. Default: default=snowflake.
	Generators []GeneratorConfig
	// Datacenter fixes the datacenter field (-1: allocated with the worker).
	Datacenter int64
	// MaxBatch bounds NextIDs' count (also by sequence × units in max-lead).
	MaxBatch int
	// LeaseTTL, ReservationWindow, CoordinatorTimeout: coordination timing.
	LeaseTTL, ReservationWindow, CoordinatorTimeout time.Duration
	// MaxLead and MaxStaleness: zero means per generator, max(1s, 2 units)
	// and max(100ms, 2 units).
	MaxLead, MaxStaleness time.Duration
	// MaxClockOffset is the NTP offset beyond which the node does not serve.
	MaxClockOffset time.Duration
	// NTP servers (host or host:port); NTPRequired decides whether
	// unreachable NTP blocks serving (default: true when NTP is set).
	NTP         []string
	NTPRequired bool
	NTPInterval time.Duration
	// MaxPeerSkew: a node that is the clock outlier by more than this among
	// at least 3 stops serving.
	MaxPeerSkew time.Duration
	// RollbackRecovery: "auto" (serve again once the clock caught up) or
	// "manual" (wait for POST /admin/resume).
	RollbackRecovery string
	// RingSize is the ring buffer's slot count (power of two).
	RingSize int
	// TLS for gRPC and HTTP: certificate and key; ClientCA turns on mTLS.
	TLSCert, TLSKey, TLSClientCA string
	// Etcd TLS and authentication.
	EtcdCA, EtcdCert, EtcdKey, EtcdUser, EtcdPassword string
	// ZooKeeper digest authentication (user:password).
	ZooKeeperAuth string
	// Fault injection (chaos tests, game days).
	EnableFaultInjection bool
	FaultAddr            string
	FaultAddrAllowRemote bool
	FaultClockOffset     time.Duration
	// EmbeddedServeRemote allows non-loopback listeners on the embedded
	// coordinator; AcceptMovedDataDir accepts a copied or moved data dir.
	EmbeddedServeRemote bool
	AcceptMovedDataDir  bool
	// ShutdownTimeout bounds the drain on SIGTERM.
	ShutdownTimeout time.Duration
	// HTTPRequestTimeout is the server's deadline for an HTTP ID request
	// (an HTTP client may send none); a generator that cannot answer in
	// time answers 503 or 504 naming the cause.
	HTTPRequestTimeout time.Duration
	// LogLevel: debug, info, warn, error.
	LogLevel string
	// Version is reported in Info and build_info.
	Version string

	// ntpRequiredSet records an explicit --ntp-required.
	ntpRequiredSet bool
	// generatorFlags are the raw --generator values.
	generatorFlags []string
	// allowShortWindow lifts the window relations (tests only).
	allowShortWindow bool
}

// DefaultConfig returns the defaults of `firn serve`.
func DefaultConfig() Config {
	return Config{
		DataDir:            "firn-data",
		GRPCAddr:           "127.0.0.1:7300",
		HTTPAddr:           "127.0.0.1:7301",
		EtcdPrefix:         "/firn",
		ZooKeeperPrefix:    "/firn",
		Cluster:            "default",
		Datacenter:         -1,
		MaxBatch:           100_000,
		LeaseTTL:           5 * time.Second,
		ReservationWindow:  5 * time.Second,
		CoordinatorTimeout: time.Second,
		MaxClockOffset:     250 * time.Millisecond,
		NTPInterval:        time.Minute,
		MaxPeerSkew:        time.Second,
		RollbackRecovery:   "auto",
		RingSize:           1 << 16,
		FaultAddr:          "127.0.0.1:7302",
		ShutdownTimeout:    20 * time.Second,
		HTTPRequestTimeout: 5 * time.Second,
		LogLevel:           "info",
		Version:            "dev",
	}
}

// listFlag is a comma-separated list flag.
type listFlag struct{ v *[]string }

func (l listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ",")
}
func (l listFlag) Set(s string) error {
	*l.v = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l.v = append(*l.v, p)
		}
	}
	return nil
}

// repeatFlag is a repeatable flag.
type repeatFlag struct{ v *[]string }

func (r repeatFlag) String() string {
	if r.v == nil {
		return ""
	}
	return strings.Join(*r.v, ";")
}
func (r repeatFlag) Set(s string) error { *r.v = append(*r.v, s); return nil }

// boolSetFlag records whether a bool flag was given.
type boolSetFlag struct {
	v   *bool
	set *bool
}

func (b boolSetFlag) String() string {
	if b.v == nil {
		return "false"
	}
	return fmt.Sprint(*b.v)
}
func (b boolSetFlag) Set(s string) error {
	switch strings.ToLower(s) {
	case "true", "1", "yes":
		*b.v = true
	case "false", "0", "no":
		*b.v = false
	default:
		return fmt.Errorf("%q is not a boolean", s)
	}
	*b.set = true
	return nil
}
func (b boolSetFlag) IsBoolFlag() bool { return true }

// RepeatableFlags names the flags whose values accumulate (their
// environment variable separates values with ';').
var RepeatableFlags = map[string]bool{"generator": true}

// RegisterFlags defines every serve flag on fs, writing into c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "node state directory (identity, reservations, embedded etcd)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address (API, /metrics, /healthz, /readyz, status page)")
	fs.Var(listFlag{&c.Etcd}, "etcd", "external etcd endpoints, comma-separated host:port or URLs (default: embedded etcd)")
	fs.Var(listFlag{&c.ZooKeeper}, "zookeeper", "ZooKeeper servers, comma-separated host:port")
	fs.StringVar(&c.EtcdPrefix, "etcd-prefix", c.EtcdPrefix, "etcd key prefix")
	fs.StringVar(&c.ZooKeeperPrefix, "zookeeper-prefix", c.ZooKeeperPrefix, "ZooKeeper path prefix (chroot)")
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "cluster name: a separate ID space within the coordinator")
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "node name label (default hostname plus a short hash of the data dir)")
	fs.Var(repeatFlag{&c.generatorFlags}, "generator", "name=layout (preset or canonical string); repeatable; the first is the default (default default=snowflake)")
	fs.Int64Var(&c.Datacenter, "datacenter", c.Datacenter, "fix the datacenter field (-1: allocated with the worker ID)")
	fs.IntVar(&c.MaxBatch, "max-batch", c.MaxBatch, "largest NextIDs count (also bounded by sequence × units in max-lead)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "worker lease TTL (etcd lease, ZooKeeper session timeout)")
	fs.DurationVar(&c.ReservationWindow, "reservation-window", c.ReservationWindow, "how far ahead reservations are kept")
	fs.DurationVar(&c.CoordinatorTimeout, "coordinator-timeout", c.CoordinatorTimeout, "timeout of each coordinator call")
	fs.DurationVar(&c.MaxLead, "max-lead", c.MaxLead, "how far IDs' time may run ahead of the clock (0: max(1s, 2 units) per generator)")
	fs.DurationVar(&c.MaxStaleness, "max-staleness", c.MaxStaleness, "oldest a buffered ID may be when handed out (0: max(100ms, 2 units) per generator)")
	fs.DurationVar(&c.MaxClockOffset, "max-clock-offset", c.MaxClockOffset, "NTP offset beyond which the node does not serve")
	fs.Var(listFlag{&c.NTP}, "ntp", "NTP servers, comma-separated host[:port] (none: drift unchecked)")
	fs.Var(boolSetFlag{&c.NTPRequired, &c.ntpRequiredSet}, "ntp-required", "unreachable NTP blocks serving (default true when --ntp is set)")
	fs.DurationVar(&c.NTPInterval, "ntp-interval", c.NTPInterval, "how often NTP is checked")
	fs.DurationVar(&c.MaxPeerSkew, "max-peer-skew", c.MaxPeerSkew, "clock skew from the peer median beyond which an outlier stops serving")
	fs.StringVar(&c.RollbackRecovery, "rollback-recovery", c.RollbackRecovery, "after a clock rollback beyond max-lead: auto or manual (POST /admin/resume)")
	fs.IntVar(&c.RingSize, "ring-size", c.RingSize, "ring buffer slots per generator (power of two)")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "TLS certificate for gRPC and HTTP")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "TLS key for gRPC and HTTP")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", c.TLSClientCA, "CA that client certificates must chain to (turns on mTLS)")
	fs.StringVar(&c.EtcdCA, "etcd-ca", c.EtcdCA, "CA of the etcd servers")
	fs.StringVar(&c.EtcdCert, "etcd-cert", c.EtcdCert, "client certificate for etcd")
	fs.StringVar(&c.EtcdKey, "etcd-key", c.EtcdKey, "client key for etcd")
	fs.StringVar(&c.EtcdUser, "etcd-user", c.EtcdUser, "etcd user name")
	fs.StringVar(&c.EtcdPassword, "etcd-password", c.EtcdPassword, "etcd password")
	fs.StringVar(&c.ZooKeeperAuth, "zookeeper-auth", c.ZooKeeperAuth, "ZooKeeper digest credentials user:password (ACLs on every node firn creates)")
	fs.BoolVar(&c.EnableFaultInjection, "enable-fault-injection", c.EnableFaultInjection, "serve the fault-injection listener (chaos tests only)")
	fs.StringVar(&c.FaultAddr, "fault-addr", c.FaultAddr, "fault-injection listen address")
	fs.BoolVar(&c.FaultAddrAllowRemote, "fault-addr-allow-remote", c.FaultAddrAllowRemote, "allow a non-loopback --fault-addr")
	fs.DurationVar(&c.FaultClockOffset, "fault-clock-offset", c.FaultClockOffset, "clock offset from the first read (needs --enable-fault-injection)")
	fs.BoolVar(&c.EmbeddedServeRemote, "embedded-serve-remote", c.EmbeddedServeRemote, "allow non-loopback listeners on the embedded coordinator")
	fs.BoolVar(&c.AcceptMovedDataDir, "accept-moved-data-dir", c.AcceptMovedDataDir, "accept a data dir that was copied or moved")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "longest graceful drain on SIGTERM")
	fs.DurationVar(&c.HTTPRequestTimeout, "http-request-timeout", c.HTTPRequestTimeout, "the server's deadline for an HTTP ID request")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
}

// Embedded reports whether the node runs on the embedded coordinator.
func (c *Config) Embedded() bool { return len(c.Etcd) == 0 && len(c.ZooKeeper) == 0 }

// Finish resolves the per-generator values and validates everything; now is
// the clock reading layouts are validated against. Errors match ErrConfig
// and name the flag and the bound.
func (c *Config) Finish(now time.Time) error {
	if len(c.Generators) == 0 {
		specs := c.generatorFlags
		if len(specs) == 0 {
			specs = []string{"default=snowflake"}
		}
		seen := map[string]bool{}
		for _, s := range specs {
			name, layout, ok := strings.Cut(s, "=")
			name = strings.TrimSpace(name)
			if !ok || name == "" || strings.ContainsAny(name, "/ \t") || len(name) > 64 {
				return configErr("generator", "%q is not name=layout (name 1..64 characters, no '/' or spaces)", s)
			}
			if seen[name] {
				return configErr("generator", "name %q given twice", name)
			}
			seen[name] = true
			l, err := generator.ParseLayout(layout)
			if err != nil {
				return configErr("generator", "%s: %v", name, err)
			}
			c.Generators = append(c.Generators, GeneratorConfig{Name: name, Layout: l})
		}
	}
	for i := range c.Generators {
		g := &c.Generators[i]
		if err := g.Layout.Validate(now); err != nil {
			return configErr("generator", "%s: %v", g.Name, err)
		}
		g.MaxLead = c.MaxLead
		if g.MaxLead == 0 {
			g.MaxLead = generator.DefaultMaxLead(g.Layout)
		}
		g.MaxStaleness = c.MaxStaleness
		if g.MaxStaleness == 0 {
			g.MaxStaleness = max(100*time.Millisecond, 2*g.Layout.Unit)
		}
		if g.MaxLead < 2*g.Layout.Unit {
			return configErr("max-lead", "%v is below 2 time units (%v) of generator %s", g.MaxLead, 2*g.Layout.Unit, g.Name)
		}
		if g.MaxStaleness < 2*g.Layout.Unit {
			return configErr("max-staleness", "%v is below 2 time units (%v) of generator %s", g.MaxStaleness, 2*g.Layout.Unit, g.Name)
		}
		if g.MaxStaleness < 2*time.Millisecond {
			return configErr("max-staleness", "%v is below 2ms", g.MaxStaleness)
		}
		if _, ok := perLead(*g); !ok {
			return configErr("max-lead", "%v holds %d units of %v, each of %d sequence numbers: the IDs within max-lead of generator %s overflow 64 bits",
				g.MaxLead, int64(g.MaxLead/g.Layout.Unit), g.Layout.Unit, g.Layout.PerUnit(), g.Name)
		}
		if c.Datacenter >= 0 && uint64(c.Datacenter) >= g.Layout.DatacenterLimit() {
			return configErr("datacenter", "%d does not fit generator %s's %d datacenter bits (max %d)",
				c.Datacenter, g.Name, g.Layout.DatacenterBits, g.Layout.DatacenterLimit()-1)
		}
	}
	switch {
	case c.DataDir == "":
		return configErr("data-dir", "must be set")
	case c.Cluster == "" || strings.ContainsAny(c.Cluster, "/ \t") || len(c.Cluster) > 64:
		return configErr("cluster", "%q must be 1..64 characters without '/' or spaces", c.Cluster)
	case c.Datacenter < -1:
		return configErr("datacenter", "%d must be -1 or a datacenter value", c.Datacenter)
	case c.MaxBatch < 1 || c.MaxBatch > 1_000_000:
		return configErr("max-batch", "%d outside [1, 1000000]", c.MaxBatch)
	case len(c.Etcd) > 0 && len(c.ZooKeeper) > 0:
		return configErr("zookeeper", "cannot be combined with --etcd")
	case c.MaxClockOffset <= 0:
		return configErr("max-clock-offset", "%v must be positive", c.MaxClockOffset)
	case c.NTPInterval < time.Second:
		return configErr("ntp-interval", "%v is below 1s", c.NTPInterval)
	case c.MaxPeerSkew <= 0:
		return configErr("max-peer-skew", "%v must be positive", c.MaxPeerSkew)
	case c.RollbackRecovery != "auto" && c.RollbackRecovery != "manual":
		return configErr("rollback-recovery", "%q must be auto or manual", c.RollbackRecovery)
	case c.RingSize < 128 || c.RingSize&(c.RingSize-1) != 0 || c.RingSize > 1<<24:
		return configErr("ring-size", "%d must be a power of two in [128, 16777216]", c.RingSize)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return configErr("tls-cert", "--tls-cert and --tls-key go together")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return configErr("tls-client-ca", "needs --tls-cert and --tls-key")
	case c.ShutdownTimeout <= 0:
		return configErr("shutdown-timeout", "%v must be positive", c.ShutdownTimeout)
	case c.HTTPRequestTimeout <= 0:
		return configErr("http-request-timeout", "%v must be positive", c.HTTPRequestTimeout)
	case c.FaultClockOffset != 0 && !c.EnableFaultInjection:
		return configErr("fault-clock-offset", "needs --enable-fault-injection")
	}
	if len(c.NTP) > 0 {
		if _, err := c.ntpConfig(); err != nil {
			return err
		}
	}
	if c.RollbackRecovery == "manual" && c.TLSClientCA == "" {
		return configErr("rollback-recovery", "manual needs mTLS (--tls-client-ca) for POST /admin/resume")
	}
	for _, a := range []struct{ flag, addr string }{{"grpc-addr", c.GRPCAddr}, {"http-addr", c.HTTPAddr}} {
		loop, err := loopback(a.addr)
		if err != nil {
			return configErr(a.flag, "%v", err)
		}
		if c.Embedded() && !loop && !c.EmbeddedServeRemote {
			return configErr(a.flag, "%s is not loopback; on the embedded coordinator every node is its own ID space, so serving remote clients needs --embedded-serve-remote (or point the node at --etcd/--zookeeper)", a.addr)
		}
	}
	if c.EnableFaultInjection {
		loop, err := loopback(c.FaultAddr)
		if err != nil {
			return configErr("fault-addr", "%v", err)
		}
		if !loop && !c.FaultAddrAllowRemote {
			return configErr("fault-addr", "%s is not loopback (needs --fault-addr-allow-remote)", c.FaultAddr)
		}
	}
	if !c.ntpRequiredSet {
		c.NTPRequired = len(c.NTP) > 0
	}
	if err := c.timingValidate(); err != nil {
		return err
	}
	return nil
}

func (c *Config) timingValidate() error {
	switch {
	case c.LeaseTTL < 2*time.Second || c.LeaseTTL%time.Second != 0:
		return configErr("lease-ttl", "%v must be whole seconds, at least 2s", c.LeaseTTL)
	case c.CoordinatorTimeout <= 0 || c.CoordinatorTimeout >= c.LeaseTTL:
		return configErr("coordinator-timeout", "%v must be positive and below --lease-ttl %v", c.CoordinatorTimeout, c.LeaseTTL)
	case c.allowShortWindow:
		return nil
	case c.ReservationWindow < 2*c.CoordinatorTimeout+1500*time.Millisecond:
		return configErr("reservation-window", "%v is shorter than 2 × --coordinator-timeout + 1.5s = %v",
			c.ReservationWindow, 2*c.CoordinatorTimeout+1500*time.Millisecond)
	case len(c.ZooKeeper) > 0 && c.ReservationWindow < c.LeaseTTL*2/3+1500*time.Millisecond:
		return configErr("reservation-window", "%v is shorter than 2/3 of the ZooKeeper session timeout (--lease-ttl %v) + 1.5s = %v",
			c.ReservationWindow, c.LeaseTTL, c.LeaseTTL*2/3+1500*time.Millisecond)
	}
	return nil
}

// ntpConfig is the NTP checker's configuration from --ntp (a host without
// a port gets 123), --max-clock-offset and --ntp-interval.
func (c *Config) ntpConfig() (clockguard.NTPConfig, error) {
	servers := make([]string, len(c.NTP))
	for i, s := range c.NTP {
		if _, _, err := net.SplitHostPort(s); err != nil {
			s = net.JoinHostPort(s, "123")
		}
		servers[i] = s
	}
	nc := clockguard.DefaultNTPConfig(servers...)
	nc.MaxOffset = c.MaxClockOffset
	nc.Interval = c.NTPInterval
	nc.Timeout = min(nc.Timeout, nc.Interval)
	nc.MaxRTT = min(nc.MaxRTT, 2*nc.MaxOffset, nc.Timeout)
	if err := nc.Validate(); err != nil {
		return nc, configErr("ntp", "%v", err)
	}
	return nc, nil
}

// loopback reports whether a listen address is on loopback.
func loopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("%q is not host:port", addr)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false, nil
	}
	return ip.IsLoopback(), nil
}

// MaxBatchFor is the largest NextIDs count for a generator: min(--max-batch,
// sequence per unit × units in max-lead). Finish refuses a generator whose
// product overflows, so it is never 0.
func (c *Config) MaxBatchFor(g GeneratorConfig) int {
	n, ok := perLead(g)
	if !ok {
		return c.MaxBatch
	}
	return int(min(uint64(c.MaxBatch), n))
}

// perLead is sequence per unit × units in max-lead, and false when it
// overflows 64 bits.
func perLead(g GeneratorConfig) (uint64, bool) {
	hi, lo := bits.Mul64(g.Layout.PerUnit(), uint64(g.MaxLead/g.Layout.Unit))
	return lo, hi == 0
}

// AllowShortWindow lifts the reservation-window relations; tests only.
func (c *Config) AllowShortWindow() { c.allowShortWindow = true }
