package load

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"math"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/firnid/firn/client"
	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/seq"
)

// Exit codes of Main.
const (
	exitOK        = 0
	exitFailed    = 1 // the run could not be made
	exitUsage     = 2 // bad flags
	exitDuplicate = 3 // the run received the same ID twice, or a key's sequence broke its rules
)

const minPairs = 5

// maxRangeBatch bounds --batch in ranges mode; the node's own bound is its
// generator's max_range (Info), checked before each run.
const maxRangeBatch = 1 << 40

// Report is what Main prints with --json: one of Run, Compare or Idle.
type Report struct {
	Run      *Result     `json:"run,omitempty"`
	Compare  *Comparison `json:"compare,omitempty"`
	Idle     *IdleResult `json:"idle,omitempty"`
	Overload *Overload   `json:"overload,omitempty"`
	Pin      string      `json:"pin,omitempty"`
}

// Comparison is node-versus-noop over interleaved pairs of runs.
type Comparison struct {
	Pairs  []Pair `json:"pairs"`
	Median Ratios `json:"median"`
	// Interval is where the medians of throughput and CPU per call lie,
	// from the spread of the pairs.
	Interval Interval `json:"median_interval"`
	// SelfCheck: the target was a second no-op server (--target noop):
	// the ratios are the method's own noise on this machine.
	SelfCheck bool `json:"self_check,omitempty"`
	// NoopHeap is the live heap the no-op server ran with (--noop-heap),
	// NoopHeapFrom where that figure came from, NoopHeapOwn the server's
	// own part of it (the rest it held; -1: it did not say).
	NoopHeap     int64  `json:"noop_heap_bytes"`
	NoopHeapFrom string `json:"noop_heap_from"`
	NoopHeapOwn  int64  `json:"noop_heap_own_bytes"`
	// NoopGOGC is the GOGC the no-op server ran at: the node's, read
	// with its heap (0: the no-op's runtime default).
	NoopGOGC int `json:"noop_gogc,omitempty"`
}

// Pair is one node run and the noop run after it, with their ratios.
type Pair struct {
	Node   *Result `json:"node"`
	Noop   *Result `json:"noop"`
	Ratios Ratios  `json:"ratios"`
}

// Ratios are node / noop.
type Ratios struct {
	RPC  float64 `json:"rpc_per_s"`
	IDs  float64 `json:"ids_per_s"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	// CPUPerCall is the servers' CPU per call (ServerCPU), where both
	// PIDs were known.
	CPUPerCall float64 `json:"server_cpu_per_call,omitempty"`
}

// IdleResult is a process's CPU and memory over a window without calls.
type IdleResult struct {
	PID         int     `json:"pid"`
	Seconds     float64 `json:"seconds"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	CPUPercent  float64 `json:"cpu_percent"` // of one core
	RSSMaxBytes int64   `json:"rss_max_bytes"`
	RSSEndBytes int64   `json:"rss_end_bytes"`
	// Switches is the context switches of the process's threads over the
	// window, per second: its wake-ups.
	Switches float64 `json:"context_switches_per_second"`
}

type flags struct {
	target, generator, mode, compare      string
	batch, callers, conns, pairs, pid     int
	duration, warmup, idle, timeout       time.Duration
	pin, json, quiet                      bool
	tlsCA, tlsCert, tlsKey, tlsServerName string
	noopTLS, noopHeap                     string
	record                                int
	floodCallers, floodConns, floodBatch  int
	ignoreRetry                           bool
	ignorePause                           time.Duration
	noopDupAt                             uint64
	nodeMetrics                           string
	keys, seqRecord                       int
	keyDist                               string
	seed                                  uint64
	batchSet                              bool // --batch given (the sequence modes' defaults differ)
}

// Main is `firn bench`: args are those after "bench". It writes the
// report to stdout and progress to stderr, and returns the exit code: 0,
// 1 when the run could not be made or a NextRange response broke its
// contract, 2 for bad flags, 3 when an ID was received twice. With
// NoopCommand as args[0] it runs the no-op server instead (NoopMain). In
// the sequence modes 3 also means a key's values broke seqcheck's rules
// (a value twice, or out of real-time order).
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == NoopCommand {
		return NoopMain(args[1:], stdout, stderr)
	}
	if _, ok := stderr.(*os.File); !ok {
		// The progress lines and the no-op children's own (copied by
		// os/exec, one goroutine each) share it.
		stderr = &lockedWriter{w: stderr}
	}
	var f flags
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprint(stdout, benchUsage)
		fs.PrintDefaults()
	}
	f.define(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "bench: %v (firn bench --help lists the flags)\n", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	fs.Visit(func(fl *pflag.Flag) { f.batchSet = f.batchSet || fl.Name == "batch" })
	f.defaults()
	if err := f.validate(); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	progress := stderr
	if f.quiet {
		progress = nil
	}
	rep, err := execute(ctx, &f, progress, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return exitFailed
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return exitFailed
		}
	} else {
		writeText(stdout, rep)
	}
	if rep.duplicates() > 0 {
		fmt.Fprintf(stderr, "bench: DUPLICATE IDs received: %d\n", rep.duplicates())
		return exitDuplicate
	}
	if n, samples := rep.seqViolations(); n > 0 {
		fmt.Fprintf(stderr, "bench: SEQUENCE VIOLATIONS: %d (internal/seqcheck; the first %d):\n", n, len(samples))
		for _, s := range samples {
			fmt.Fprintf(stderr, "bench:   %s\n", s)
		}
		return exitDuplicate
	}
	if m := rep.malformed(); m > 0 {
		fmt.Fprintf(stderr, "bench: MALFORMED responses (NextRange runs, or NextSeq/NextSeqs counts): %d\n", m)
		return exitFailed
	}
	return exitOK
}

