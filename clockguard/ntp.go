package clockguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/beevik/ntp"
)

// Errors of the NTP checker. Check returns ErrNTPUnreachable (wrapped, with
// the per-server causes in its message) or an *OffsetError; the per-server
// sentinels appear in ServerResult.Err.
var (
	// ErrNTPUnreachable: fewer than MinValid servers gave a usable answer,
	// so the clock could not be measured. Whether this blocks serving is
	// the node's policy (--ntp-required).
	ErrNTPUnreachable = errors.New("clockguard: NTP unreachable")
	// ErrOffsetTooLarge is what an *OffsetError unwraps to.
	ErrOffsetTooLarge = errors.New("clockguard: clock offset too large")

	// ErrServerNoAnswer: no reply within the timeout, or a network error.
	ErrServerNoAnswer = errors.New("clockguard: NTP server did not answer")
	// ErrKissOfDeath: the server sent a kiss-of-death packet (stratum 0);
	// ServerResult.KissCode holds its code (RATE, DENY, RSTR, ...).
	ErrKissOfDeath = errors.New("clockguard: NTP kiss of death")
	// ErrNotInSync: the server's leap indicator says it is not synchronised.
	ErrNotInSync = errors.New("clockguard: NTP server not in sync")
	// ErrStratum: the server's stratum is above NTPConfig.MaxStratum.
	ErrStratum = errors.New("clockguard: NTP server stratum too high")
	// ErrRTT: the round trip took longer than NTPConfig.MaxRTT.
	ErrRTT = errors.New("clockguard: NTP round trip too long")
	// ErrInvalidResponse: the reply failed the library's validation or
	// could not be parsed; the library's error is wrapped too.
	ErrInvalidResponse = errors.New("clockguard: invalid NTP response")

	// ErrRunning: Run or Start called while the periodic loop already runs.
	ErrRunning = errors.New("clockguard: already running")
)

// OffsetError reports a measured clock offset beyond the limit. Offset is
// the measured clock minus NTP time (positive: the clock is ahead).
type OffsetError struct {
	Offset time.Duration
	Limit  time.Duration
}

func (e *OffsetError) Error() string {
	return fmt.Sprintf("clockguard: clock offset %s from NTP, limit %s", signed(e.Offset.Round(time.Microsecond)), e.Limit)
}

// Unwrap makes errors.Is(err, ErrOffsetTooLarge) true.
func (e *OffsetError) Unwrap() error { return ErrOffsetTooLarge }

// NTPConfig configures an NTPChecker. Start from DefaultNTPConfig; every
// field is checked by Validate and none is silently corrected.
type NTPConfig struct {
	// Servers to query, each "host:port" (IPv6 as "[addr]:port"). At
	// least one; no duplicates.
	Servers []string
	// MaxOffset is the largest |offset| of the measured clock from the
	// servers' median that still passes. Default 250ms.
	MaxOffset time.Duration
	// Timeout bounds one query to one server (all servers are queried in
	// parallel, so it also bounds a Check). Default 2s; at least MaxRTT.
	Timeout time.Duration
	// Interval between checks in the periodic mode (Run/Start). Default
	// 1m; at least Timeout.
	Interval time.Duration
	// MaxRTT refuses an answer whose round trip is longer: the offset's
	// error bound is RTT/2. Default 500ms; at most 2×MaxOffset.
	MaxRTT time.Duration
	// MaxStratum refuses answers from servers further from a reference
	// clock. Default 15 (1..15).
	MaxStratum uint8
	// MinValid is the number of usable answers needed for a verdict. 0
	// means a majority of Servers (len/2+1); otherwise 1..len(Servers).
	MinValid int
}

// DefaultNTPConfig returns the defaults with the given servers.
func DefaultNTPConfig(servers ...string) NTPConfig {
	return NTPConfig{
		Servers:    slices.Clone(servers),
		MaxOffset:  250 * time.Millisecond,
		Timeout:    2 * time.Second,
		Interval:   time.Minute,
		MaxRTT:     500 * time.Millisecond,
		MaxStratum: 15,
	}
}

