package server

import (
	"context"
	"maps"
	"math"
	"math/bits"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcMetrics are the gRPC server metrics every node exports — the
// names, labels and meaning of the Prometheus provider of
// go-grpc-middleware, which dashboards and alerts know
// (grpc_server_started_total, grpc_server_handled_total,
// grpc_server_msg_received_total, grpc_server_msg_sent_total,
// grpc_server_handling_seconds) — kept by the node's own collector, so
// that a call costs what it must and no more:
//   - each method's counters are resolved once, when the services are
//     registered (initialize), not looked up by label values per call;
//   - a call writes three counters of one stripe, on one cache line, and
//     one bucket, and the stripe is its P's (methodMetrics.local): calls
//     on different CPUs write different lines, found in their CPU's
//     cache (with shared counters, each call moved about eight lines
//     between the CPUs; with a stripe drawn at random, about one);
//   - the unary counts derived from others are not kept twice: a unary
//     call receives one message as it starts (received = started) and
//     sends one as it ends, whatever its code (sent = the sum of handled).
//
// A scrape sums the stripes. The provider's interceptor, and then
// client_golang's vectors resolved once, cost about 6 % and 3 % of the
// node's CPU per call.
type grpcMetrics struct {
	started, handled, received, sent, handling *prometheus.Desc
	// byMethod is written by initialize, before the server serves, and
	// only read after; the methods in the order seen, for scrapes.
	byMethod map[string]*methodMetrics
	methods  []*methodMetrics
	// unknowns are the methods initialize did not see (copied on write).
	unknowns atomic.Pointer[map[string]*methodMetrics]
	stripes  int
	// now is the node's clock's monotonic reading.
	now func() time.Duration
}

// methodMetrics are one method's series: its labels and its stripes.
// local hands out a stripe per P: sync.Pool keeps one object per P at
// hand, and a stripe got and put back on one P stays that P's, so calls
// on different CPUs write different lines and a call finds its line in
// its CPU's cache. A stripe the pool drops (it empties itself over two
// collections) is handed out again by New, round-robin; the stripes
// themselves are never dropped.
type methodMetrics struct {
	typ, service, method string
	stripes              []stripe
	local                sync.Pool
	next                 atomic.Uint32
}

// stripe is a share of one method's counts. hot is what every call
// writes (on one line of its own); the handled counts of codes other than
// OK and the histogram's buckets follow.
type stripe struct {
	hot struct {
		started  atomic.Uint64
		ok       atomic.Uint64 // handled with code OK
		sumNanos atomic.Uint64 // the handling times' sum
		_        [cacheLine - 24]byte
	}
	handled [codes.Unauthenticated + 1]atomic.Uint64 // by code (OK's is hot.ok)
	buckets [len(handlingBuckets) + 1]atomic.Uint64  // by handlingBuckets' upper bounds, the last +Inf
	_       [cacheLine]byte
}

const cacheLine = 64

// handlingBuckets are grpc_server_handling_seconds' buckets: 100 µs to
// 2.5 s.
var handlingBuckets = [...]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// handlingBounds are handlingBuckets in nanoseconds, for the bucket
// search on the call path.
var handlingBounds = func() []time.Duration {
	d := make([]time.Duration, len(handlingBuckets))
	for i, b := range handlingBuckets {
		d[i] = time.Duration(math.Round(b * 1e9))
	}
	return d
}()

func newGRPCMetrics(now func() time.Duration) *grpcMetrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	return &grpcMetrics{
		started:  prometheus.NewDesc("grpc_server_started_total", "RPCs the server started.", labels, nil),
		handled:  prometheus.NewDesc("grpc_server_handled_total", "RPCs the server completed, by their code, whatever it is.", append(labels, "grpc_code"), nil),
		received: prometheus.NewDesc("grpc_server_msg_received_total", "Messages the server received (one per unary call).", labels, nil),
		sent:     prometheus.NewDesc("grpc_server_msg_sent_total", "Messages the server sent (one per unary call, as the call ended).", labels, nil),
		handling: prometheus.NewDesc("grpc_server_handling_seconds", "Seconds from a call's start to its handler's answer.", labels, nil),
		byMethod: map[string]*methodMetrics{},
		// Several stripes per CPU: a P keeps one at hand, and calls
		// waiting in a handler on it may take others.
		stripes: 1 << bits.Len(uint(min(4*runtime.GOMAXPROCS(0), 256)-1)),
		now:     now,
	}
}

func (m *grpcMetrics) collectors() []prometheus.Collector { return []prometheus.Collector{m} }

// Describe is prometheus.Collector's.
func (m *grpcMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.started, m.handled, m.received, m.sent, m.handling} {
		ch <- d
	}
}