// benchUsage heads `firn bench -h`, before the flags.
const benchUsage = `Usage: firn bench [flags]

Drives a firn node's gRPC API (or the no-op floor server, --target noop, a
child process serving the same API with the same gRPC server options) with
K callers over C connections and reports RPC/s, IDs/s, latency
percentiles, errors by gRPC code and duplicate IDs received.

--mode ranges calls NextRange with count --batch: the IDs come as runs of
consecutive IDs, and every one of them is checked for duplicates (as
intervals, so --record does not bound it); --batch may go up to the
generator's max_range (Info). It also reports IDs/s over the generator's
capacity: its workers (Info) times the layout's rate. With
--compare noop the no-op server takes the node's layout, workers and
max_range, and cuts its runs as the node would.

  firn bench --target 127.0.0.1:7300 --callers 16 --conns 4 --duration 10s
  firn bench --target 127.0.0.1:7300 --mode batch --batch 1000 --callers 8
  firn bench --target 127.0.0.1:7300 --mode ranges --batch 100000 --callers 8 --compare noop
  firn bench --target 127.0.0.1:7300 --compare noop --pin --callers 64 --conns 4
  firn bench --target 127.0.0.1:7300 --idle 60s
  firn bench --target 127.0.0.1:7300 --flood-callers 512 --flood-conns 32 --flood-batch 100000
  firn bench --target 127.0.0.1:7300 --generator orders --mode ranges --batch 1000000 --callers 8 \
      --compare noop --node-metrics http://127.0.0.1:7301/metrics

Each run reports the server's CPU per call where its PID is known (the
no-op child; the node by --pid or its loopback port). Against a segment
generator the no-op server hands out one run per NextRange call, as the
node does, and --node-metrics reports the node's counter writes (claims)
per second over each window.

--compare noop runs the pairs in alternating order and reports, beside
each median, the interval it lies in from the pairs' spread. With
--target noop the target is a second no-op server: every ratio is then 1
but for the method's own noise on this machine (a self check).

  firn bench --target noop --compare noop --callers 64 --conns 4 --pairs 9

--mode seq calls NextSeq of a sequence generator (--generator NAME=seq on
the node) with count --batch (default 1) on keys drawn from --keys
(--key-dist uniform or zipf); --mode seqs calls NextSeqs with --batch keys
(default 100) per call and reports values/s beside RPC/s. Each key goes to
its section's owner, from the section map of --target's Info (any one
node; the others are learned from it), and a WRONG_NODE refusal is
followed to the owner it names: the report counts those (0 in steady
state) and SECTION_MOVING refusals. Every response of the window (up to
--seq-record) goes through the per-key checker (internal/seqcheck): a
value twice for a key, or a call that returned before another began
without smaller values, exits 3 naming them. --compare noop runs the
no-op server as a sequence generator owning every section (a counter, no
per-key state); --node-metrics adds the node's writes of its sections'
maxima per second and the keys it keeps.

  firn bench --target 127.0.0.1:7300 --generator chats --mode seq --callers 16 --conns 4
  firn bench --target 127.0.0.1:7300 --generator chats --mode seqs --batch 100 --key-dist zipf \
      --compare noop --node-metrics http://127.0.0.1:7301/metrics

`