// Validate checks every field and the relations between them; the error
// names the field and the bound.
func (c NTPConfig) Validate() error {
	if len(c.Servers) == 0 {
		return errors.New("clockguard: NTPConfig.Servers: at least one server is required")
	}
	seen := make(map[string]bool, len(c.Servers))
	for i, s := range c.Servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil || host == "" {
			return fmt.Errorf("clockguard: NTPConfig.Servers[%d] %q: want host:port", i, s)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("clockguard: NTPConfig.Servers[%d] %q: port must be 1..65535", i, s)
		}
		if seen[s] {
			return fmt.Errorf("clockguard: NTPConfig.Servers[%d] %q: listed twice", i, s)
		}
		seen[s] = true
	}
	switch {
	case c.MaxOffset <= 0:
		return fmt.Errorf("clockguard: NTPConfig.MaxOffset %s: must be > 0", c.MaxOffset)
	case c.MaxRTT <= 0:
		return fmt.Errorf("clockguard: NTPConfig.MaxRTT %s: must be > 0", c.MaxRTT)
	case c.MaxRTT > 2*c.MaxOffset:
		return fmt.Errorf("clockguard: NTPConfig.MaxRTT %s: must be at most 2×MaxOffset (%s), or the offset's error bound RTT/2 exceeds MaxOffset", c.MaxRTT, 2*c.MaxOffset)
	case c.Timeout < c.MaxRTT:
		return fmt.Errorf("clockguard: NTPConfig.Timeout %s: must be at least MaxRTT (%s)", c.Timeout, c.MaxRTT)
	case c.Interval < c.Timeout:
		return fmt.Errorf("clockguard: NTPConfig.Interval %s: must be at least Timeout (%s)", c.Interval, c.Timeout)
	case c.MaxStratum < 1 || c.MaxStratum > 15:
		return fmt.Errorf("clockguard: NTPConfig.MaxStratum %d: must be 1..15", c.MaxStratum)
	case c.MinValid < 0 || c.MinValid > len(c.Servers):
		return fmt.Errorf("clockguard: NTPConfig.MinValid %d: must be 0 (majority) or 1..%d (the number of servers)", c.MinValid, len(c.Servers))
	}
	return nil
}

// need is the number of usable answers a verdict needs.
func (c NTPConfig) need() int {
	if c.MinValid > 0 {
		return c.MinValid
	}
	return len(c.Servers)/2 + 1
}

// ServerResult is the outcome of one query to one server.
type ServerResult struct {
	Server string
	// Offset is the measured clock minus this server's time (set whenever
	// the server answered, usable or not).
	Offset   time.Duration
	RTT      time.Duration
	Stratum  uint8
	Leap     uint8 // 0 no warning, 1 add second, 2 delete second, 3 not in sync
	KissCode string
	// Err is nil for a usable answer; otherwise it wraps one of the
	// per-server sentinels (ErrServerNoAnswer, ErrKissOfDeath, ...).
	Err error
}

// NTPResult is one check of the measured clock against its servers.
type NTPResult struct {
	// At is the measured clock's wall reading when the check ended.
	At time.Time
	// StartMono is the measured clock's monotonic reading when the check
	// began: a verdict speaks for the clock as it was from then on (a step
	// before StartMono is covered by it, a step after is not).
	StartMono time.Duration
	// Offset is the median over usable answers of the measured clock minus
	// NTP time: positive means the clock is ahead. Zero when Valid < Need.
	Offset time.Duration
	// Limit is NTPConfig.MaxOffset.
	Limit time.Duration
	// Valid is the number of usable answers, Need the number required.
	Valid, Need int
	// OK is the verdict: Valid >= Need and |Offset| <= Limit.
	OK bool
	// Servers holds one outcome per configured server, in config order.
	Servers []ServerResult
}

// NTPOption configures optional collaborators of an NTPChecker.
type NTPOption func(*NTPChecker)

// WithNTPLogger sets the logger (default slog.Default()).
func WithNTPLogger(l *slog.Logger) NTPOption { return func(c *NTPChecker) { c.log = l } }

// WithNTPCallback sets a function called after every periodic check with
// its result and error. It runs on the checker's goroutine: keep it short.
func WithNTPCallback(f func(NTPResult, error)) NTPOption {
	return func(c *NTPChecker) { c.onResult = f }
}

// NTPChecker measures one Clock against a set of NTP servers. It is safe
// for concurrent use; Check may be called while the periodic loop runs.
type NTPChecker struct {
	cfg      NTPConfig
	clock    Clock
	log      *slog.Logger
	onResult func(NTPResult, error)

	last    atomic.Pointer[ntpLast]
	running atomic.Bool
	loop    loop
	trigger chan struct{}
}

type ntpLast struct {
	res NTPResult
	err error
}

