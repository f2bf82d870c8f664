package core

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"strings"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/seq"
)

// ErrConfig marks a refused configuration; the message names the flag and
// the bound.
var ErrConfig = errors.New("server: invalid configuration")

func configErr(flagName, format string, args ...any) error {
	return fmt.Errorf("%w: --%s: %s", ErrConfig, flagName, fmt.Sprintf(format, args...))
}

// GeneratorConfig is one named generator.
type GeneratorConfig struct {
	Name   string
	Layout generator.Layout
	// Segment, when set, makes this a segment generator (dense IDs from a
	// counter in the coordinator, docs/design.md Segment counters): Layout
	// is then unused.
	Segment *segment.Definition
	// MaxLead and MaxStaleness, resolved per generator by Finish from the
	// node's (zero there means the per-layout default).
	MaxLead      time.Duration
	MaxStaleness time.Duration
	// Allow, when set, are the callers that may use the generator: names
	// of verified client certificates (subject CN or a DNS SAN), under
	// mTLS. Any other caller is refused PERMISSION_DENIED naming the
	// generator and nothing else. Empty: every caller the node admits.
	Allow []string
}

// Config is what one node consumes: its generators, its timing, its clock
// rules, its listeners and their TLS, fault injection and its drain. It is
// filled by cmd/firn from the flags, the FIRN_* environment and the
// --config file of `firn serve`, or by a program embedding a node
// (DefaultConfig, then the fields it wants). Finish validates it; its
// refusals name the `firn serve` flag of the field at fault.
//
// The coordinator a node runs on, its data dir and its name are given to
// server.New or New already opened: choosing and opening them is the
// caller's (cmd/firn's coordinator opener).
type Config struct {
	// GRPCAddr and HTTPAddr are the listeners (host:port; port 0 picks a
	// free one). Default loopback 7300 and 7301.
	GRPCAddr, HTTPAddr string
	// AdvertiseAddr is the gRPC address clients reach this node at, as
	// other nodes name it: a sequence generator's section owners are named
	// by it (WRONG_NODE, Info's section map). Empty: the gRPC listener's
	// address (on a wildcard listener, 0.0.0.0:7300, which no other host
	// can dial: set it, as deploy/kubernetes does from the pod's IP).
	AdvertiseAddr string
	// TLS, when set, serves gRPC and HTTP over TLS. ClientAuth
	// tls.RequireAndVerifyClientCert turns on mTLS: the ID API and POST
	// /admin/resume then need a verified client certificate, and
	// /healthz, /readyz, /metrics and the status page still answer
	// without one.
	TLS *tls.Config
	// Cluster names the ID space within the coordinator (shown in Info,
	// metrics and the status page; the coordinator was opened on it).
	Cluster string
	// Generators; the first is the default. None: default=snowflake.
	Generators []GeneratorConfig
	// Datacenter fixes the datacenter field (-1: allocated with the worker).
	Datacenter int64
	// Workers is how many workers each generator holds (0: one): a wide
	// generator issues up to Workers × its layout's rate, in per-node
	// order (docs/design.md, Wide generators). With WorkersAuto the
	// number follows the rate, from one up to MaxWorkers.
	Workers     int
	WorkersAuto bool
	MaxWorkers  int
	// MaxBatch bounds NextIDs' count (also by sequence × units in max-lead).
	MaxBatch int
	// MaxQueue bounds, per generator, the time the IDs asked for and not
	// yet produced take at the layout's rate; a request beyond it (or one
	// whose deadline falls before its turn) is refused at once with
	// RESOURCE_EXHAUSTED. The bound is never below one MaxBatch.
	MaxQueue time.Duration
	// ClientRate limits each client (its certificate name under mTLS,
	// else its gRPC connection or HTTP remote host) to so many IDs/s per generator, with bursts
	// of ClientBurst (0: one second of ClientRate); 0 means no limit.
	ClientRate  float64
	ClientBurst int
	// Timing is the coordination timing: the holders keep reservations
	// ReservationWindow ahead, writing every RefreshInterval, each call
	// bounded by Timeout. The coordinator given to New must have been
	// built with the same Timing (its LeaseTTL is the coordinator's).
	Timing coordinator.Timing
	// MaxLead and MaxStaleness: zero means per generator, max(1s, 2 units)
	// and max(100ms, 2 units).
	MaxLead, MaxStaleness time.Duration
	// MaxClockOffset is the NTP offset beyond which the node does not
	// serve, and the largest forward clock step accepted without
	// confirmation.
	MaxClockOffset time.Duration
	// NTP servers (host or host:port; port 123 when none); NTPRequired
	// decides whether unreachable NTP blocks serving; NTPInterval is how
	// often they are asked.
	NTP         []string
	NTPRequired bool
	NTPInterval time.Duration
	// MaxPeerSkew: a node that is the clock outlier by more than this among
	// at least 3 stops serving.
	MaxPeerSkew time.Duration
	// RollbackRecovery: "auto" (serve again once the clock caught up) or
	// "manual" (wait for POST /admin/resume, which needs mTLS).
	RollbackRecovery string
	// PrivateCoordinator: the coordinator is this node's own embedded etcd,
	// started by this process in its data dir. Nothing can restore it
	// underneath the running node, and no other node issues from it, so
	// a fresh take needs no margin for a lost history (docs/design.md,
	// Restores) and an unchecked clock is the node's own business.
	PrivateCoordinator bool
	// UncheckedClockOK lets the node serve while nothing checks its clock:
	// no NTP answering (none configured, or NTPRequired false and NTP
	// unreachable) and fewer than three live nodes in the peer check, this
	// one included. Without it such a node does not serve
	// (CLOCK_UNCHECKED), re-judged at every peer reading and NTP verdict;
	// a PrivateCoordinator node is exempt (docs/design.md, Clock policy).
	UncheckedClockOK bool
	// RingSize is the ring buffer's slot count (power of two).
	RingSize int
	// Fault injection (chaos tests, game days): a listener on FaultAddr
	// that sets the offset of the node's Offset clock (WithOffsetClock),
	// whose offset starts at FaultClockOffset.
	EnableFaultInjection bool
	FaultAddr            string
	FaultClockOffset     time.Duration
	// ShutdownTimeout bounds the drain on SIGTERM.
	ShutdownTimeout time.Duration
	// HTTPRequestTimeout is the server's deadline for an HTTP ID request
	// (an HTTP client may send none); a generator that cannot answer in
	// time answers 503 or 504 naming the cause.
	HTTPRequestTimeout time.Duration
	// HTTPIdleTimeout closes a keep-alive HTTP connection idle this long.
	// The HTTP listener also bounds reading a request (headers 5 s, the
	// whole request httpReadTimeout) and writing an answer
	// (HTTPRequestTimeout + httpWriteMargin).
	HTTPIdleTimeout time.Duration
	// AdminNames are the client certificate names (subject CN or a DNS
	// SAN) allowed to call the admin endpoints (POST /admin/resume) over
	// mTLS; ID callers are not admins by default. Without mTLS the admin
	// endpoints answer only on a loopback HTTP listener.
	AdminNames []string
	// GRPCMaxConnectionAge: a client connection older than this is asked
	// to reconnect (0: never), so that long-lived clients spread over
	// nodes that joined after they connected (grpcopt.ServerOptions).
	GRPCMaxConnectionAge time.Duration
	// Version is reported in Info and build_info.
	Version string
	// Revision and Modified are the build's VCS revision and whether its
	// tree had uncommitted changes, in build_info.
	Revision string
	Modified bool
}

