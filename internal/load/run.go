package load

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/firnid/firn/client"
	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/internal/intervals"
)

// Modes of a run.
const (
	modeUnary    = "unary"    // NextID per call
	modeBatch    = "batch"    // NextIDs(count) per call
	modePrefetch = "prefetch" // client.Next per call, from the client's buffer
	modeRanges   = "ranges"   // NextRange(count) per call: runs of consecutive IDs
)

// rangesPrealloc is how many intervals the callers of a ranges run
// preallocate between them (16 bytes each): one per response that does not
// continue the caller's previous one, so a window rarely outgrows it.
const rangesPrealloc = 1 << 20

// prefetchSample: in prefetch mode one call in this many is timed (a
// clock read costs about as much as a Next).
const prefetchSample = 64

// runConfig is one measured run against one target address.
type runConfig struct {
	label     string // "node", "noop"
	addr      string
	tls       *tls.Config
	generator string
	mode      string
	batch     int
	callers   int
	conns     int
	warmup    time.Duration
	duration  time.Duration
	timeout   time.Duration
	record    []uint64 // preallocated: the IDs of the measured window
	// ignoreRetry: a caller pauses ignorePause after a refusal instead
	// of its RetryInfo.
	ignoreRetry bool
	ignorePause time.Duration
	progress    io.Writer // nil: no progress lines
	// serverPID is the process serving addr (0: unknown): its CPU time is
	// read at the window's ends (Result.ServerCPU).
	serverPID int
	// metricsURL is the node's /metrics (empty: not read): a segment
	// generator's counter claims are read at the window's ends
	// (Result.CounterWrites), a sequence generator's writes and keys
	// (SeqResult.NodeWrites).
	metricsURL string
	// The sequence modes: keys drawn from [0, keys) by keyDist, seeded
	// by seed and the caller's index; seqRecord is preallocated: the
	// window's responses kept for the checker.
	keys      int
	keyDist   string
	seed      uint64
	seqRecord []seqRecord
}

// Result is one run's measurement.
type Result struct {
	Label   string            `json:"label"`
	Target  string            `json:"target"`
	Mode    string            `json:"mode"`
	Batch   int               `json:"batch,omitempty"`
	Callers int               `json:"callers"`
	Conns   int               `json:"conns"`
	Seconds float64           `json:"seconds"`
	Calls   uint64            `json:"calls"`
	IDs     uint64            `json:"ids"`
	RPCs    uint64            `json:"rpcs"`
	CallsPS float64           `json:"calls_per_s"`
	RPCPS   float64           `json:"rpc_per_s"`
	IDsPS   float64           `json:"ids_per_s"`
	Latency Latency           `json:"latency_ns"`
	Errors  map[string]uint64 `json:"errors"`
	// ErrLatency is the latency of the failed calls (how soon a refusal
	// came); absent without errors.
	ErrLatency *Latency `json:"error_latency_ns,omitempty"`
	Checked    uint64   `json:"ids_checked"`
	Dups       uint64   `json:"duplicates"`

	// Ranges mode only. Workers is how many workers the generator held
	// (len(workers) in Info, at least 1; the larger of the readings before
	// and after the window), Capacity their rate together (workers × the
	// layout's rate, IDs/s; 0 when Info's layout does not parse, as the
	// no-op counter's does not) and CapacityRatio IDs/s over it.
	Workers       int     `json:"workers,omitempty"`
	Capacity      float64 `json:"capacity_ids_per_s,omitempty"`
	CapacityRatio float64 `json:"capacity_ratio,omitempty"`
	// Intervals is how many disjoint intervals the window's IDs make:
	// the duplicate check's memory, 16 bytes each.
	Intervals int `json:"intervals,omitempty"`
	// Malformed counts responses that broke NextRange's contract: an
	// empty run, a run past 2^64-1, a run not above the one before it, or
	// counts not adding up to the count asked.
	Malformed uint64 `json:"malformed_responses,omitempty"`

	// Kind is the generator's kind from Info ("snowflake", "segment";
	// empty where the run read no Info: ranges mode and --node-metrics
	// read it).
	Kind string `json:"kind,omitempty"`
	// ServerCPU is the serving process's CPU over the window, where its
	// PID is known.
	ServerCPU *ServerCPU `json:"server_cpu,omitempty"`
	// CounterWrites is what a segment generator wrote to its counter
	// over the window (--node-metrics).
	CounterWrites *CounterWrites `json:"counter_writes,omitempty"`
	// Seq is what a sequence mode measured beside the common figures: the
	// refusals followed, the checker's findings, the node's writes. In
	// these modes IDs counts values (a NextSeq's count, a NextSeqs item
	// each), Calls the NextSeq keys (seq) or NextSeqs RPCs (seqs).
	Seq *SeqResult `json:"seq,omitempty"`

	// ids is a ranges run's IDs, kept for the overload scenario's
	// checks across windows.
	ids *intervals.Set
}