// NewNTPChecker returns a checker of clock (the clock IDs are stamped with;
// an Offset clock's offset counts). It returns cfg.Validate's error for a
// bad config and an error for a nil clock.
func NewNTPChecker(clock Clock, cfg NTPConfig, opts ...NTPOption) (*NTPChecker, error) {
	if clock == nil {
		return nil, errors.New("clockguard: NewNTPChecker: clock is nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Servers = slices.Clone(cfg.Servers)
	c := &NTPChecker{cfg: cfg, clock: clock, log: slog.Default(), trigger: make(chan struct{}, 1)}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Config returns the checker's configuration.
func (c *NTPChecker) Config() NTPConfig {
	cfg := c.cfg
	cfg.Servers = slices.Clone(cfg.Servers)
	return cfg
}

// wall is the hook handed to the NTP library: both local timestamps of a
// query (transmit t1 and receive t4) are read from the measured clock, so
// the library's offset is relative to it and not to the system clock.
func (c *NTPChecker) wall() time.Time {
	w, _ := c.clock.Now()
	return w
}

// Check queries every server in parallel and returns the verdict. The
// error is nil exactly when the result is OK; otherwise it wraps
// ErrNTPUnreachable, is an *OffsetError, or wraps ctx's error when ctx
// ended first.
func (c *NTPChecker) Check(ctx context.Context) (NTPResult, error) {
	res := NTPResult{Limit: c.cfg.MaxOffset, Need: c.cfg.need(), Servers: make([]ServerResult, len(c.cfg.Servers))}
	_, res.StartMono = c.clock.Now()
	if err := ctx.Err(); err != nil {
		res.At = c.wall()
		return res, fmt.Errorf("clockguard: NTP check: %w", err)
	}
	var wg sync.WaitGroup
	for i, s := range c.cfg.Servers {
		wg.Go(func() { res.Servers[i] = c.queryOne(ctx, s) })
	}
	wg.Wait()
	res.At = c.wall()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("clockguard: NTP check: %w", err)
	}

	offsets := make([]time.Duration, 0, len(res.Servers))
	var causes []string
	for _, sr := range res.Servers {
		if sr.Err == nil {
			offsets = append(offsets, sr.Offset)
			continue
		}
		causes = append(causes, sr.Server+": "+strings.TrimPrefix(sr.Err.Error(), "clockguard: "))
	}
	res.Valid = len(offsets)
	if res.Valid < res.Need {
		return res, fmt.Errorf("%w: %d of %d servers usable, need %d (%s)",
			ErrNTPUnreachable, res.Valid, len(res.Servers), res.Need, strings.Join(causes, "; "))
	}
	res.Offset = medianOffset(offsets)
	if res.Offset > c.cfg.MaxOffset || res.Offset < -c.cfg.MaxOffset {
		return res, &OffsetError{Offset: res.Offset, Limit: c.cfg.MaxOffset}
	}
	res.OK = true
	return res, nil
}

// queryOne asks one server and classifies the answer.
func (c *NTPChecker) queryOne(ctx context.Context, server string) ServerResult {
	sr := ServerResult{Server: server}
	timeout := c.cfg.Timeout
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < timeout {
			timeout = max(left, time.Millisecond)
		}
	}
	var stops []func() bool
	var mu sync.Mutex
	// The library reads the local clock twice, for the transmit (t1) and
	// the receive (t4) timestamps; the monotonic readings beside them tell
	// whether the measured clock stepped in between, which the offset
	// would average in (half the step) and the round trip hide (the
	// library clamps a negative one to 0).
	var reads int
	var firstWall, lastWall time.Time
	var firstMono, lastMono time.Duration
	opt := ntp.QueryOptions{
		Timeout: timeout,
		GetSystemTime: func() time.Time {
			w, m := c.clock.Now()
			mu.Lock()
			if reads == 0 {
				firstWall, firstMono = w, m
			}
			lastWall, lastMono = w, m
			reads++
			mu.Unlock()
			return w
		},
		// Dial with ctx, and close the socket if ctx ends mid-query so a
		// cancelled Check returns at once instead of after Timeout.
		Dialer: func(local, remote string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "udp", remote)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			stops = append(stops, context.AfterFunc(ctx, func() { conn.Close() }))
			mu.Unlock()
			return conn, nil
		},
	}
	resp, err := ntp.QueryWithOptions(server, opt)
	mu.Lock()
	for _, stop := range stops {
		stop()
	}
	mu.Unlock()
	if err != nil {
		if isNetErr(err) {
			sr.Err = fmt.Errorf("%w: %w", ErrServerNoAnswer, err)
		} else {
			sr.Err = fmt.Errorf("%w: %w", ErrInvalidResponse, err)
		}
		return sr
	}
	sr.Offset = -resp.ClockOffset
	sr.RTT = resp.RTT
	sr.Stratum = resp.Stratum
	sr.Leap = uint8(resp.Leap)
	sr.KissCode = resp.KissCode
	sr.Err = c.classify(resp)
	mu.Lock()
	step := StepSize(firstWall, firstMono, lastWall, lastMono)
	mu.Unlock()
	if sr.Err == nil && (step >= queryStepLimit || step <= -queryStepLimit) {
		sr.Err = fmt.Errorf("%w: the measured clock stepped %s during the query", ErrInvalidResponse, signed(-step))
	}
	return sr
}

