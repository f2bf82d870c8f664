package main

import (
	"crypto/tls"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/certfile"
	"github.com/firnid/firn/server/core"
)

// serveConfig is everything `firn serve` reads from its flags, the FIRN_*
// environment and the --config file: what the node consumes
// (core.Config), the coordinator (shared with the admin commands), and
// what the binary itself uses (data dir, node name, files, log level, the
// rules that lift loopback-only listeners). finish turns it into the
// node's core.Config.
type serveConfig struct {
	node  core.Config
	coord coordConfig

	// config is the --config file.
	config string
	// dataDir holds the node's identity, its own last reservations and,
	// with the embedded coordinator, the etcd data.
	dataDir string
	// nodeName is a label (default hostname plus a short hash of the data
	// dir); never a credential.
	nodeName string
	// generators are the raw --generator values, name=layout.
	generators []string
	// allowCallers are the raw --allow-callers values, generator=caller.
	allowCallers []string
	// ntpRequiredSet records an explicit --ntp-required (default: true
	// when --ntp is set).
	ntpRequiredSet bool
	// TLS files for gRPC and HTTP: certificate and key; a client CA turns
	// on mTLS.
	tlsCert, tlsKey, tlsClientCA string
	// certs is the node's key pair once finish loaded it (reloaded when
	// its files change).
	certs     *certfile.KeyPair
	clientCAs *certfile.Pool
	// pprofAddr serves net/http/pprof (loopback only; "" off).
	pprofAddr string
	// workers is --workers: a number, or auto.
	workers string
	// embeddedServeRemote and faultAddrAllowRemote lift the loopback rule
	// of the listeners.
	embeddedServeRemote  bool
	faultAddrAllowRemote bool
	// logLevel: debug, info, warn, error.
	logLevel string
}

// defaultServeConfig returns the defaults of `firn serve`: the node's own
// (core.DefaultConfig) and those of the binary.
func defaultServeConfig() serveConfig {
	node := core.DefaultConfig()
	b := readBuild()
	node.Version, node.Revision, node.Modified = b.Version, b.Revision, b.Modified
	return serveConfig{
		node:     node,
		coord:    defaultCoordConfig(),
		dataDir:  "firn-data",
		logLevel: "info",
	}
}

// serveHelp heads `firn serve --help`.
const serveHelp = `Usage: firn serve [flags]

Runs a node. With no --etcd or --zookeeper it runs on the embedded single-node etcd in --data-dir.
Every flag is also FIRN_<FLAG> in the environment (dashes become underscores) and a key of the
--config YAML file (flag > env > file > default). A list (--etcd, --zookeeper, --ntp, --admin-names,
--generator) is the flag repeated, or items separated by commas (FIRN_ETCD=a:2379,b:2379), or a
YAML list in the file.`

// serveGroups are the help's headings after the essential flags.
var serveGroups = []helpGroup{
	{"Coordinator:", append(slices.Clip(coordDetailFlags), "embedded-peer-addr", "accept-moved-data-dir")},
	{"Limits and operations:", []string{"datacenter", "workers", "max-workers", "max-batch", "client-rate", "client-burst", "max-queue",
		"ring-size", "shutdown-timeout", "http-request-timeout", "http-idle-timeout", "grpc-max-connection-age", "pprof-addr"}},
	{"Clock:", []string{"max-lead", "max-staleness", "max-clock-offset", "ntp-required", "ntp-interval", "max-peer-skew", "rollback-recovery"}},
	{testingHeading, []string{"unchecked-clock-ok", "embedded-serve-remote", "enable-fault-injection", "fault-addr", "fault-addr-allow-remote", "fault-clock-offset"}},
}