// define defines f's flags on fs.
func (f *flags) define(fs *pflag.FlagSet) {
	fs.StringVar(&f.target, "addr", "127.0.0.1:7300", "node gRPC address (host:port), or noop for the no-op floor server")
	fs.StringVar(&f.target, "target", "127.0.0.1:7300", "the older name of --addr")
	fs.StringVar(&f.generator, "generator", "", "generator name (empty: the node's default)")
	fs.StringVar(&f.mode, "mode", modeUnary, "unary (NextID), batch (NextIDs --batch N), prefetch (the Go client's Next), ranges (NextRange --batch N), seq (NextSeq, count --batch) or seqs (NextSeqs of --batch keys)")
	fs.IntVar(&f.batch, "batch", 1000, "count of each call: NextIDs in batch mode, NextRange in ranges mode, NextSeq in seq mode (default there 1), keys per NextSeqs in seqs mode (default there 100)")
	fs.IntVar(&f.callers, "callers", 1, "concurrent callers K")
	fs.IntVar(&f.conns, "conns", 1, "connections C (prefetch mode: clients), shared round-robin by the callers")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "measured window of each run")
	fs.DurationVar(&f.warmup, "warmup", time.Second, "unmeasured warmup before each run")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "per-call timeout")
	fs.StringVar(&f.compare, "compare", "", "noop: run the target and the no-op server in interleaved pairs and report ratios (with --target noop: a second no-op server, the method's own noise)")
	fs.IntVar(&f.pairs, "pairs", minPairs, "pairs of runs with --compare (the ratios are their median; at least 5)")
	fs.BoolVar(&f.pin, "pin", false, "put the server (no-op child, and the node when its PID is known) and the load on separate CPUs")
	fs.DurationVar(&f.idle, "idle", 0, "measure the target process's CPU and RSS over this window without calls")
	fs.IntVar(&f.pid, "pid", 0, "PID of the node (for --idle and --pin; default: found by the target's port)")
	fs.BoolVar(&f.json, "json", false, "print the report as JSON")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress lines")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "CA of the node's certificate (PEM): dial with TLS")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "client certificate (PEM) for mTLS, with --tls-key")
	fs.StringVar(&f.tlsKey, "tls-key", "", "client key (PEM)")
	fs.StringVar(&f.tlsServerName, "tls-server-name", "", "name to check in the node's certificate")
	fs.StringVar(&f.noopTLS, "noop-tls", "auto", "TLS of the no-op server: off, tls, mtls, or auto (as the node's: mtls with --tls-cert, tls with --tls-ca)")
	fs.StringVar(&f.noopHeap, "noop-heap", "auto", "the live heap the no-op server runs with (its own, and the rest held), so that it collects garbage as often per call as the node (Go collects when the heap grows by GOGC % of the live one): auto is the node's live heap, read from --node-metrics (0 without: its own alone)")
	fs.IntVar(&f.floodCallers, "flood-callers", 0, "overload scenario: run alone, then again beside a flood of this many callers asking for --flood-batch IDs (0: no flood)")
	fs.IntVar(&f.floodConns, "flood-conns", 32, "connections of the flood")
	fs.IntVar(&f.floodBatch, "flood-batch", 100_000, "NextIDs count of the flood's calls")
	fs.BoolVar(&f.ignoreRetry, "ignore-retry-info", false, "after a refusal, pause --ignore-retry-pause instead of the RetryInfo it carries (an uncooperative client)")
	fs.DurationVar(&f.ignorePause, "ignore-retry-pause", 10*time.Millisecond, "the pause after a refusal under --ignore-retry-info")
	fs.IntVar(&f.record, "record", 32<<20, "IDs kept for the duplicate check (preallocated, 8 bytes each; ranges mode checks every ID, as intervals, and keeps these for the flood only)")
	fs.Uint64Var(&f.noopDupAt, "noop-duplicate-at", 0, "make the no-op server hand out one ID twice, at this ID (checks the duplicate check)")
	fs.StringVar(&f.nodeMetrics, "node-metrics", "", "the node's /metrics URL (http://host:port/metrics): report a segment generator's counter writes (claims), or a sequence generator's writes and keys, over each node window")
	fs.IntVar(&f.keys, "keys", 100_000, "seq and seqs modes: the keys drawn from (k0 … kN-1)")
	fs.StringVar(&f.keyDist, "key-dist", distUniform, "seq and seqs modes: uniform, or zipf (s=1.1: key k0 hottest, about 13% of the calls at 100,000 keys)")
	fs.Uint64Var(&f.seed, "seed", 1, "seq and seqs modes: seed of the key draws (each caller's keys follow from it and the caller's index)")
	fs.IntVar(&f.seqRecord, "seq-record", defaultSeqRecord, "seq and seqs modes: responses kept for the per-key checker (preallocated, 32 bytes each; the check after the window adds about 200 bytes per response of the busiest key)")
}

// defaults sets what depends on the mode: --batch in the sequence modes.
func (f *flags) defaults() {
	if f.batchSet {
		return
	}
	switch f.mode {
	case modeSeq:
		f.batch = 1
	case modeSeqs:
		f.batch = 100
	}
}

