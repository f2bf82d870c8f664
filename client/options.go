package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
)

// Defaults of the options.
const (
	// DefaultMaxAge is how long a fetched batch may be handed out,
	// counted from the start of the RPC that fetched it; its IDs are
	// dropped after that.
	DefaultMaxAge = 100 * time.Millisecond
	// DefaultBatchWindow is how much of the caller's demand one batch
	// covers: at 1 M IDs/s a batch holds 10,000 IDs.
	DefaultBatchWindow = 10 * time.Millisecond
	// DefaultMinBatch is the batch size of an idle client.
	DefaultMinBatch = 16
	// DefaultMaxBatch bounds a refill; the server's own bound (its Info's
	// max_range, or max_batch for a node without NextRange, or an
	// INVALID_ARGUMENT) lowers it further.
	DefaultMaxBatch = 100_000
	// DefaultCallTimeout bounds one attempt at one endpoint before the
	// client puts it down and fails over to the next; a caller's deadline
	// may shorten an attempt further (see WithCallTimeout).
	DefaultCallTimeout = time.Second
)

// Bounds of the options, checked by New.
const (
	minMaxAge      = 8 * time.Millisecond
	maxMaxAge      = time.Hour
	minBatchWindow = 100 * time.Microsecond
	maxBatchLimit  = 1_000_000
	minCallTimeout = 10 * time.Millisecond
	maxCallTimeout = 5 * time.Minute
	// MaxNextN is the largest count NextN accepts.
	MaxNextN = 1 << 24
	// MaxNextRange is the largest count NextRange accepts. Runs cost
	// little memory, but a node issues IDs at its generator's rate: a
	// larger count would only hold the caller longer than one call should.
	MaxNextRange = 1 << 24
)

// An Option configures a Client.
type Option func(*options)

type options struct {
	generator   string
	clock       Clock
	tlsConfig   *tls.Config
	maxAge      time.Duration
	batchWindow time.Duration
	minBatch    int
	maxBatch    int
	callTimeout time.Duration
	logger      *slog.Logger
	dialOptions []grpc.DialOption
	health      bool
	// lookup resolves a DNS name's host to addresses; resolveEvery is how
	// often the names are resolved again.
	lookup       func(ctx context.Context, host string) ([]string, error)
	resolveEvery time.Duration
}

func defaultOptions() options {
	return options{
		maxAge:       DefaultMaxAge,
		batchWindow:  DefaultBatchWindow,
		minBatch:     DefaultMinBatch,
		maxBatch:     DefaultMaxBatch,
		callTimeout:  DefaultCallTimeout,
		health:       true,
		lookup:       net.DefaultResolver.LookupHost,
		resolveEvery: resolveEvery,
	}
}

// WithGenerator names the generator to ask for IDs; empty (the default)
// means the node's default generator. The health service watched is the
// generator's name ("" for the default: the node's overall health).
func WithGenerator(name string) Option { return func(o *options) { o.generator = name } }