// newServeFlagSet defines every serve flag on a new flag set, writing into
// sc (whose values are the defaults shown); --help goes to stdout.
func newServeFlagSet(sc *serveConfig, stdout io.Writer) *pflag.FlagSet {
	fs := newFlagSet("firn serve", serveHelp, stdout, serveGroups...)
	c := &sc.node
	// The essential flags first: those of no help group.
	fs.StringVar(&sc.config, "config", "", "YAML file whose keys are serve flag names")
	fs.StringVar(&sc.dataDir, "data-dir", sc.dataDir, "node state directory (identity, reservations, embedded etcd)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address (API, /metrics, /healthz, /readyz, status page)")
	fs.StringVar(&c.AdvertiseAddr, "advertise-addr", c.AdvertiseAddr, "the gRPC address clients reach this node at (host:port), by which other nodes name it as a sequence section's owner (default: --grpc-addr; set it when --grpc-addr is a wildcard, e.g. from the pod's IP)")
	fs.Var(listFlag{&sc.generators, splitGenerators}, "generator", "name=layout (preset or canonical string), or name=segment[,start=N][,max=M] for dense IDs from a counter, or name=seq[,sections=S] for per-key sequences; a list: the first is the default (default default=snowflake)")
	sc.coord.register(fs)
	fs.StringVar(&sc.nodeName, "node-name", sc.nodeName, "node name label (default hostname plus a short hash of the data dir)")
	fs.Var(listFlag{&c.NTP, commaItems}, "ntp", "NTP servers, a list of host[:port] (none: drift unchecked)")
	fs.StringVar(&sc.tlsCert, "tls-cert", sc.tlsCert, "TLS certificate for gRPC and HTTP")
	fs.StringVar(&sc.tlsKey, "tls-key", sc.tlsKey, "TLS key for gRPC and HTTP")
	fs.StringVar(&sc.tlsClientCA, "tls-client-ca", sc.tlsClientCA, "CA that client certificates must chain to (turns on mTLS)")
	fs.Var(listFlag{&c.AdminNames, commaItems}, "admin-names", "client certificate names (CN or DNS SAN) allowed to call the admin endpoints over mTLS, a list")
	fs.Var(listFlag{&sc.allowCallers, commaItems}, "allow-callers", "generator=name pairs, a list: a generator named here serves only the client certificates (CN or DNS SAN) named for it, over mTLS; others get PERMISSION_DENIED (default: every caller)")
	fs.StringVar(&sc.logLevel, "log-level", sc.logLevel, "debug, info, warn or error")

	sc.coord.registerEmbeddedStart(fs)
	fs.Int64Var(&c.Datacenter, "datacenter", c.Datacenter, "fix the datacenter field (-1: allocated with the worker ID)")
	fs.StringVar(&sc.workers, "workers", "1", "worker IDs each generator holds: a number (K × the layout's rate, in per-node order), or auto (leases more while the rate stays above 80% of what it holds, up to --max-workers; releases them after a minute that fits fewer)")
	fs.IntVar(&c.MaxWorkers, "max-workers", c.MaxWorkers, "under --workers auto, the most workers a generator holds (0: 16)")
	fs.IntVar(&c.MaxBatch, "max-batch", c.MaxBatch, "largest NextIDs count (also bounded by sequence × units in max-lead)")
	fs.Float64Var(&c.ClientRate, "client-rate", c.ClientRate, "per generator, the most IDs/s one client (its certificate name under mTLS, else its gRPC connection or HTTP remote host) may take; beyond it a request is refused at once (RESOURCE_EXHAUSTED); 0: no limit")
	fs.IntVar(&c.ClientBurst, "client-burst", c.ClientBurst, "the IDs a client may take at once under --client-rate (0: one second of the rate)")
	fs.DurationVar(&c.MaxQueue, "max-queue", c.MaxQueue, "per generator, the most IDs asked for and not yet produced, as time at the layout's rate (at least one max batch); beyond it a request is refused at once (RESOURCE_EXHAUSTED)")
	fs.DurationVar(&c.MaxLead, "max-lead", c.MaxLead, "how far IDs' time may run ahead of the clock (0: max(1s, 2 units) per generator)")
	fs.DurationVar(&c.MaxStaleness, "max-staleness", c.MaxStaleness, "oldest a buffered ID may be when handed out (0: max(100ms, 2 units) per generator)")
	fs.DurationVar(&c.MaxClockOffset, "max-clock-offset", c.MaxClockOffset, "NTP offset beyond which the node does not serve")
	fs.BoolVar(&c.NTPRequired, "ntp-required", c.NTPRequired, "unreachable NTP blocks serving (default true when --ntp is set)")
	fs.DurationVar(&c.NTPInterval, "ntp-interval", c.NTPInterval, "how often NTP is checked")
	fs.DurationVar(&c.MaxPeerSkew, "max-peer-skew", c.MaxPeerSkew, "clock skew from the peer median beyond which an outlier stops serving")
	fs.BoolVar(&c.UncheckedClockOK, "unchecked-clock-ok", c.UncheckedClockOK, "serve while nothing checks the clock (no NTP answering and fewer than 3 live nodes for the peer check); without it such a node does not serve (CLOCK_UNCHECKED). The embedded coordinator needs no such flag")
	fs.StringVar(&c.RollbackRecovery, "rollback-recovery", c.RollbackRecovery, "after a clock rollback beyond max-lead: auto or manual (POST /admin/resume)")
	fs.IntVar(&c.RingSize, "ring-size", c.RingSize, "ring buffer slots per generator (power of two)")
	fs.BoolVar(&c.EnableFaultInjection, "enable-fault-injection", c.EnableFaultInjection, "serve the fault-injection listener (chaos tests only)")
	fs.StringVar(&sc.pprofAddr, "pprof-addr", sc.pprofAddr, "serve Go's profiler (net/http/pprof) on this loopback address, for profiling a node under load; off when empty")
	fs.StringVar(&c.FaultAddr, "fault-addr", c.FaultAddr, "fault-injection listen address")
	fs.BoolVar(&sc.faultAddrAllowRemote, "fault-addr-allow-remote", sc.faultAddrAllowRemote, "allow a non-loopback --fault-addr")
	fs.DurationVar(&c.FaultClockOffset, "fault-clock-offset", c.FaultClockOffset, "clock offset from the first read (needs --enable-fault-injection)")
	fs.BoolVar(&sc.embeddedServeRemote, "embedded-serve-remote", sc.embeddedServeRemote, "allow non-loopback listeners on the embedded coordinator")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "longest graceful drain on SIGTERM")
	fs.DurationVar(&c.HTTPRequestTimeout, "http-request-timeout", c.HTTPRequestTimeout, "the server's deadline for an HTTP ID request")
	fs.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", c.HTTPIdleTimeout, "close a keep-alive HTTP connection idle this long (reading a request is bounded at 10 s, writing an answer at --http-request-timeout + 5 s)")
	fs.DurationVar(&c.GRPCMaxConnectionAge, "grpc-max-connection-age", c.GRPCMaxConnectionAge, "ask a client connection older than this to reconnect, so clients rebalance over nodes (0: never)")
	return fs
}