// DefaultConfig returns a node's defaults (those of `firn serve` too).
func DefaultConfig() Config {
	return Config{
		GRPCAddr:             "127.0.0.1:7300",
		HTTPAddr:             "127.0.0.1:7301",
		Cluster:              "default",
		Datacenter:           -1,
		MaxBatch:             100_000,
		MaxQueue:             250 * time.Millisecond,
		Timing:               coordinator.DefaultTiming(),
		MaxClockOffset:       250 * time.Millisecond,
		NTPInterval:          time.Minute,
		MaxPeerSkew:          time.Second,
		RollbackRecovery:     "auto",
		RingSize:             1 << 16,
		FaultAddr:            "127.0.0.1:7302",
		ShutdownTimeout:      20 * time.Second,
		HTTPRequestTimeout:   5 * time.Second,
		HTTPIdleTimeout:      30 * time.Second,
		GRPCMaxConnectionAge: 5 * time.Minute,
		Version:              "dev",
	}
}

// TimingFlags are the `firn serve` flags of the Timing fields (the refresh
// interval has none); a refused Timing names them.
var TimingFlags = coordinator.TimingNames{
	LeaseTTL:          "--lease-ttl",
	ReservationWindow: "--reservation-window",
	Timeout:           "--coordinator-timeout",
	RefreshInterval:   "refresh interval",
}