// ServerCPU is the CPU time (user and system, from /proc/<pid>/stat, in
// 10 ms ticks) the serving process used over the measured window: the
// node with its embedded coordinator, or the no-op child.
type ServerCPU struct {
	PID        int     `json:"pid"`
	CPUSeconds float64 `json:"cpu_seconds"`
	// Cores is CPUSeconds over the window's length: 1 is one core busy.
	Cores float64 `json:"cores"`
	// PerCallNS is CPUSeconds per call of the window, in nanoseconds.
	PerCallNS float64 `json:"per_call_ns"`
}

// CounterWrites is a segment generator's claims over the window, read
// from the node's firn_segment_claims_total (each claim is one counter
// write that landed; while it serves, a node writes the counter only to
// claim) and firn_segment_claimed_ids_total.
type CounterWrites struct {
	Generator  string  `json:"generator"`
	Claims     uint64  `json:"claims"`
	PerSecond  float64 `json:"per_second"`
	ClaimedIDs uint64  `json:"claimed_ids"`
	// Step is firn_segment_step at the window's close: the size of the
	// node's next claim.
	Step uint64 `json:"step"`
}

// Latency holds call latency percentiles in nanoseconds.
type Latency struct {
	P50     int64  `json:"p50"`
	P90     int64  `json:"p90"`
	P99     int64  `json:"p99"`
	P999    int64  `json:"p999"`
	Max     int64  `json:"max"`
	Samples uint64 `json:"samples"`
}

const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// worker is one caller; its counters are read by the progress line.
type worker struct {
	calls atomic.Uint64
	ids   atomic.Uint64
	errs  atomic.Uint64
	_     [40]byte
	hist  hist
	ehist hist // latency of the failed calls
	// ignoreRetry: pause ignorePause after a refusal whatever its
	// RetryInfo.
	ignoreRetry bool
	ignorePause time.Duration
	codes       map[codes.Code]uint64
	rec         []uint64 // len grows within the preallocated cap
	// Ranges mode: the window's IDs as intervals, the IDs found in them
	// already, the IDs checked and the malformed responses.
	set                      intervals.Set
	dups, checked, malformed uint64
	// The sequence modes: the caller's part of the preallocated record,
	// the WRONG_NODE refusals followed, the SECTION_MOVING refusals, the
	// values' grants (calls, items) and the items sent, and the items
	// refused by reason.
	seqRec                           []seqRecord
	wrongNode, moving, grants, items uint64
	itemErrs                         map[string]uint64
}

// mono reads the monotonic clock (time since the run's origin).
type mono func() time.Duration

func newMono() mono {
	clk := clockguard.NewSystem()
	return func() time.Duration { d, _ := clk.FastMono(); return d }
}

func dialOptions(cfg *tls.Config) []grpc.DialOption {
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16 << 20)),
	}
}

// waitReady connects conn and waits until it is ready; a failed first
// connection attempt or 10 s without one is an error.
func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure:
			return fmt.Errorf("connection to %s failed (TLS or address?)", conn.Target())
		}
		if !conn.WaitForStateChange(ctx, s) {
			return fmt.Errorf("connection to %s not ready after 10s (state %v)", conn.Target(), s)
		}
	}
}