// parse reads args, then the environment (getenv), then the --config
// file into sc, as parseLayered layers them; fs is sc's newServeFlagSet.
func (sc *serveConfig) parse(fs *pflag.FlagSet, args []string, getenv func(string) string) error {
	if err := parseLayered(fs, args, &sc.config, layering{}, getenv); err != nil {
		return err
	}
	sc.ntpRequiredSet = fs.Changed("ntp-required")
	return nil
}

// serveFlagNames are the names of every serve flag: the keys a --config
// file may hold.
func serveFlagNames() map[string]bool {
	sc := defaultServeConfig()
	names := map[string]bool{}
	newServeFlagSet(&sc, io.Discard).VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
	return names
}

// finish checks what the binary owns (data dir, listeners' loopback rule,
// TLS files, the coordinator flags), turns the flags into the node's
// configuration, and has the node validate the rest (core.Config.Finish);
// now is the clock reading layouts are validated against. Every refusal
// names the flag.
func (sc *serveConfig) finish(now time.Time) (core.Config, error) {
	c := sc.node
	switch w := sc.workers; {
	case w == "auto":
		c.WorkersAuto = true
	default:
		n, err := strconv.Atoi(w)
		if err != nil || n < 1 {
			return c, flagErr("workers", "%q is neither auto nor a number of workers from 1", w)
		}
		c.Workers = n
	}
	if sc.dataDir == "" {
		return c, flagErr("data-dir", "must be set")
	}
	if !slices.Contains(logLevels, strings.ToLower(sc.logLevel)) {
		return c, flagErr("log-level", "%q is not one of %s", sc.logLevel, strings.Join(logLevels, ", "))
	}
	if err := sc.coord.validate(); err != nil {
		return c, err
	}
	c.Cluster = sc.coord.Cluster
	c.Timing = sc.coord.timing()

	seen := map[string]bool{}
	for _, s := range sc.generators {
		name, layout, ok := strings.Cut(s, "=")
		name = strings.TrimSpace(name)
		if !ok || !validGeneratorName(name) {
			return c, flagErr("generator", "%q is not name=layout (name %s)", s, generatorNameRule)
		}
		if seen[name] {
			return c, flagErr("generator", "name %q given twice", name)
		}
		seen[name] = true
		g, err := parseGeneratorDef(name, layout)
		if err != nil {
			return c, flagErr("generator", "%s: %v", name, err)
		}
		c.Generators = append(c.Generators, g)
	}
	if err := sc.applyAllowCallers(&c); err != nil {
		return c, err
	}
	if !sc.ntpRequiredSet {
		c.NTPRequired = len(c.NTP) > 0
	}

	listeners := loopbackRule{lifted: !sc.coord.embedded() || sc.embeddedServeRemote,
		why: "on the embedded coordinator every node is its own ID space, so serving remote clients needs --embedded-serve-remote (or point the node at --etcd/--zookeeper)"}
	for _, a := range []struct{ flag, addr string }{{"grpc-addr", c.GRPCAddr}, {"http-addr", c.HTTPAddr}} {
		if err := listeners.check(a.flag, a.addr); err != nil {
			return c, err
		}
	}
	if sc.pprofAddr != "" {
		if err := (loopbackRule{why: "the profiler shows the process's memory"}).check("pprof-addr", sc.pprofAddr); err != nil {
			return c, err
		}
	}
	if c.EnableFaultInjection {
		fault := loopbackRule{lifted: sc.faultAddrAllowRemote,
			why: "whoever reaches the fault listener moves this node's clock, so a remote one needs --fault-addr-allow-remote"}
		if err := fault.check("fault-addr", c.FaultAddr); err != nil {
			return c, err
		}
	}

	tc, kp, cas, err := serverTLS(sc.tlsCert, sc.tlsKey, sc.tlsClientCA)
	if err != nil {
		return c, err
	}
	c.TLS, sc.certs, sc.clientCAs = tc, kp, cas
	if err := c.Finish(now); err != nil {
		return c, err
	}
	return c, nil
}