func (f *flags) validate() error {
	switch {
	case f.target == "":
		return errors.New("--target is empty (an address host:port, or noop)")
	case !slices.Contains([]string{modeUnary, modeBatch, modePrefetch, modeRanges, modeSeq, modeSeqs}, f.mode):
		return fmt.Errorf("--mode %q: want unary, batch, prefetch, ranges, seq or seqs", f.mode)
	case f.mode == modeRanges && (f.batch < 1 || uint64(f.batch) > maxRangeBatch):
		return fmt.Errorf("--batch %d outside [1, %d] (NextRange's count; the node bounds it by its max_range)", f.batch, uint64(maxRangeBatch))
	case f.mode == modeSeq && (f.batch < 1 || f.batch > seq.MaxCount):
		return fmt.Errorf("--batch %d outside [1, %d] (NextSeq's count)", f.batch, seq.MaxCount)
	case f.mode == modeSeqs && (f.batch < 1 || f.batch > seq.MaxItems):
		return fmt.Errorf("--batch %d outside [1, %d] (NextSeqs' keys per call)", f.batch, seq.MaxItems)
	case f.keys < 1 || f.keys > maxSeqKeys:
		return fmt.Errorf("--keys %d outside [1, %d]", f.keys, maxSeqKeys)
	case f.keyDist != distUniform && f.keyDist != distZipf:
		return fmt.Errorf("--key-dist %q: want uniform or zipf", f.keyDist)
	case f.seqRecord < 0:
		return fmt.Errorf("--seq-record %d is negative", f.seqRecord)
	case isSeqMode(f.mode) && f.noopDupAt != 0:
		return errors.New("--noop-duplicate-at does not apply to the sequence modes")
	case isSeqMode(f.mode) && f.floodCallers > 0:
		return errors.New("--flood-callers does not apply to the sequence modes")
	case f.mode != modeRanges && !isSeqMode(f.mode) && (f.batch < 1 || f.batch > 1_000_000):
		return fmt.Errorf("--batch %d outside [1, 1000000] (NextIDs' count)", f.batch)
	case f.callers < 1 || f.callers > 10_000:
		return fmt.Errorf("--callers %d outside [1, 10000]", f.callers)
	case f.conns < 1 || f.conns > 1_000:
		return fmt.Errorf("--conns %d outside [1, 1000]", f.conns)
	case f.duration <= 0:
		return fmt.Errorf("--duration %v must be positive", f.duration)
	case f.warmup < 0:
		return fmt.Errorf("--warmup %v is negative", f.warmup)
	case f.timeout <= 0:
		return fmt.Errorf("--timeout %v must be positive", f.timeout)
	case f.compare != "" && f.compare != "noop":
		return fmt.Errorf("--compare %q: only noop is known", f.compare)
	case f.compare != "" && f.pairs < minPairs:
		return fmt.Errorf("--pairs %d below %d", f.pairs, minPairs)
	case f.idle < 0:
		return fmt.Errorf("--idle %v is negative", f.idle)
	case f.idle > 0 && f.compare != "":
		return errors.New("--idle and --compare do not go together")
	case f.record < 0:
		return fmt.Errorf("--record %d is negative", f.record)
	case !slices.Contains([]string{"auto", "off", "tls", "mtls"}, f.noopTLS):
		return fmt.Errorf("--noop-tls %q: want auto, off, tls or mtls", f.noopTLS)
	case f.floodCallers < 0 || f.floodCallers > 10_000:
		return fmt.Errorf("--flood-callers %d outside [0, 10000]", f.floodCallers)
	case f.floodCallers > 0 && (f.compare != "" || f.idle > 0 || f.target == "noop"):
		return errors.New("--flood-callers needs a node --target, without --compare or --idle")
	case f.floodConns < 1 || f.floodConns > 1_000:
		return fmt.Errorf("--flood-conns %d outside [1, 1000]", f.floodConns)
	case f.floodBatch < 1 || f.floodBatch > 1_000_000:
		return fmt.Errorf("--flood-batch %d outside [1, 1000000]", f.floodBatch)
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case f.nodeMetrics != "" && (f.target == "noop" || f.idle > 0):
		return errors.New("--node-metrics needs a node --target, without --idle")
	case f.nodeMetrics != "" && !strings.HasPrefix(f.nodeMetrics, "http://") && !strings.HasPrefix(f.nodeMetrics, "https://"):
		return fmt.Errorf("--node-metrics %q: want a URL, http://host:port/metrics", f.nodeMetrics)
	}
	if f.target != "noop" {
		if _, _, err := net.SplitHostPort(f.target); err != nil {
			return fmt.Errorf("--target %q: %v", f.target, err)
		}
	}
	return nil
}

// noopTLSMode resolves --noop-tls auto against the node's TLS flags.
func (f *flags) noopTLSMode() string {
	if f.noopTLS != "auto" {
		return f.noopTLS
	}
	switch {
	case f.tlsCert != "":
		return "mtls"
	case f.tlsCA != "":
		return "tls"
	}
	return "off"
}