// WithClock injects the clock that ages batches and measures the rate.
// The default is the machine's clock.
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithTLS dials every endpoint with TLS; a config with Certificates (or
// GetClientCertificate) set makes it mTLS. nil (the default) dials in
// plaintext. See LoadTLS.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tlsConfig = cfg } }

// WithMaxAge sets how long a fetched batch's IDs may be handed out, from
// the start of the RPC that fetched it; older IDs are dropped, never
// served. Between 8ms and 1h; default DefaultMaxAge.
func WithMaxAge(d time.Duration) Option { return func(o *options) { o.maxAge = d } }

// WithBatchWindow sets how much of the measured demand one batch covers
// (batch size = rate × window, within the batch bounds). At least 100µs and
// at most half of MaxAge; default DefaultBatchWindow.
func WithBatchWindow(d time.Duration) Option { return func(o *options) { o.batchWindow = d } }

// WithBatchBounds sets the smallest batch (the size of an idle client's
// batch) and the largest. 1 ≤ min ≤ max ≤ 1,000,000; defaults
// DefaultMinBatch and DefaultMaxBatch.
func WithBatchBounds(minimum, maximum int) Option {
	return func(o *options) { o.minBatch, o.maxBatch = minimum, maximum }
}

// WithCallTimeout bounds one attempt at one endpoint: its RPCs (on the
// endpoint's first use a health check and Info, then NextRange or
// NextIDs), which carry the attempt's deadline. A caller's deadline
// shortens an attempt that another endpoint follows to half of the
// caller's remaining time (at least 10ms), so a caller keeps time to fail
// over from an endpoint that hangs; the round's last endpoint gets the
// rest of it. An endpoint that misses the deadline it was sent counts as
// failed (it is tried after the others for a second) and the client fails
// over to the next; a caller that gives up sooner does not count against
// it. Until an endpoint has answered once, the round's last attempt at it
// gets 10s if CallTimeout is shorter: its connection, TLS handshake and
// first calls are inside that attempt, and a process starting on a loaded
// machine can take seconds over them (the caller's deadline still cuts
// it). Between 10ms and 5m; default DefaultCallTimeout.
func WithCallTimeout(d time.Duration) Option { return func(o *options) { o.callTimeout = d } }

// WithLogger sets the logger for failovers and health changes; the
// default is slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithDialOptions appends gRPC dial options (after the client's own).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// WithResolveInterval sets how often the DNS names among the endpoints
// ("dns:///firn-headless.ns.svc:7300") are resolved again (default 30 s,
// at least 100 ms). A failed round of calls asks for a resolution too, at
// most once a second.
func WithResolveInterval(d time.Duration) Option { return func(o *options) { o.resolveEvery = d } }

// WithLookup replaces the DNS lookup of the endpoints' names (default
// net.DefaultResolver.LookupHost): for a resolver of your own, or a test
// that decides what a name resolves to.
func WithLookup(lookup func(ctx context.Context, host string) ([]string, error)) Option {
	return func(o *options) { o.lookup = lookup }
}

// WithoutHealthCheck turns off the grpc.health.v1 watch of each endpoint;
// the client then learns of a failing endpoint only from its RPCs.
func WithoutHealthCheck() Option { return func(o *options) { o.health = false } }

func (o *options) validate() error {
	switch {
	case o.maxAge < minMaxAge || o.maxAge > maxMaxAge:
		return optionErr("MaxAge %v outside [%v, %v]", o.maxAge, minMaxAge, maxMaxAge)
	case o.batchWindow < minBatchWindow:
		return optionErr("BatchWindow %v below %v", o.batchWindow, minBatchWindow)
	case o.batchWindow > o.maxAge/2:
		return optionErr("BatchWindow %v above half of MaxAge (%v)", o.batchWindow, o.maxAge/2)
	case o.minBatch < 1:
		return optionErr("min batch %d below 1", o.minBatch)
	case o.maxBatch > maxBatchLimit:
		return optionErr("max batch %d above %d", o.maxBatch, maxBatchLimit)
	case o.minBatch > o.maxBatch:
		return optionErr("min batch %d above max batch %d", o.minBatch, o.maxBatch)
	case o.callTimeout < minCallTimeout || o.callTimeout > maxCallTimeout:
		return optionErr("CallTimeout %v outside [%v, %v]", o.callTimeout, minCallTimeout, maxCallTimeout)
	case o.resolveEvery < 100*time.Millisecond:
		return optionErr("ResolveInterval %v below 100ms", o.resolveEvery)
	case o.lookup == nil:
		return optionErr("Lookup is nil")
	}
	return nil
}

// LoadTLS builds a client TLS config from PEM files: caFile is the CA that
// signed the servers' certificates (empty: the system roots); certFile and
// keyFile, both or neither, are the client's certificate for mTLS;
// serverName overrides the name checked in the server's certificate
// (empty: the host of each endpoint).
func LoadTLS(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("client: TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: TLS CA %s holds no PEM certificate", ErrInvalidOption, caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%w: TLS client certificate and key go together (cert %q, key %q)", ErrInvalidOption, certFile, keyFile)
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client: TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