// Collect is prometheus.Collector's: each method's stripes summed.
func (m *grpcMetrics) Collect(ch chan<- prometheus.Metric) {
	all := m.methods
	if u := m.unknowns.Load(); u != nil {
		for _, mm := range *u {
			all = append(all[:len(all):len(all)], mm)
		}
	}
	for _, mm := range all {
		var started, sumNanos uint64
		var handled [codes.Unauthenticated + 1]uint64
		var buckets [len(handlingBuckets) + 1]uint64
		for i := range mm.stripes {
			s := &mm.stripes[i]
			started += s.hot.started.Load()
			handled[codes.OK] += s.hot.ok.Load()
			for c := range s.handled {
				if codes.Code(c) != codes.OK {
					handled[c] += s.handled[c].Load()
				}
			}
			for b := range s.buckets {
				buckets[b] += s.buckets[b].Load()
			}
			sumNanos += s.hot.sumNanos.Load()
		}
		lv := []string{mm.typ, mm.service, mm.method}
		var sent uint64
		for c, n := range handled {
			sent += n
			ch <- prometheus.MustNewConstMetric(m.handled, prometheus.CounterValue, float64(n), append(lv, codes.Code(c).String())...)
		}
		// A call counted handled after its start was read is counted
		// started too: a scrape never shows more ended than started.
		started = max(started, sent)
		ch <- prometheus.MustNewConstMetric(m.started, prometheus.CounterValue, float64(started), lv...)
		ch <- prometheus.MustNewConstMetric(m.received, prometheus.CounterValue, float64(started), lv...)
		ch <- prometheus.MustNewConstMetric(m.sent, prometheus.CounterValue, float64(sent), lv...)
		cum := make(map[float64]uint64, len(handlingBuckets))
		var count uint64
		for b, ub := range handlingBuckets {
			count += buckets[b]
			cum[ub] = count
		}
		count += buckets[len(handlingBuckets)]
		ch <- prometheus.MustNewConstHistogram(m.handling, count, float64(sumNanos)/1e9, cum, lv...)
	}
}

// initialize resolves the series of every method srv serves, every code
// of grpc_server_handled_total among them, so that each exists (at zero)
// from the first scrape. Call it after the services are registered and
// before the server serves.
func (m *grpcMetrics) initialize(srv *grpc.Server) {
	for service, info := range srv.GetServiceInfo() {
		for _, mi := range info.Methods {
			typ := "unary"
			switch {
			case mi.IsClientStream && mi.IsServerStream:
				typ = "bidi_stream"
			case mi.IsClientStream:
				typ = "client_stream"
			case mi.IsServerStream:
				typ = "server_stream"
			}
			mm := m.newMethod(typ, service, mi.Name)
			m.byMethod["/"+service+"/"+mi.Name] = mm
			m.methods = append(m.methods, mm)
		}
	}
}

func (m *grpcMetrics) newMethod(typ, service, method string) *methodMetrics {
	mm := &methodMetrics{typ: typ, service: service, method: method, stripes: make([]stripe, m.stripes)}
	mm.local.New = func() any { return &mm.stripes[mm.next.Add(1)&uint32(len(mm.stripes)-1)] }
	return mm
}

// unary is the unary server interceptor: a call counted started (and its
// message received), then handled with its code and its time (and its
// message sent, as the provider counts it: whatever the outcome).
func (m *grpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	mm := m.byMethod[info.FullMethod]
	if mm == nil {
		mm = m.unknown(info.FullMethod)
	}
	// The stripe is taken from this P for the start and again for the
	// end: a handler may wait, and other calls on the P meanwhile.
	s := mm.local.Get().(*stripe)
	s.hot.started.Add(1)
	mm.local.Put(s)
	start := m.now()
	resp, err := handler(ctx, req)
	took := m.now() - start
	s = mm.local.Get().(*stripe)
	defer mm.local.Put(s)
	if err == nil {
		s.hot.ok.Add(1)
	} else if code := status.Code(err); int(code) < len(s.handled) {
		s.handled[code].Add(1)
	} else {
		s.handled[codes.Unknown].Add(1) // not a gRPC code: counted as status does
	}
	s.hot.sumNanos.Add(uint64(max(took, 0)))
	b := 0
	for b < len(handlingBounds) && took > handlingBounds[b] {
		b++
	}
	s.buckets[b].Add(1)
	return resp, err
}

// unknown resolves the series of a method initialize did not see (none
// is registered later; kept so that no call goes uncounted).
func (m *grpcMetrics) unknown(full string) *methodMetrics {
	for {
		old := m.unknowns.Load()
		var next map[string]*methodMetrics
		if old != nil {
			if mm := (*old)[full]; mm != nil {
				return mm
			}
			next = maps.Clone(*old)
		} else {
			next = map[string]*methodMetrics{}
		}
		mm := m.newMethod("unary", service(full), method(full))
		next[full] = mm
		if m.unknowns.CompareAndSwap(old, &next) {
			return mm
		}
	}
}

// service and method split a full method name, /pkg.Service/Method.
func service(full string) string {
	s, _, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	return s
}

func method(full string) string {
	_, me, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	return me
}