func (r *Report) duplicates() uint64 {
	var d uint64
	if r.Run != nil {
		d += r.Run.Dups
	}
	if r.Compare != nil {
		for _, p := range r.Compare.Pairs {
			d += p.Node.Dups + p.Noop.Dups
		}
	}
	if o := r.Overload; o != nil {
		d += o.Alone.Dups + o.Loaded.Dups + o.Flood.Dups + o.CrossDups
	}
	return d
}

// malformed counts the NextRange responses that broke its contract.
func (r *Report) malformed() uint64 {
	var m uint64
	if r.Run != nil {
		m += r.Run.Malformed
	}
	if r.Compare != nil {
		for _, p := range r.Compare.Pairs {
			m += p.Node.Malformed + p.Noop.Malformed
		}
	}
	if o := r.Overload; o != nil {
		m += o.Alone.Malformed + o.Loaded.Malformed
	}
	return m
}

// execute runs what the flags ask for.
func execute(ctx context.Context, f *flags, progress, stderr io.Writer) (*Report, error) {
	rep := &Report{}
	var nodeTLS *tls.Config
	var err error
	if f.target != "noop" && (f.tlsCA != "" || f.tlsCert != "" || f.tlsServerName != "") {
		if nodeTLS, err = client.LoadTLS(f.tlsCA, f.tlsCert, f.tlsKey, f.tlsServerName); err != nil {
			return nil, err
		}
	}
	var noop *noopChild
	var noopTLS *tls.Config
	if f.target == "noop" || f.compare == "noop" {
		var stop func()
		noop, noopTLS, stop, err = startNoop(ctx, f, nodeTLS, stderr)
		if err != nil {
			return nil, err
		}
		defer stop()
	}

	// --target noop --compare noop: the target is a second no-op server,
	// started as the first (a self check of the method).
	var self *noopChild
	var selfTLS *tls.Config
	if f.target == "noop" && f.compare == "noop" {
		var stop func()
		self, selfTLS, stop, err = startNoop(ctx, f, nodeTLS, stderr)
		if err != nil {
			return nil, err
		}
		defer stop()
	}

	// The node's PID: for --idle and --pin, and for its CPU per call
	// (where it is not found, the runs report none).
	nodePID := f.pid
	if self != nil {
		nodePID = self.pid()
	}
	if f.target != "noop" && nodePID == 0 {
		nodePID, err = pidOfTarget(f.target)
		if err != nil && f.idle > 0 {
			return nil, fmt.Errorf("--idle: %w (give --pid)", err)
		}
	}
	if f.pin {
		var unpin func()
		rep.Pin, unpin = pin(f, noop, nodePID)
		defer unpin()
		if progress != nil {
			fmt.Fprintf(progress, "bench: %s\n", rep.Pin)
		}
	}

	if f.idle > 0 {
		pid := nodePID
		if f.target == "noop" {
			pid = noop.pid()
		}
		rep.Idle, err = measureIdle(ctx, pid, f.idle, progress)
		return rep, err
	}

	// Ranges runs check their IDs as intervals: no record to keep. The
	// sequence modes keep responses for the per-key checker instead.
	var record []uint64
	var seqRec []seqRecord
	switch {
	case isSeqMode(f.mode):
		seqRec = make([]seqRecord, f.seqRecord)
	case f.mode != modeRanges:
		record = make([]uint64, f.record)
	}
	base := runConfig{
		generator: f.generator, mode: f.mode, batch: f.batch, callers: f.callers, conns: f.conns,
		warmup: f.warmup, duration: f.duration, timeout: f.timeout, record: record, progress: progress,
		ignoreRetry: f.ignoreRetry, ignorePause: f.ignorePause, keys: f.keys, keyDist: f.keyDist, seed: f.seed, seqRecord: seqRec,
	}
	nodeCfg, noopCfg := base, base
	nodeCfg.label, nodeCfg.addr, nodeCfg.tls = "node", f.target, nodeTLS
	nodeCfg.serverPID, nodeCfg.metricsURL = nodePID, f.nodeMetrics
	if self != nil {
		nodeCfg.addr, nodeCfg.tls = self.addr, selfTLS
	}
	if noop != nil {
		noopCfg.label, noopCfg.addr, noopCfg.tls = "noop", noop.addr, noopTLS
		noopCfg.serverPID = noop.pid()
	}
	switch {
	case f.floodCallers > 0:
		rep.Overload, err = overload(ctx, f, nodeCfg)
	case f.compare == "" && f.target == "noop":
		rep.Run, err = run(ctx, noopCfg)
	case f.compare == "":
		rep.Run, err = run(ctx, nodeCfg)
	default:
		rep.Compare, err = compare(ctx, f.pairs, nodeCfg, noopCfg)
		if rep.Compare != nil {
			rep.Compare.NoopHeap, rep.Compare.NoopHeapFrom, rep.Compare.NoopGOGC = noop.heap, noop.heapFrom, noop.gogc
			rep.Compare.NoopHeapOwn = noop.own
			rep.Compare.SelfCheck = self != nil
		}
		if err != nil {
			return nil, err
		}
	}
	return rep, err
}