// TimingErr turns a refused Timing (ValidateNamed with TimingFlags) into a
// configuration error naming the flag; other errors pass unchanged.
func TimingErr(err error) error {
	var te *coordinator.TimingError
	if errors.As(err, &te) {
		return fmt.Errorf("%w: %s: %s", ErrConfig, te.Field, te.Reason)
	}
	return err
}

// adminReachable reports whether some caller can be authorised for the
// admin endpoints: over mTLS with admin names, or on a loopback HTTP
// listener.
func (c *Config) adminReachable() bool {
	if c.MutualTLS() {
		return len(c.AdminNames) > 0
	}
	host, _, err := net.SplitHostPort(c.HTTPAddr)
	return err == nil && LoopbackHost(host)
}

// LoopbackHost reports whether host is "localhost" or a loopback IP: the
// one loopback test of the node and the binary.
func LoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LoopbackHostHeader reports whether an HTTP Host header (r.Host) names
// a loopback address or localhost, with or without a port:
// "127.0.0.1:7301", "localhost", "[::1]:7301", and an IPv6 literal in
// brackets without a port, "[::1]", alike.
func LoopbackHostHeader(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	return LoopbackHost(host)
}

// MutualTLS reports whether the node requires verified client
// certificates (TLS with ClientAuth tls.RequireAndVerifyClientCert).
func (c *Config) MutualTLS() bool {
	return c.TLS != nil && c.TLS.ClientAuth == tls.RequireAndVerifyClientCert
}

// Finish resolves the per-generator values and validates what the node
// consumes; now is the clock reading layouts are validated against.
// Errors match ErrConfig and name the flag and the bound. The timing is
// checked by coordinator.Timing (its relations live there alone).
func (c *Config) Finish(now time.Time) error {
	if len(c.Generators) == 0 {
		l, _ := generator.Preset("snowflake")
		c.Generators = []GeneratorConfig{{Name: "default", Layout: l}}
	}
	seen := map[string]bool{}
	for i := range c.Generators {
		g := &c.Generators[i]
		if g.Name == "" || strings.ContainsAny(g.Name, "/ \t") || len(g.Name) > 64 {
			return configErr("generator", "name %q must be 1..64 characters, no '/' or spaces", g.Name)
		}
		if seen[g.Name] {
			return configErr("generator", "name %q given twice", g.Name)
		}
		seen[g.Name] = true
		if err := c.finishGenerator(g, now); err != nil {
			return err
		}
	}
	if err := c.checkLimits(); err != nil {
		return err
	}
	if c.AdvertiseAddr != "" {
		host, port, err := net.SplitHostPort(c.AdvertiseAddr)
		if err != nil || host == "" || port == "" || net.ParseIP(host).IsUnspecified() {
			return configErr("advertise-addr", "%q is not host:port with a host other nodes' clients can dial", c.AdvertiseAddr)
		}
	}
	if len(c.NTP) > 0 {
		if _, err := c.ntpConfig(); err != nil {
			return err
		}
	}
	if c.RollbackRecovery == "manual" && !c.adminReachable() {
		return configErr("rollback-recovery", "manual needs POST /admin/resume: mTLS (--tls-client-ca) with --admin-names, or a loopback --http-addr")
	}
	if len(c.AdminNames) > 0 && !c.MutualTLS() {
		return configErr("admin-names", "needs mTLS (--tls-client-ca): the names are those of verified client certificates")
	}
	for _, g := range c.Generators {
		if len(g.Allow) > 0 && !c.MutualTLS() {
			return configErr("allow-callers", "generator %q: an allow list needs mTLS (--tls-client-ca): the names are those of verified client certificates", g.Name)
		}
		for _, n := range g.Allow {
			if n == "" || len(n) > 256 {
				return configErr("allow-callers", "generator %q: a caller name must be 1..256 bytes, got %q", g.Name, Echo(n))
			}
		}
	}
	return TimingErr(c.Timing.ValidateNamed(TimingFlags))
}

