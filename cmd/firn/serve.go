package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/datadir"
	"github.com/firnid/firn/internal/gcpace"
	"github.com/firnid/firn/server"
)

// cmdServe runs `firn serve`: the flags, environment and --config file
// become the node's configuration (serveConfig.finish), the coordinator is
// opened (openCoordinator, as for the admin commands), and the node runs
// until SIGTERM or SIGINT, then drains.
func cmdServe(args []string, stdout, stderr io.Writer) int {
	sc := defaultServeConfig()
	fs := newServeFlagSet(&sc, stdout)
	if err := sc.parse(fs, args, os.Getenv); err != nil {
		if isHelp(err) {
			return exitOK
		}
		return fail(stderr, exitUsage, "serve: %v", err)
	}
	if fs.NArg() > 0 {
		return fail(stderr, exitUsage, "serve: %v", unexpectedArg(fs, 0))
	}

	sys := clockguard.NewSystem()
	var clock clockguard.Clock = sys
	var offset *clockguard.Offset
	if sc.node.EnableFaultInjection {
		offset = clockguard.NewOffset(sys, sc.node.FaultClockOffset)
		clock = offset
	}
	wall, _ := clock.Now()
	cfg, err := sc.finish(wall)
	if err != nil {
		return fail(stderr, exitUsage, "serve: %v", err)
	}
	log := newLogger(stderr, sc.logLevel)
	slog.SetDefault(log)
	if sc.certs != nil {
		sc.certs.OnReload(logReload(log, "TLS certificate", sc.tlsCert))
	}
	if sc.clientCAs != nil {
		sc.clientCAs.OnReload(logReload(log, "TLS client CA", sc.tlsClientCA))
	}

	dd, err := datadir.Open(sc.dataDir)
	if err != nil {
		return fail(stderr, exitFailure, "serve: --data-dir: %v", err)
	}
	lock, err := lockDataDir(sc.dataDir, sc.coord.embedded())
	if err != nil {
		return fail(stderr, exitFailure, "serve: --data-dir: %v", err)
	}
	defer lock.Close()
	name := sc.nodeName
	if name == "" {
		name = defaultNodeName(dd.Dir())
	}

	coord, err := openCoordinator(sc.coord, forNode, openEnv{clock: clock, log: log, dataDir: sc.dataDir, stdout: stdout})
	if err != nil {
		return fail(stderr, exitFailure, "serve: %v", err)
	}
	defer coord.Close()
	opts := []server.Option{server.WithLogger(log), server.WithCoordinatorName(coord.name)}
	if coord.embeddedURL != "" {
		opts = append(opts, server.WithEmbeddedURL(coord.embeddedURL))
		cfg.PrivateCoordinator = true
	}
	if offset != nil {
		opts = append(opts, server.WithOffsetClock(offset))
	}

	node, err := server.New(cfg, coord.Backend, dd, clock, name, opts...)
	if err != nil {
		return fail(stderr, exitUsage, "serve: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := node.Start(ctx); err != nil {
		return fail(stderr, exitFailure, "serve: %v", err)
	}
	if gcpace.Start(ctx, gcpace.DefaultMinGrowth) {
		log.Debug("GOGC paced from the live heap (set GOGC to choose it yourself)", "min_growth_mib", gcpace.DefaultMinGrowth>>20)
	}
	if sc.pprofAddr != "" {
		stopProf, err := servePprof(sc.pprofAddr, log)
		if err != nil {
			return fail(stderr, exitFailure, "serve: --pprof-addr: %v", err)
		}
		defer stopProf()
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

// logReload is a certfile reload report as a log line: what was read
// again from file, or why the changed file was not taken.
func logReload(log *slog.Logger, what, file string) func(error) {
	return func(err error) {
		if err != nil {
			log.Warn(what+" file changed but does not load", "err", err)
			return
		}
		log.Info(what+" reloaded for new connections", "file", file)
	}
}

// logLevels are the --log-level values.
var logLevels = []string{"debug", "info", "warn", "error"}

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

// defaultNodeName is the hostname plus a short hash of the data dir's
// absolute path: a relative one (the default firn-data) names another
// directory from each working directory, and two nodes of one machine on
// two data dirs must not share a name (the coordinator refuses a name
// another instance holds).
func defaultNodeName(dataDir string) string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "node"
	}
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	sum := sha256.Sum256([]byte(dataDir))
	return h + "-" + hex.EncodeToString(sum[:])[:6]
}

// servePprof serves net/http/pprof on addr until the returned stop.
func servePprof(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// Held to loopback, and answering local callers alone: a page that
	// rebinds its own name to 127.0.0.1 would otherwise read
	// /debug/pprof/cmdline, credentials given as flags included.
	srv := &http.Server{Handler: server.LocalOnly("the profiler", mux), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	log.Info("profiler serving", "addr", ln.Addr().String())
	return func() { srv.Close() }, nil
}