// startNoop starts the no-op server child for the run f asks for: with
// TLS as the node has it (throw-away certificates, and the client's
// configuration for them), and for ranges compared with the node, the
// node's generator mirrored. stop ends the child and removes its files.
func startNoop(ctx context.Context, f *flags, nodeTLS *tls.Config, stderr io.Writer) (noop *noopChild, noopTLS *tls.Config, stop func(), err error) {
	var extra []string
	var cleanups []func()
	stop = func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	if mode := f.noopTLSMode(); mode != "off" {
		pki, err := newEphemeralPKI()
		if err != nil {
			return nil, nil, stop, fmt.Errorf("TLS for the no-op server: %w", err)
		}
		cleanups = append(cleanups, pki.remove)
		extra = pki.childArgs(mode == "mtls")
		noopTLS = pki.clientConfig(mode == "mtls")
	}
	if f.noopDupAt != 0 {
		extra = append(extra, "--duplicate-at", strconv.FormatUint(f.noopDupAt, 10))
	}
	if f.compare == "noop" {
		heap, gogc, from, err := noopHeap(ctx, f)
		if err != nil {
			stop()
			return nil, nil, func() {}, err
		}
		extra = append(extra, "--heap", strconv.FormatInt(heap, 10))
		if gogc > 0 {
			extra = append(extra, "--gogc", strconv.Itoa(gogc))
		}
		defer func() {
			if noop != nil {
				noop.heap, noop.heapFrom, noop.gogc = heap, from, gogc
			}
		}()
	}
	if f.generator != "" {
		// The no-op serves the generator the calls name.
		extra = append(extra, "--generator", f.generator)
	}
	switch {
	case (f.mode == modeRanges || isSeqMode(f.mode)) && f.compare == "noop":
		g, err := generatorInfo(ctx, f.target, nodeTLS, f.generator)
		if err != nil {
			stop()
			return nil, nil, func() {}, err
		}
		if isSeqMode(f.mode) && g.GetKind() != kindSeq {
			stop()
			return nil, nil, func() {}, fmt.Errorf("%s: generator %q is of kind %q: --mode %s calls a sequence generator (--generator NAME=seq on the node)",
				f.target, g.GetName(), g.GetKind(), f.mode)
		}
		extra = append(extra, noopMirror(g)...)
	case isSeqMode(f.mode):
		// --target noop: a sequence generator of the default sections.
		extra = append(extra, "--kind", kindSeq)
	}
	if noop, err = startNoopChild(extra, stderr); err != nil {
		stop()
		return nil, nil, func() {}, err
	}
	cleanups = append(cleanups, noop.stop)
	return noop, noopTLS, stop, nil
}

// noopHeap is what the no-op server holds live under --compare noop
// (--noop-heap), the GOGC it runs at (0: its runtime's default), and where
// that came from: a node carries its coordinator client's (or embedded
// etcd's) heap, the no-op server next to none, and Go collects garbage
// when the heap grows by GOGC percent of what was live — so without the
// same live heap and GOGC the two collect at different rates per call and
// the comparison favours one of them. A node paces its GOGC from its live
// heap (internal/gcpace): auto gives the no-op the GOGC the node runs at.
func noopHeap(ctx context.Context, f *flags) (heap int64, gogcPercent int, from string, err error) {
	switch {
	case f.noopHeap == "auto" && f.nodeMetrics == "":
		return 0, 0, "none: the node's live heap is unknown without --node-metrics", nil
	case f.noopHeap == "auto":
		n, gogc, err := readLiveHeap(ctx, f.nodeMetrics)
		if err != nil {
			return 0, 0, "", fmt.Errorf("--noop-heap auto: %w", err)
		}
		return n, gogc, "the node's live heap (" + metricHeapGoal + " at its " + metricGOGC + "), from --node-metrics", nil
	}
	n, err := strconv.ParseInt(f.noopHeap, 10, 64)
	if err != nil || n < 0 || n > 64<<30 {
		return 0, 0, "", fmt.Errorf("--noop-heap %q: want auto or bytes in [0, %d]", f.noopHeap, int64(64<<30))
	}
	return n, 0, "--noop-heap", nil
}