// run performs one measured run: warmup, then the measured window, with
// a progress line every second.
func run(ctx context.Context, cfg runConfig) (*Result, error) {
	if isSeqMode(cfg.mode) {
		return runSeq(ctx, cfg)
	}
	now := newMono()
	conns, clients, err := dial(ctx, cfg)
	defer func() {
		for _, c := range clients {
			c.Close()
		}
		for _, c := range conns {
			c.Close()
		}
	}()
	if err != nil {
		return nil, err
	}

	var gen *firnv1.GeneratorInfo
	switch {
	case cfg.mode == modeRanges:
		if gen, err = rangesInfo(ctx, conns[0], cfg); err != nil {
			return nil, err
		}
	case cfg.metricsURL != "" && len(conns) > 0:
		if gen, err = readGenerator(ctx, conns[0], cfg); err != nil {
			return nil, err
		}
	case cfg.metricsURL != "": // prefetch mode: clients, no connection of its own
		if gen, err = generatorInfo(ctx, cfg.addr, cfg.tls, cfg.generator); err != nil {
			return nil, err
		}
	}

	workers := make([]*worker, cfg.callers)
	per := len(cfg.record) / cfg.callers
	for i := range workers {
		workers[i] = &worker{codes: map[codes.Code]uint64{}, rec: cfg.record[i*per : i*per : (i+1)*per], ignoreRetry: cfg.ignoreRetry, ignorePause: cfg.ignorePause}
		if cfg.mode == modeRanges {
			workers[i].set.Grow(max(64, rangesPrealloc/cfg.callers))
		}
	}
	var phase atomic.Int32
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch cfg.mode {
			case modePrefetch:
				w.prefetch(ctx, clients[i%len(clients)], &phase, now)
			default:
				w.rpc(ctx, cfg, firnv1.NewIDServiceClient(conns[i%len(conns)]), &phase, now)
			}
		}()
	}
	var rpcs0 uint64 // the prefetch clients' fetches before the window
	cw := cpuWindow{pid: cfg.serverPID}
	var claims0, claims1 segmentMetrics
	var claimsErr error
	// The counter writes of a segment generator; a snowflake generator's
	// --node-metrics serves --noop-heap alone.
	claims := cfg.metricsURL != "" && gen.GetKind() == kindSegment
	elapsed := measure(ctx, cfg, workers, &phase, now, func() {
		for _, c := range clients {
			rpcs0 += c.Stats().Fetches
		}
		cw.start()
		if claims {
			claims0, claimsErr = readSegmentMetrics(ctx, cfg.metricsURL, gen.GetName())
		}
	}, func() {
		cw.end()
		if claims && claimsErr == nil {
			claims1, claimsErr = readSegmentMetrics(ctx, cfg.metricsURL, gen.GetName())
		}
	})
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if claimsErr != nil {
		return nil, claimsErr
	}

	res, recorded := summarize(cfg, workers, elapsed)
	res.Kind = gen.GetKind()
	cw.set(res)
	if claims {
		res.CounterWrites = claims1.since(claims0, gen.GetName(), res.Seconds)
	}
	if cfg.mode == modePrefetch {
		res.RPCs = 0
		for _, c := range clients {
			res.RPCs += c.Stats().Fetches
		}
		res.RPCs -= rpcs0
		res.RPCPS = float64(res.RPCs) / res.Seconds
	}
	if cfg.mode != modeRanges {
		res.Checked = uint64(len(recorded))
		res.Dups = countDuplicates(recorded)
		return res, nil
	}
	rangeChecks(ctx, res, cfg, workers, conns[0], gen)
	return res, nil
}