// classify refuses an answer for the first reason that applies.
func (c *NTPChecker) classify(resp *ntp.Response) error {
	switch {
	case resp.IsKissOfDeath():
		code := resp.KissCode
		if code == "" {
			code = "(unprintable code)"
		}
		return fmt.Errorf("%w %s", ErrKissOfDeath, code)
	case resp.Leap == ntp.LeapNotInSync:
		return fmt.Errorf("%w (leap indicator 3)", ErrNotInSync)
	case resp.Stratum > c.cfg.MaxStratum:
		return fmt.Errorf("%w: stratum %d, limit %d", ErrStratum, resp.Stratum, c.cfg.MaxStratum)
	}
	if err := resp.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidResponse, err)
	}
	if resp.RTT > c.cfg.MaxRTT {
		return fmt.Errorf("%w: %s, limit %s", ErrRTT, resp.RTT, c.cfg.MaxRTT)
	}
	return nil
}

// queryStepLimit is the largest step of the measured clock between a
// query's two local timestamps that its answer survives: the step
// detector's default threshold, below which a step is jitter.
const queryStepLimit = time.Millisecond

func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded)
}

// medianOffset returns the median of offsets (the mean of the two middle
// values for an even count). offsets must not be empty; it is reordered.
func medianOffset(offsets []time.Duration) time.Duration {
	slices.Sort(offsets)
	n := len(offsets)
	if n%2 == 1 {
		return offsets[n/2]
	}
	a, b := offsets[n/2-1], offsets[n/2]
	return a + (b-a)/2
}

// Last returns the result of the latest periodic check; ok is false before
// the first one has finished.
func (c *NTPChecker) Last() (res NTPResult, err error, ok bool) {
	l := c.last.Load()
	if l == nil {
		return NTPResult{}, nil, false
	}
	return l.res, l.err, true
}

// Run checks at once and then every Interval (every NTPRetryInterval while
// checks fail, and at once on Trigger) until ctx ends, keeping the
// latest result for Last, calling the callback, and logging each change of
// verdict. It returns ctx's error, or ErrRunning if a loop already runs.
func (c *NTPChecker) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	t := time.NewTimer(c.cfg.Interval)
	defer t.Stop()
	prevOK, first := false, true
	for {
		res, err := c.Check(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.last.Store(&ntpLast{res: res, err: err})
		if first || res.OK != prevOK {
			c.logVerdict(res, err)
		}
		prevOK, first = res.OK, false
		if c.onResult != nil {
			c.onResult(res, err)
		}
		// A failing check is tried again soon: serving resumes within
		// about a second of NTP agreeing again, not a whole interval.
		next := c.cfg.Interval
		if !res.OK {
			next = min(next, NTPRetryInterval)
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-c.trigger:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
	}
}

// NTPRetryInterval is how soon the periodic loop checks again after a
// check that failed (servers unreachable or the offset beyond the limit),
// when that is sooner than the interval.
const NTPRetryInterval = time.Second

// Trigger asks the periodic loop for a check now (the node calls it after
// a step of its clock, either way): the result reaches the callback as
// every periodic one does. Triggers while a check runs coalesce into one
// more check. Without a running loop it does nothing.
func (c *NTPChecker) Trigger() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

func (c *NTPChecker) logVerdict(res NTPResult, err error) {
	if res.OK {
		c.log.Info("clockguard: NTP check passed", "offset", res.Offset, "limit", res.Limit,
			"valid", res.Valid, "servers", len(res.Servers))
		return
	}
	c.log.Warn("clockguard: NTP check failed", "offset", res.Offset, "limit", res.Limit,
		"valid", res.Valid, "need", res.Need, "reason", err)
}

// Start runs the periodic loop on its own goroutine until Stop. It returns
// ErrRunning if a loop already runs.
func (c *NTPChecker) Start() error { return c.loop.start(c.Run) }

// Stop ends a loop begun by Start and waits for it. It is safe to call more
// than once, or without Start.
func (c *NTPChecker) Stop() { c.loop.stop() }

// loop is the Start/Stop lifecycle shared by the checker and the detector.
type loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *loop) start(run func(context.Context) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		return ErrRunning
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	go func() {
		defer close(done)
		_ = run(ctx) // ends with ctx's error on Stop
	}()
	return nil
}

func (l *loop) stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// signed formats d with an explicit sign ("+1.5s", "-250ms", "0s").
func signed(d time.Duration) string {
	if d > 0 {
		return "+" + d.String()
	}
	return d.String()
}