// pin gives the servers (the no-op child, and the node when its PID is
// known) and this process disjoint CPUs (planPin). It returns what the
// report says of it, and what gives every pinned process its CPUs back:
// the node outlives the run, and pinned, every later measurement of it
// would run on one CPU.
func pin(f *flags, noop *noopChild, nodePID int) (note string, unpin func()) {
	plan := planPin()
	note = plan.note
	var restores []func()
	unpin = func() {
		for i := len(restores) - 1; i >= 0; i-- {
			restores[i]()
		}
	}
	if !plan.ok {
		return note, unpin
	}
	var pinErrs []error
	if noop != nil {
		pinErrs = append(pinErrs, setAffinity(noop.pid(), &plan.server))
	}
	if nodePID != 0 {
		var nodeOrig unix.CPUSet
		if err := unix.SchedGetaffinity(nodePID, &nodeOrig); err != nil {
			pinErrs = append(pinErrs, fmt.Errorf("node %d: %w", nodePID, err))
		} else {
			pinErrs = append(pinErrs, setAffinity(nodePID, &plan.server))
			restores = append(restores, func() { _ = setAffinity(nodePID, &nodeOrig) })
		}
	} else if f.target != "noop" {
		note += " (node not pinned: its PID is unknown)"
	}
	pinErrs = append(pinErrs, setAffinity(os.Getpid(), &plan.load))
	restores = append(restores, func() { _ = setAffinity(os.Getpid(), &plan.orig) })
	if err := errors.Join(pinErrs...); err != nil {
		note += " (" + err.Error() + ")"
	}
	return note, unpin
}

// compare runs the node and the no-op server in turn, pairs times, and
// takes the median of the pairs' ratios. The order alternates (node
// first, then the no-op first, ...): a machine that drifts during the
// run, faster or slower, then favours neither side.
func compare(ctx context.Context, pairs int, nodeCfg, noopCfg runConfig) (*Comparison, error) {
	c := &Comparison{}
	for i := range pairs {
		nodeCfg.label, noopCfg.label = fmt.Sprintf("node %d/%d", i+1, pairs), fmt.Sprintf("noop %d/%d", i+1, pairs)
		cfgs, order := [2]runConfig{nodeCfg, noopCfg}, [2]int{0, 1}
		if i%2 == 1 {
			order = [2]int{1, 0}
		}
		var res [2]*Result // node, noop
		for _, k := range order {
			r, err := run(ctx, cfgs[k])
			if err != nil {
				return nil, fmt.Errorf("pair %d, %s: %w", i+1, cfgs[k].label, err)
			}
			res[k] = r
		}
		c.Pairs = append(c.Pairs, Pair{Node: res[0], Noop: res[1], Ratios: ratios(res[0], res[1])})
	}
	c.Median = medianRatios(c.Pairs)
	c.Interval = medianIntervals(c.Pairs)
	return c, nil
}

// Interval is where the median of the pairs' ratios lies, with
// Confidence, from the order statistics of the pairs alone (no
// assumption on how a ratio is spread): with n pairs, between the k-th
// smallest and the k-th largest ratio, k the largest for which that holds
// with at least minConfidence. A target inside it is neither met nor
// missed by the run: more pairs, or a quieter machine, decide.
type Interval struct {
	Confidence float64    `json:"confidence"`
	RPC        [2]float64 `json:"rpc_per_s"`
	CPUPerCall [2]float64 `json:"server_cpu_per_call,omitempty"`
}

// minConfidence is what an Interval holds with at least.
const minConfidence = 0.9

// orderRank is k for n pairs: the largest k ≥ 1 whose interval [x(k),
// x(n+1-k)] holds the median with at least minConfidence, and that
// confidence: 1 − 2·P(Binomial(n, ½) < k). Zero for n < 5: under that
// even the widest interval holds less.
func orderRank(n int) (k int, confidence float64) {
	// cdf[j] = P(Binomial(n, ½) ≤ j).
	p, cdf := math.Pow(0.5, float64(n)), 0.0
	choose := 1.0
	for j := 0; j < n/2; j++ {
		cdf += choose * p
		if c := 1 - 2*cdf; c >= minConfidence {
			k, confidence = j+1, c
		} else {
			break
		}
		choose = choose * float64(n-j) / float64(j+1)
	}
	return k, confidence
}

// medianIntervals is the pairs' Interval (zero where too few pairs).
func medianIntervals(pairs []Pair) Interval {
	k, conf := orderRank(len(pairs))
	if k == 0 {
		return Interval{}
	}
	between := func(v []float64) [2]float64 {
		if len(v) != len(pairs) {
			return [2]float64{}
		}
		s := slices.Clone(v)
		slices.Sort(s)
		return [2]float64{s[k-1], s[len(s)-k]}
	}
	var rpc []float64
	for _, p := range pairs {
		rpc = append(rpc, p.Ratios.RPC)
	}
	return Interval{Confidence: conf, RPC: between(rpc), CPUPerCall: between(cpuRatios(pairs))}
}