// generatorNameRule is what validGeneratorName checks, for messages.
const generatorNameRule = "1..64 characters, no '/' or spaces"

// validGeneratorName is the rule of a generator's name, wherever one is
// given (--generator NAME=..., firn generator create NAME).
func validGeneratorName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "/ \t") && len(name) <= 64
}

// parseGeneratorDef reads the definition of generator name, as
// --generator NAME=DEFINITION and firn generator create NAME DEFINITION
// take it: a segment definition, a seq definition, or a layout (a preset
// or a canonical layout string).
func parseGeneratorDef(name, def string) (core.GeneratorConfig, error) {
	return core.ParseGeneratorDefinition(name, def)
}

// serverTLS loads the TLS configuration of gRPC and HTTP from the files of
// --tls-cert, --tls-key and --tls-client-ca; nil without --tls-cert.
func serverTLS(certFile, keyFile, clientCAFile string) (*tls.Config, *certfile.KeyPair, *certfile.Pool, error) {
	switch {
	case (certFile == "") != (keyFile == ""):
		return nil, nil, nil, flagErr("tls-cert", "--tls-cert and --tls-key go together")
	case clientCAFile != "" && certFile == "":
		return nil, nil, nil, flagErr("tls-client-ca", "needs --tls-cert and --tls-key")
	case certFile == "":
		return nil, nil, nil, nil
	}
	// The pair and the client CA are read again whenever their files
	// change (a renewal), for the next handshake; established connections
	// are left alone.
	kp, err := certfile.Load(certFile, keyFile)
	if err != nil {
		return nil, nil, nil, flagErr("tls-cert", "%v", err)
	}
	c := &tls.Config{GetCertificate: kp.GetCertificate, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if clientCAFile == "" {
		return c, kp, nil, nil
	}
	cas, err := certfile.LoadPool(clientCAFile)
	if err != nil {
		return nil, nil, nil, flagErr("tls-client-ca", "%v", err)
	}
	c.ClientCAs = cas.Current()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	base := c.Clone()
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cc := base.Clone()
		cc.ClientCAs = cas.Current()
		return cc, nil
	}
	return c, kp, cas, nil
}

// applyAllowCallers gives each generator named in --allow-callers its
// allow list (core.GeneratorConfig.Allow): items generator=caller, a
// generator named once per caller. A generator the node does not run is
// refused, naming it; so is a caller named twice for one generator.
func (sc *serveConfig) applyAllowCallers(c *core.Config) error {
	if len(sc.allowCallers) == 0 {
		return nil
	}
	index := map[string]int{}
	for i, g := range c.Generators {
		index[g.Name] = i
	}
	implied := len(c.Generators) == 0 // Finish adds default=snowflake
	var defaultAllow []string
	for _, it := range sc.allowCallers {
		gen, caller, ok := strings.Cut(it, "=")
		gen, caller = strings.TrimSpace(gen), strings.TrimSpace(caller)
		if !ok || gen == "" || caller == "" {
			return flagErr("allow-callers", "%q is not generator=caller", it)
		}
		var list *[]string
		switch i, ok := index[gen]; {
		case ok:
			list = &c.Generators[i].Allow
		case implied && gen == "default":
			list = &defaultAllow
		default:
			return flagErr("allow-callers", "%q: this node runs no generator %q (--generator)", it, gen)
		}
		if slices.Contains(*list, caller) {
			return flagErr("allow-callers", "%q: caller %q named twice for generator %q", it, caller, gen)
		}
		*list = append(*list, caller)
	}
	if implied {
		l, _ := generator.Preset("snowflake")
		c.Generators = []core.GeneratorConfig{{Name: "default", Layout: l, Allow: defaultAllow}}
	}
	return nil
}
