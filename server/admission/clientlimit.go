package admission

import (
	"context"
	"crypto/x509"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// flowKeyCtx carries the flow key of an HTTP request (WithHTTPFlowKey);
// callerNamesCtx its verified client certificate's names.
type (
	flowKeyCtx     struct{}
	callerNamesCtx struct{}
)

// WithHTTPFlowKey marks an HTTP request's context with its client: the verified
// client certificate's name under mTLS, else the remote host — not its
// port: an HTTP client opens connections at will, and would otherwise
// escape --client-rate and fair share by opening another.
func WithHTTPFlowKey(ctx context.Context, r *http.Request) context.Context {
	host := r.RemoteAddr
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	key := "host:" + host
	if r.TLS != nil {
		if name := certName(r.TLS.VerifiedChains); name != "" {
			key = "cert:" + name
			ctx = context.WithValue(ctx, callerNamesCtx{}, certNames(r.TLS.VerifiedChains))
		}
	}
	return context.WithValue(ctx, flowKeyCtx{}, key)
}

// CallerNames are the names a request's verified client certificate
// carries, its subject CN then its DNS SANs: what a generator's allow list
// is matched against. None without a verified certificate. An HTTP
// request's context must have been marked by WithHTTPFlowKey.
func CallerNames(ctx context.Context) []string {
	if ns, ok := ctx.Value(callerNamesCtx{}).([]string); ok {
		return ns
	}
	if _, http := ctx.Value(flowKeyCtx{}).(string); http {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		return certNames(ti.State.VerifiedChains)
	}
	return nil
}

// certNames is a verified client certificate's subject CN (when set) and
// DNS names.
func certNames(chains [][]*x509.Certificate) []string {
	if len(chains) == 0 || len(chains[0]) == 0 {
		return nil
	}
	leaf := chains[0][0]
	var ns []string
	if leaf.Subject.CommonName != "" {
		ns = append(ns, leaf.Subject.CommonName)
	}
	return append(ns, leaf.DNSNames...)
}

// FlowKey names the client a request comes from, for fair share and
// --client-rate: the verified client certificate's name under mTLS (every
// connection of one identity is one client), else the gRPC connection or
// the HTTP request's remote host (WithHTTPFlowKey).
func FlowKey(ctx context.Context) string {
	if k, ok := ctx.Value(flowKeyCtx{}).(string); ok {
		return k
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		if name := certName(ti.State.VerifiedChains); name != "" {
			return "cert:" + name
		}
	}
	if p.Addr == nil {
		return ""
	}
	return "addr:" + p.Addr.String()
}

// certName is a verified client certificate's subject CN, or its first DNS
// name when it has no CN; "" without one.
func certName(chains [][]*x509.Certificate) string {
	if len(chains) == 0 || len(chains[0]) == 0 {
		return ""
	}
	leaf := chains[0][0]
	if leaf.Subject.CommonName != "" {
		return leaf.Subject.CommonName
	}
	if len(leaf.DNSNames) > 0 {
		return leaf.DNSNames[0]
	}
	return ""
}

// ClientLimits is --client-rate for one generator: a token bucket per
// client (flowKey) of rate IDs/s holding at most burst.
type ClientLimits struct {
	rate, burst float64
	mono        func() time.Duration

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Duration // monotonic reading of tokens
}

// maxIdleBuckets bounds the buckets kept for clients: past it, the full
// ones (clients that have not asked for a burst's time) are forgotten.
const maxIdleBuckets = 4096

func NewClientLimits(rate float64, burst int, mono func() time.Duration) *ClientLimits {
	return &ClientLimits{rate: rate, burst: float64(burst), mono: mono, buckets: map[string]*bucket{}}
}

// Rate is the bucket's refill rate, in IDs/s.
func (l *ClientLimits) Rate() float64 { return l.rate }

// Burst is the most a bucket holds, in IDs.
func (l *ClientLimits) Burst() int64 { return int64(l.burst) }

// Take spends n tokens of key's bucket, or says how long until it holds n
// (ok false); a request larger than the burst can never pass (wait < 0).
func (l *ClientLimits) Take(key string, n int) (wait time.Duration, ok bool) {
	if float64(n) > l.burst {
		return -1, false
	}
	now := l.mono()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxIdleBuckets {
			l.sweep(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+(now-b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= float64(n) {
		b.tokens -= float64(n)
		return 0, true
	}
	return time.Duration((float64(n) - b.tokens) / l.rate * float64(time.Second)), false
}

// sweep forgets the buckets that have refilled. Called with mu held.
func (l *ClientLimits) sweep(now time.Duration) {
	for k, b := range l.buckets {
		if b.tokens+(now-b.at).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}