// noopMirror is the no-op child's flags that make its Info and its
// NextRange runs those of the node's generator g: the layout, the workers
// and max_range; for a segment generator its kind and definition (one
// run per call); for a sequence generator its kind and sections (the
// no-op owning every one).
func noopMirror(g *firnv1.GeneratorInfo) []string {
	var args []string
	if g.GetKind() == kindSeq {
		return []string{"--kind", kindSeq, "--sections", strconv.FormatUint(uint64(g.GetSections()), 10)}
	}
	if g.GetKind() == kindSegment {
		args = append(args, "--kind", kindSegment, "--layout", g.GetLayout())
		if m := g.GetMaxRange(); m > 0 {
			args = append(args, "--max-range", strconv.FormatUint(m, 10))
		}
		return args
	}
	// A node that lists no workers holds one: the no-op's default.
	if ws := g.GetWorkers(); len(ws) > 0 {
		args = append(args, "--workers", formatWorkers(ws))
	}
	if _, err := generator.ParseLayout(g.GetLayout()); err == nil {
		args = append(args, "--layout", g.GetLayout())
	}
	if m := g.GetMaxRange(); m > 0 {
		args = append(args, "--max-range", strconv.FormatUint(m, 10))
	}
	return args
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func ratios(node, noop *Result) Ratios {
	r := Ratios{
		RPC:  ratio(node.RPCPS, noop.RPCPS),
		IDs:  ratio(node.IDsPS, noop.IDsPS),
		P50:  ratio(float64(node.Latency.P50), float64(noop.Latency.P50)),
		P99:  ratio(float64(node.Latency.P99), float64(noop.Latency.P99)),
		P999: ratio(float64(node.Latency.P999), float64(noop.Latency.P999)),
	}
	if node.ServerCPU != nil && noop.ServerCPU != nil {
		r.CPUPerCall = ratio(node.ServerCPU.PerCallNS, noop.ServerCPU.PerCallNS)
	}
	return r
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianRatios(pairs []Pair) Ratios {
	pick := func(f func(Ratios) float64) float64 {
		var v []float64
		for _, p := range pairs {
			v = append(v, f(p.Ratios))
		}
		return median(v)
	}
	return Ratios{
		RPC:        pick(func(r Ratios) float64 { return r.RPC }),
		IDs:        pick(func(r Ratios) float64 { return r.IDs }),
		P50:        pick(func(r Ratios) float64 { return r.P50 }),
		P99:        pick(func(r Ratios) float64 { return r.P99 }),
		P999:       pick(func(r Ratios) float64 { return r.P999 }),
		CPUPerCall: median(cpuRatios(pairs)),
	}
}

// cpuRatios is the pairs' CPU-per-call ratios, where both PIDs were
// known.
func cpuRatios(pairs []Pair) []float64 {
	var v []float64
	for _, p := range pairs {
		if p.Ratios.CPUPerCall > 0 {
			v = append(v, p.Ratios.CPUPerCall)
		}
	}
	return v
}

// pidOfTarget finds the process listening on a loopback target's port.
func pidOfTarget(target string) (int, error) {
	host, portStr, err := net.SplitHostPort(target)
	if err != nil {
		return 0, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0, fmt.Errorf("target %s is not on this machine's loopback", target)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return 0, fmt.Errorf("target port %q: %w", portStr, err)
	}
	return pidByPort(port)
}

// measureIdle samples pid's CPU at the ends of the window and its RSS
// every second.
func measureIdle(ctx context.Context, pid int, window time.Duration, progress io.Writer) (*IdleResult, error) {
	now := newMono()
	cpu0, err := procCPU(pid)
	if err != nil {
		return nil, err
	}
	sw0, err := procSwitches(pid)
	if err != nil {
		return nil, err
	}
	res := &IdleResult{PID: pid}
	start := now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	end := time.NewTimer(window)
	defer end.Stop()
	sample := func() error {
		rss, err := procRSS(pid)
		if err != nil {
			return err
		}
		res.RSSMaxBytes = max(res.RSSMaxBytes, rss)
		res.RSSEndBytes = rss
		return nil
	}
	if err := sample(); err != nil {
		return nil, err
	}
loop:
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-end.C:
			break loop
		case <-tick.C:
			if err := sample(); err != nil {
				return nil, err
			}
			if progress != nil {
				c, _ := procCPU(pid)
				fmt.Fprintf(progress, "bench: idle %4.1fs/%v  pid %d  cpu %.2fs  rss %.1f MB\n",
					(now() - start).Seconds(), window, pid, float64(c-cpu0)/userHZ, float64(res.RSSEndBytes)/1e6)
			}
		}
	}
	cpu1, err := procCPU(pid)
	if err != nil {
		return nil, err
	}
	sw1, err := procSwitches(pid)
	if err != nil {
		return nil, err
	}
	if err := sample(); err != nil {
		return nil, err
	}
	res.Seconds = (now() - start).Seconds()
	res.CPUSeconds = float64(cpu1-cpu0) / userHZ
	res.CPUPercent = 100 * res.CPUSeconds / res.Seconds
	res.Switches = float64(sw1-sw0) / res.Seconds
	return res, nil
}

// lockedWriter is a writer several goroutines share.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