// dial opens the run's connections: cfg.conns gRPC connections, ready, or
// under modePrefetch as many Go clients, each having answered one Next.
// What it opened is returned even with an error, for the caller to close.
func dial(ctx context.Context, cfg runConfig) (conns []*grpc.ClientConn, clients []*client.Client, err error) {
	for range cfg.conns {
		if cfg.mode == modePrefetch {
			c, err := client.New([]string{cfg.addr}, client.WithTLS(cfg.tls), client.WithGenerator(cfg.generator),
				client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				return conns, clients, err
			}
			clients = append(clients, c)
			// One Next to connect and fill.
			nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = c.Next(nctx)
			cancel()
			if err != nil {
				return conns, clients, fmt.Errorf("%s: first Next: %w", cfg.addr, err)
			}
			continue
		}
		conn, err := grpc.NewClient(cfg.addr, dialOptions(cfg.tls)...)
		if err != nil {
			return conns, clients, err
		}
		conns = append(conns, conn)
		if err := waitReady(ctx, conn); err != nil {
			return conns, clients, err
		}
	}
	return conns, clients, nil
}

// measure waits out the warm-up, opens the measured window (atWindow runs
// as it opens), reports progress each second to cfg.progress, and closes
// the window after cfg.duration or when ctx ends (atClose runs as it
// closes); it returns the window's length.
func measure(ctx context.Context, cfg runConfig, workers []*worker, phase *atomic.Int32, now func() time.Duration, atWindow, atClose func()) time.Duration {
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	stopped := !sleep(cfg.warmup)
	start := now()
	phase.Store(phaseMeasure)
	atWindow()
	var lastCalls, lastIDs uint64
	last := start
	for !stopped {
		left := cfg.duration - (now() - start)
		if left <= 0 {
			break
		}
		if !sleep(min(left, time.Second)) {
			break
		}
		if cfg.progress != nil {
			var calls, ids, errs uint64
			for _, w := range workers {
				calls += w.calls.Load()
				ids += w.ids.Load()
				errs += w.errs.Load()
			}
			t := now()
			dt := (t - last).Seconds()
			fmt.Fprintf(cfg.progress, "bench: %s %4.1fs/%v  calls/s %.0f  ids/s %.0f  errors %d\n",
				cfg.label, (t - start).Seconds(), cfg.duration, float64(calls-lastCalls)/dt, float64(ids-lastIDs)/dt, errs)
			lastCalls, lastIDs, last = calls, ids, t
		}
	}
	phase.Store(phaseStop)
	elapsed := now() - start
	atClose()
	return elapsed
}

// summarize adds up the callers' counts and latencies over the window, and
// returns the IDs they recorded (compacted into one run of cfg.record).
func summarize(cfg runConfig, workers []*worker, elapsed time.Duration) (*Result, []uint64) {
	res := &Result{
		Label: cfg.label, Target: cfg.addr, Mode: cfg.mode, Callers: cfg.callers, Conns: cfg.conns,
		Seconds: elapsed.Seconds(), Errors: map[string]uint64{},
	}
	if cfg.mode == modeBatch || cfg.mode == modeRanges {
		res.Batch = cfg.batch
	}
	var h, eh hist
	recorded := cfg.record[:0]
	for _, w := range workers {
		res.Calls += w.calls.Load()
		res.IDs += w.ids.Load()
		h.merge(&w.hist)
		eh.merge(&w.ehist)
		for c, n := range w.codes {
			res.Errors[c.String()] += n
		}
		// Compact the callers' windows into one run (copying forward
		// within the same array is safe).
		recorded = append(recorded, w.rec...)
	}
	res.RPCs = res.Calls
	res.CallsPS = float64(res.Calls) / res.Seconds
	res.RPCPS = float64(res.RPCs) / res.Seconds
	res.IDsPS = float64(res.IDs) / res.Seconds
	res.Latency = h.latency()
	if eh.total > 0 {
		l := eh.latency()
		res.ErrLatency = &l
	}
	return res, recorded
}

