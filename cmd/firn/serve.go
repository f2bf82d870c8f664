package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/embedded"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/coordinator/local"
	"github.com/firnid/firn/server"
)

// serveFlags are the flags of `firn serve` beyond server.Config.
type serveFlags struct {
	config             string
	embeddedClientAddr string
	embeddedPeerAddr   string
	allowShortWindow   bool
}

func newServeFlagSet(cfg *server.Config, sf *serveFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("firn serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: firn serve [flags]\n\nRuns a node. With no --etcd or --zookeeper it runs on the embedded single-node etcd in --data-dir.\nEvery flag is also FIRN_<FLAG> in the environment and a key of the --config YAML file (flag > env > file > default).\n\nFlags:")
		fs.PrintDefaults()
	}
	fs.StringVar(&sf.config, "config", "", "YAML file whose keys are serve flag names")
	cfg.RegisterFlags(fs)
	fs.StringVar(&sf.embeddedClientAddr, "embedded-client-addr", "127.0.0.1:7310", "embedded etcd client listener (loopback)")
	fs.StringVar(&sf.embeddedPeerAddr, "embedded-peer-addr", "127.0.0.1:7311", "embedded etcd peer listener (loopback)")
	fs.BoolVar(&sf.allowShortWindow, "unsafe-allow-short-window", false, "lift the reservation-window relations (tests only; availability, not safety)")
	return fs
}

func cmdServe(args []string, stdout, stderr io.Writer) int {
	cfg := server.DefaultConfig()
	cfg.Version = version
	var sf serveFlags
	fs := newServeFlagSet(&cfg, &sf, stderr)
	if err := parseLayered(fs, args, &sf.config, server.RepeatableFlags, os.Getenv); err != nil {
		if isHelp(err) {
			return exitOK
		}
		return fail(stderr, exitUsage, "serve: %v", err)
	}
	if fs.NArg() > 0 {
		return fail(stderr, exitUsage, "serve: unexpected argument %q", fs.Arg(0))
	}
	if sf.allowShortWindow {
		cfg.AllowShortWindow()
	}

	sys := clockguard.NewSystem()
	var clock clockguard.Clock = sys
	var offset *clockguard.Offset
	if cfg.EnableFaultInjection {
		offset = clockguard.NewOffset(sys, cfg.FaultClockOffset)
		clock = offset
	}
	wall, _ := clock.Now()
	if err := cfg.Finish(wall); err != nil {
		return fail(stderr, exitUsage, "serve: %v", err)
	}
	log := newLogger(stderr, cfg.LogLevel)
	slog.SetDefault(log)

	dd, err := local.Open(cfg.DataDir)
	if err != nil {
		return fail(stderr, exitFailure, "serve: --data-dir: %v", err)
	}
	name := cfg.NodeName
	if name == "" {
		name = defaultNodeName(dd.Dir())
	}

	opts := []server.Option{server.WithLogger(log)}
	if offset != nil {
		opts = append(opts, server.WithOffsetClock(offset))
	}
	var coord coordinator.Coordinator
	var stopEmbedded func()
	timing := coordinator.Timing{LeaseTTL: cfg.LeaseTTL, ReservationWindow: cfg.ReservationWindow,
		Timeout: cfg.CoordinatorTimeout, RefreshInterval: time.Second, AllowShortWindow: sf.allowShortWindow}
	switch {
	case len(cfg.ZooKeeper) > 0:
		c, err := connect(func() (coordinator.Backend, error) { return newZooKeeper(cfg, timing, clock, log) }, log)
		if err != nil {
			return fail(stderr, exitFailure, "serve: --zookeeper: %v", err)
		}
		coord = c
		opts = append(opts, server.WithCoordinatorName("zookeeper "+strings.Join(cfg.ZooKeeper, ",")))
	default:
		endpoints := cfg.Etcd
		coordName := "etcd " + strings.Join(endpoints, ",")
		if cfg.Embedded() {
			es, err := embedded.Start(embedded.Config{DataDir: cfg.DataDir, ClientAddr: sf.embeddedClientAddr,
				PeerAddr: sf.embeddedPeerAddr, AcceptMoved: cfg.AcceptMovedDataDir, Logger: log})
			if err != nil {
				return fail(stderr, exitFailure, "serve: embedded etcd: %v", err)
			}
			stopEmbedded = func() { es.Close() }
			url := es.ClientURL()
			endpoints = []string{url}
			coordName = "embedded etcd " + url
			opts = append(opts, server.WithEmbeddedURL(url))
			fmt.Fprintf(stdout, "firn: embedded etcd at %s (a second local node joins with --etcd %s; two embedded coordinators are two separate ID spaces)\n", url, url)
		}
		ec := etcd.DefaultConfig()
		ec.Endpoints = endpoints
		ec.Prefix = strings.Trim(cfg.EtcdPrefix, "/")
		ec.Cluster = cfg.Cluster
		ec.Username, ec.Password = cfg.EtcdUser, cfg.EtcdPassword
		ec.CAFile, ec.CertFile, ec.KeyFile = cfg.EtcdCA, cfg.EtcdCert, cfg.EtcdKey
		ec.Timing = timing
		ec.Clock = clock
		ec.Logger = log
		c, err := connect(func() (coordinator.Backend, error) { return etcd.New(ec) }, log)
		if err != nil {
			if stopEmbedded != nil {
				stopEmbedded()
			}
			return fail(stderr, exitFailure, "serve: --etcd: %v", err)
		}
		coord = c
		opts = append(opts, server.WithCoordinatorName(coordName))
	}
	defer func() {
		coord.Close()
		if stopEmbedded != nil {
			stopEmbedded()
		}
	}()

	node, err := server.New(cfg, coord, dd, clock, name, opts...)
	if err != nil {
		return fail(stderr, exitUsage, "serve: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := node.Start(ctx); err != nil {
		return fail(stderr, exitFailure, "serve: %v", err)
	}
	fmt.Fprintf(stdout, "firn: node %s serving gRPC on %s, HTTP on %s (status page http://%s/)\n",
		name, node.GRPCAddr(), node.HTTPAddr(), node.HTTPAddr())
	<-ctx.Done()
	stop()
	log.Info("signal received: draining", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := node.Shutdown(sctx); err != nil {
		return fail(stderr, exitFailure, "serve: shutdown: %v", err)
	}
	return exitOK
}

// connect dials the coordinator. A configuration error fails at once; an
// unreachable coordinator does not: the node starts, does not serve, says
// why (its generators' reason names the coordinator), and keeps dialling.
func connect(dial func() (coordinator.Backend, error), log *slog.Logger) (coordinator.Coordinator, error) {
	c, err := dial()
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, coordinator.ErrUnavailable):
		log.Warn("coordinator unreachable at start: not serving until it answers", "err", err)
		return coordinator.NewLazy(func(context.Context) (coordinator.Backend, error) { return dial() }, time.Second, err), nil
	}
	return nil, err
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// defaultNodeName is the hostname plus a short hash of the data dir path.
func defaultNodeName(dataDir string) string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "node"
	}
	sum := sha256.Sum256([]byte(dataDir))
	return h + "-" + hex.EncodeToString(sum[:])[:6]
}