// finishGenerator fills in g's max-lead and max-staleness from the node's
// (or their defaults) and checks g against them and the node's workers
// and datacenter.
func (c *Config) finishGenerator(g *GeneratorConfig, now time.Time) error {
	if g.Segment != nil {
		if err := g.Segment.Validate(); err != nil {
			return configErr("generator", "%s: %v", g.Name, err)
		}
		return nil
	}
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
	slots := g.Layout.WorkerLimit() * g.Layout.DatacenterLimit()
	if c.Datacenter >= 0 {
		slots = g.Layout.WorkerLimit()
	}
	if w := c.WorkersFor(); uint64(w) > slots {
		return configErr(c.workersFlag(), "%d is more than generator %s's %d worker IDs", w, g.Name, slots)
	}
	if c.Datacenter >= 0 && uint64(c.Datacenter) >= g.Layout.DatacenterLimit() {
		return configErr("datacenter", "%d does not fit generator %s's %d datacenter bits (max %d)",
			c.Datacenter, g.Name, g.Layout.DatacenterBits, g.Layout.DatacenterLimit()-1)
	}
	return nil
}

// checkLimits checks the node-wide settings, each against its bounds.
func (c *Config) checkLimits() error {
	switch {
	case c.Datacenter < -1:
		return configErr("datacenter", "%d must be -1 or a datacenter value", c.Datacenter)
	case c.Workers < 0 || c.Workers > maxWorkers:
		return configErr("workers", "%d outside [1, %d]", c.Workers, maxWorkers)
	case c.WorkersAuto && c.Workers > 1:
		return configErr("workers", "auto and a number at once")
	case c.MaxWorkers < 0 || c.MaxWorkers > maxWorkers:
		return configErr("max-workers", "%d outside [1, %d]", c.MaxWorkers, maxWorkers)
	case c.MaxWorkers > 0 && !c.WorkersAuto:
		return configErr("max-workers", "needs --workers auto")
	case c.MaxBatch < 1 || c.MaxBatch > 1_000_000:
		return configErr("max-batch", "%d outside [1, 1000000]", c.MaxBatch)
	case c.MaxQueue < time.Millisecond || c.MaxQueue > time.Minute:
		return configErr("max-queue", "%v outside [1ms, 1m]", c.MaxQueue)
	// A float bound is written !(lo <= x && x <= hi): NaN fails every
	// comparison, so it is refused rather than passing both.
	case !(c.ClientRate >= 0 && c.ClientRate <= 1e9):
		return configErr("client-rate", "%g outside [0, 1e9] IDs/s (0: no limit)", c.ClientRate)
	case c.ClientBurst < 0 || c.ClientBurst > 1e9:
		return configErr("client-burst", "%d outside [0, 1e9] IDs (0: one second of --client-rate)", c.ClientBurst)
	case c.ClientBurst > 0 && c.ClientRate == 0:
		return configErr("client-burst", "%d needs --client-rate", c.ClientBurst)
	case c.ClientRate > 0 && !(float64(c.ClientBurstOrDefault())/c.ClientRate <= maxClientRefill):
		// A refusal's wait is up to a burst's refill: beyond this bound
		// it would overflow time.Duration (about 292 years).
		return configErr("client-rate", "%g IDs/s refills a burst of %d IDs in %.3g s, over %g s: at least %g IDs/s for that burst",
			c.ClientRate, c.ClientBurstOrDefault(), float64(c.ClientBurstOrDefault())/c.ClientRate, maxClientRefill, float64(c.ClientBurstOrDefault())/maxClientRefill)
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
	case c.TLS != nil && len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil && c.TLS.GetConfigForClient == nil:
		return configErr("tls-cert", "the TLS configuration holds no certificate")
	case c.ShutdownTimeout <= 0:
		return configErr("shutdown-timeout", "%v must be positive", c.ShutdownTimeout)
	case c.GRPCMaxConnectionAge != 0 && c.GRPCMaxConnectionAge < time.Second:
		return configErr("grpc-max-connection-age", "%v must be 0 (no limit) or at least 1s", c.GRPCMaxConnectionAge)
	case c.HTTPRequestTimeout <= 0:
		return configErr("http-request-timeout", "%v must be positive", c.HTTPRequestTimeout)
	case c.HTTPIdleTimeout <= 0:
		return configErr("http-idle-timeout", "%v must be positive", c.HTTPIdleTimeout)
	case c.FaultClockOffset != 0 && !c.EnableFaultInjection:
		return configErr("fault-clock-offset", "needs --enable-fault-injection")
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

// maxClientRefill bounds, in seconds, the time a --client-rate bucket
// takes to refill a whole burst: the longest wait a refusal can name.
const maxClientRefill = 1e9

// ClientBurstOrDefault is the burst of --client-rate: --client-burst, or
// one second of the rate (at least one ID).
func (c *Config) ClientBurstOrDefault() int {
	if c.ClientBurst > 0 {
		return c.ClientBurst
	}
	return max(int(c.ClientRate), 1)
}

// MaxQueueFor is generator g's queue bound in IDs while it has workers
// serving: MaxQueue at the layout's rate times the workers (at least
// one), and at least one MaxBatchFor(g).
func (c *Config) MaxQueueFor(g GeneratorConfig, workers int) int64 {
	if g.Segment != nil {
		return int64(c.MaxBatchFor(g)) // a segment generator queues nothing
	}
	return max(int64(g.Layout.Rate()*float64(max(workers, 1))*c.MaxQueue.Seconds()), int64(c.MaxBatchFor(g)))
}

// RestoreGuard is how far above the clock a take of a worker on a shared
// coordinator starts, at least (docs/design.md, Restores): above anything
// a holder the coordinator has forgotten could have acknowledged — its
// clock plus the reservation window plus max-lead — on a clock up to
// twice the larger of --max-peer-skew and --max-clock-offset ahead of
// this one. Zero on the node's own embedded coordinator, which nothing
// restores underneath it.
func (c *Config) RestoreGuard(g GeneratorConfig) time.Duration {
	if c.PrivateCoordinator {
		return 0
	}
	return c.Timing.ReservationWindow + g.MaxLead + 2*max(c.MaxPeerSkew, c.MaxClockOffset)
}

// maxWorkers bounds --workers and --max-workers.
const maxWorkers = 256

// defaultMaxWorkers is --max-workers under --workers auto when unset.
const defaultMaxWorkers = 16

// WorkersFor is the most workers a generator holds: --workers, or
// --max-workers under auto.
func (c *Config) WorkersFor() int {
	switch {
	case c.WorkersAuto && c.MaxWorkers > 0:
		return c.MaxWorkers
	case c.WorkersAuto:
		return defaultMaxWorkers
	}
	return max(c.Workers, 1)
}

func (c *Config) workersFlag() string {
	if c.WorkersAuto {
		return "max-workers"
	}
	return "workers"
}

// MaxRangeFor is the largest NextRange count for a generator: what its
// workers produce within max-lead (sequence per unit × units in max-lead ×
// WorkersFor), at most 2^40; for a layout whose sequence lies above the
// node fields (runs of one ID each), at most MaxRangeRuns, so that the
// largest range fits in one response.
func (c *Config) MaxRangeFor(g GeneratorConfig) uint64 {
	if g.Segment != nil {
		return SegmentMaxRange
	}
	most := uint64(1 << 40)
	if g.Layout.Order == generator.SeqNode && g.Layout.DatacenterBits+g.Layout.WorkerBits > 0 {
		most = MaxRangeRuns
	}
	n, ok := perLead(g)
	if !ok {
		return most
	}
	hi, lo := bits.Mul64(n, uint64(c.WorkersFor()))
	if hi != 0 {
		return most
	}
	return min(lo, most)
}

// MaxRangeRuns is the most runs one NextRange response holds: a run is at
// most 15 bytes on the wire (a 10-byte first, a count of 1, their tags and
// the run's own), so that many fit in grpcopt.MaxSendMsgSize (9 MiB), which
// gRPC itself refuses beyond, without firn's ErrorInfo and after the IDs
// were issued.
const MaxRangeRuns = (9 << 20) / 16

// MaxBatchFor is the largest NextIDs count for a generator: min(--max-batch,
// sequence per unit × units in max-lead). Finish refuses a generator whose
// product overflows, so it is never 0.
func (c *Config) MaxBatchFor(g GeneratorConfig) int {
	if g.Segment != nil {
		return c.MaxBatch
	}
	n, ok := perLead(g)
	if !ok {
		return c.MaxBatch
	}
	return int(min(uint64(c.MaxBatch), n))
}

// SegmentMaxRange is the largest NextRange count of a segment generator
// (2^24 IDs): a range larger than what the node holds claimed waits for a
// claim of its own.
const SegmentMaxRange = 1 << 24

// Kind is "seq" for a sequence generator, "segment" for a segment
// generator, "snowflake" otherwise.
func (g GeneratorConfig) Kind() string {
	if g.Segment != nil && g.Segment.IsSeq() {
		return segment.SeqKind
	}
	if g.Segment != nil {
		return segment.Kind
	}
	return "snowflake"
}

// Spec is the generator's definition in canonical form: the layout's, or
// the segment definition's.
// ParseGeneratorDefinition is the generator named name defined by def,
// as --generator NAME=DEF and `firn generator create` take it: a segment
// definition (segment[,start=N][,max=M]), a sequence one
// (seq[,sections=S]), or a layout (a preset or its canonical string).
func ParseGeneratorDefinition(name, def string) (GeneratorConfig, error) {
	switch {
	case segment.IsDefinition(def):
		d, err := segment.ParseDefinition(def)
		if err != nil {
			return GeneratorConfig{}, err
		}
		return GeneratorConfig{Name: name, Segment: &d}, nil
	case seq.IsDefinition(def):
		d, err := seq.ParseDefinition(def)
		if err != nil {
			return GeneratorConfig{}, err
		}
		cd := d.Counter()
		return GeneratorConfig{Name: name, Segment: &cd}, nil
	}
	l, err := generator.ParseLayout(def)
	if err != nil {
		return GeneratorConfig{}, err
	}
	return GeneratorConfig{Name: name, Layout: l}, nil
}

func (g GeneratorConfig) Spec() string {
	if g.Segment != nil {
		return g.Segment.String()
	}
	return g.Layout.String()
}

// perLead is sequence per unit × units in max-lead, and false when it
// overflows 64 bits.
func perLead(g GeneratorConfig) (uint64, bool) {
	hi, lo := bits.Mul64(g.Layout.PerUnit(), uint64(g.MaxLead/g.Layout.Unit))
	return lo, hi == 0
}