// rangeChecks completes a ranges run's result: the duplicates within and
// between the callers' runs, the intervals they form, and the generator's
// capacity (gen, read before the run, or after it if a node took more
// workers meanwhile).
func rangeChecks(ctx context.Context, res *Result, cfg runConfig, workers []*worker, conn *grpc.ClientConn, gen *firnv1.GeneratorInfo) {
	sets := make([]*intervals.Set, len(workers))
	for i, w := range workers {
		sets[i] = &w.set
		res.Dups += w.dups
		res.Checked += w.checked
		res.Malformed += w.malformed
	}
	// Each caller found the duplicates within its own responses; the
	// union finds those between callers.
	var cross uint64
	res.ids, cross = intervals.Union(sets...)
	res.Dups += cross
	res.Intervals = res.ids.NumIntervals()
	res.Workers, res.Capacity = capacity(gen)
	// Read the workers again: under --workers auto a node may take more
	// while loaded. A failed reading keeps the first.
	if after, err := readGenerator(ctx, conn, cfg); err == nil {
		if w, c := capacity(after); w > res.Workers {
			res.Workers, res.Capacity = w, c
		}
	}
	res.CapacityRatio = ratio(res.IDsPS, res.Capacity)
}

// readGenerator reads the run's generator's Info over conn.
func readGenerator(ctx context.Context, conn *grpc.ClientConn, cfg runConfig) (*firnv1.GeneratorInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return lookupGenerator(ctx, firnv1.NewIDServiceClient(conn), cfg.addr, cfg.generator)
}

// rangesInfo reads the generator's Info over conn and checks that it
// takes NextRange counts of cfg.batch.
func rangesInfo(ctx context.Context, conn *grpc.ClientConn, cfg runConfig) (*firnv1.GeneratorInfo, error) {
	g, err := readGenerator(ctx, conn, cfg)
	if err != nil {
		return nil, err
	}
	switch m := g.GetMaxRange(); {
	case m == 0:
		return nil, fmt.Errorf("%s: generator %q reports no max_range in Info: does the node serve NextRange?", cfg.addr, g.GetName())
	case uint64(cfg.batch) > m:
		return nil, fmt.Errorf("%s: --batch %d above generator %q's max_range %d (Info), the largest NextRange count it takes", cfg.addr, cfg.batch, g.GetName(), m)
	}
	return g, nil
}

// countDuplicates sorts ids in place and counts the IDs equal to the one
// before them.
func countDuplicates(ids []uint64) uint64 {
	slices.Sort(ids)
	var d uint64
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			d++
		}
	}
	return d
}

func (w *worker) fail(err error, lat time.Duration, measuring bool) {
	w.errs.Add(1)
	if measuring {
		if lat > 0 { // untimed prefetch calls have none
			w.ehist.record(int64(lat))
		}
		code := status.Code(err)
		if errors.Is(err, client.ErrClosed) {
			code = codes.Canceled
		}
		w.codes[code]++
	}
	// Do not spin on a target that refuses at once; wait out the
	// refusal's RetryInfo as the Go client does (at most a second), unless
	// --ignore-retry-info.
	pause := time.Millisecond
	if d, ok := client.RetryAfter(err); ok && !w.ignoreRetry {
		pause = min(max(d, pause), time.Second)
	} else if w.ignoreRetry && w.ignorePause > 0 {
		pause = w.ignorePause
	}
	time.Sleep(pause)
}

