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
)

// Modes of a run.
const (
	modeUnary    = "unary"    // NextID per call
	modeBatch    = "batch"    // NextIDs(count) per call
	modePrefetch = "prefetch" // client.Next per call, from the client's buffer
)

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
	// ignoreRetry: a caller pauses 1 ms after a refusal instead of its
	// RetryInfo.
	ignoreRetry bool
	progress    io.Writer // nil: no progress lines
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
	// ignoreRetry: pause 1 ms after a refusal whatever its RetryInfo.
	ignoreRetry bool
	codes       map[codes.Code]uint64
	rec         []uint64 // len grows within the preallocated cap
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
	now := newMono()
	var (
		conns   []*grpc.ClientConn
		clients []*client.Client
	)
	defer func() {
		for _, c := range clients {
			c.Close()
		}
		for _, c := range conns {
			c.Close()
		}
	}()
	for range cfg.conns {
		if cfg.mode == modePrefetch {
			c, err := client.New([]string{cfg.addr}, client.WithTLS(cfg.tls), client.WithGenerator(cfg.generator),
				client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				return nil, err
			}
			clients = append(clients, c)
			// One Next to connect and fill.
			nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = c.Next(nctx)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("%s: first Next: %w", cfg.addr, err)
			}
			continue
		}
		conn, err := grpc.NewClient(cfg.addr, dialOptions(cfg.tls)...)
		if err != nil {
			return nil, err
		}
		conns = append(conns, conn)
		if err := waitReady(ctx, conn); err != nil {
			return nil, err
		}
	}

	workers := make([]*worker, cfg.callers)
	per := len(cfg.record) / cfg.callers
	for i := range workers {
		workers[i] = &worker{codes: map[codes.Code]uint64{}, rec: cfg.record[i*per : i*per : (i+1)*per], ignoreRetry: cfg.ignoreRetry}
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
	stopped := false
	if !sleep(cfg.warmup) {
		stopped = true
	}
	start := now()
	phase.Store(phaseMeasure)
	var rpcs0 uint64
	for _, c := range clients {
		rpcs0 += c.Stats().Fetches
	}
	var lastCalls, lastIDs uint64
	last := start
	for !stopped {
		left := cfg.duration - (now() - start)
		if left <= 0 {
			break
		}
		if !sleep(min(left, time.Second)) {
			stopped = true
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
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	res := &Result{
		Label: cfg.label, Target: cfg.addr, Mode: cfg.mode, Callers: cfg.callers, Conns: cfg.conns,
		Seconds: elapsed.Seconds(), Errors: map[string]uint64{},
	}
	if cfg.mode == modeBatch {
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
	if cfg.mode == modePrefetch {
		res.RPCs = 0
		for _, c := range clients {
			res.RPCs += c.Stats().Fetches
		}
		res.RPCs -= rpcs0
	}
	res.CallsPS = float64(res.Calls) / res.Seconds
	res.RPCPS = float64(res.RPCs) / res.Seconds
	res.IDsPS = float64(res.IDs) / res.Seconds
	res.Latency = h.latency()
	if eh.total > 0 {
		l := eh.latency()
		res.ErrLatency = &l
	}
	res.Checked = uint64(len(recorded))
	res.Dups = countDuplicates(recorded)
	return res, nil
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
	}
	time.Sleep(pause)
}

// rpc is a unary or batch caller.
func (w *worker) rpc(ctx context.Context, cfg runConfig, stub firnv1.IDServiceClient, phase *atomic.Int32, now mono) {
	one := &firnv1.NextIDRequest{Generator: cfg.generator}
	many := &firnv1.NextIDsRequest{Generator: cfg.generator, Count: uint32(cfg.batch)}
	for ctx.Err() == nil {
		if phase.Load() == phaseStop {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		t0 := now()
		var (
			ids []uint64
			id  uint64
			err error
		)
		if cfg.mode == modeUnary {
			var resp *firnv1.NextIDResponse
			resp, err = stub.NextID(cctx, one)
			id = resp.GetId()
		} else {
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