// rpc is a unary or batch caller.
func (w *worker) rpc(ctx context.Context, cfg runConfig, stub firnv1.IDServiceClient, phase *atomic.Int32, now mono) {
	one := &firnv1.NextIDRequest{Generator: cfg.generator}
	many := &firnv1.NextIDsRequest{Generator: cfg.generator, Count: uint32(cfg.batch)}
	rng := &firnv1.NextRangeRequest{Generator: cfg.generator, Count: uint64(cfg.batch)}
	for ctx.Err() == nil {
		if phase.Load() == phaseStop {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		t0 := now()
		var (
			ids  []uint64
			runs []*firnv1.Run
			id   uint64
			err  error
		)
		switch cfg.mode {
		case modeUnary:
			var resp *firnv1.NextIDResponse
			resp, err = stub.NextID(cctx, one)
			id = resp.GetId()
		case modeRanges:
			var resp *firnv1.NextRangeResponse
			resp, err = stub.NextRange(cctx, rng)
			runs = resp.GetRuns()
		default:
			var resp *firnv1.NextIDsResponse
			resp, err = stub.NextIDs(cctx, many)
			ids = resp.GetIds()
		}
		lat := now() - t0
		cancel()
		measuring := phase.Load() == phaseMeasure
		if err != nil {
			if ctx.Err() == nil {
				w.fail(err, lat, measuring)
			}
			continue
		}
		if !measuring {
			continue
		}
		w.hist.record(int64(lat))
		w.calls.Add(1)
		if cfg.mode == modeRanges {
			w.ids.Add(w.addRuns(runs, rng.Count))
			continue
		}
		if cfg.mode == modeUnary {
			w.ids.Add(1)
			if len(w.rec) < cap(w.rec) {
				w.rec = append(w.rec, id)
			}
			continue
		}
		w.ids.Add(uint64(len(ids)))
		if room := cap(w.rec) - len(w.rec); room > 0 {
			w.rec = append(w.rec, ids[:min(room, len(ids))]...)
		}
	}
}

// addRuns checks one NextRange response's runs into the caller's interval
// set and returns the IDs it delivered: the sum of the run counts.
func (w *worker) addRuns(runs []*firnv1.Run, asked uint64) (ids uint64) {
	bad := false
	var prevLast uint64
	for i, r := range runs {
		first, n := r.GetFirst(), r.GetCount()
		ids += n
		if n == 0 || !intervals.Fits(first, n) {
			bad = true
			continue
		}
		if i > 0 && first <= prevLast {
			bad = true
		}
		prevLast = first + n - 1
		w.dups += w.set.Add(first, n)
		w.checked += n
	}
	if bad || ids != asked {
		w.malformed++
	}
	return ids
}

// prefetch is a client-prefetch caller. Counters are published every 256
// calls and one call in prefetchSample is timed, so the measurement costs
// the Next path little.
func (w *worker) prefetch(ctx context.Context, c *client.Client, phase *atomic.Int32, now mono) {
	var n, pending uint64
	flush := func() {
		w.calls.Add(pending)
		w.ids.Add(pending)
		pending = 0
	}
	defer flush()
	for ctx.Err() == nil {
		ph := phase.Load()
		if ph == phaseStop {
			return
		}
		n++
		timed := n%prefetchSample == 0
		var t0 time.Duration
		if timed {
			t0 = now()
		}
		id, err := c.Next(ctx)
		if timed && err == nil && ph == phaseMeasure {
			w.hist.record(int64(now() - t0))
		}
		if err != nil {
			if ctx.Err() == nil {
				var lat time.Duration
				if timed {
					lat = now() - t0
				}
				w.fail(err, lat, ph == phaseMeasure)
			}
			continue
		}
		if ph != phaseMeasure {
			continue
		}
		pending++
		if pending == 256 {
			flush()
		}
		if len(w.rec) < cap(w.rec) {
			w.rec = append(w.rec, id)
		}
	}
}

// cpuWindow reads a server process's CPU time at a window's start and
// end (pid 0: none), for the CPU per call beside the rates.
type cpuWindow struct {
	pid    int
	c0, c1 uint64
	err    error
}

func (w *cpuWindow) start() {
	if w.pid != 0 {
		w.c0, w.err = procCPU(w.pid)
	}
}

func (w *cpuWindow) end() {
	if w.pid != 0 && w.err == nil {
		w.c1, w.err = procCPU(w.pid)
	}
}

// set puts the window's server CPU into res (its Seconds and Calls set).
func (w *cpuWindow) set(res *Result) {
	if w.pid != 0 && w.err == nil {
		cpu := float64(w.c1-w.c0) / userHZ
		res.ServerCPU = &ServerCPU{PID: w.pid, CPUSeconds: cpu, Cores: cpu / res.Seconds,
			PerCallNS: ratio(cpu*1e9, float64(res.Calls))}
	}
}
