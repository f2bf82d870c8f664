package server

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/firnid/firn/internal/percpu"
)

// grpcMetrics are the gRPC server metrics every node exports — the
// names, labels and meaning of the Prometheus provider of
// go-grpc-middleware, which dashboards and alerts know
// (grpc_server_started_total, grpc_server_handled_total,
// grpc_server_msg_received_total, grpc_server_msg_sent_total,
// grpc_server_handling_seconds) — kept by the node's own collector, so
// that a call costs what it must and no more:
//   - each method's handler is wrapped in its counts when its service
//     is registered (countedServer, counted): a call neither passes an
//     interceptor nor looks its method up by name or label values;
//   - a call writes three counters of one stripe, on one cache line, and
//     one bucket, and the stripe is its P's (percpu.Set): calls
//     on different CPUs write different lines, found in their CPU's
//     cache (with shared counters, each call moved about eight lines
//     between the CPUs; with a stripe drawn at random, about one);
//   - the unary counts derived from others are not kept twice: a unary
//     call receives one message as it starts (received = started) and
//     sends one as it ends, whatever its code (sent = the sum of handled).
//
// A scrape sums the stripes. The provider's interceptor, and then
// client_golang's vectors resolved once, cost about 6 % and 3 % of the
// node's CPU per call; an interceptor of the node's own with its stripes,
// about 1 %.
type grpcMetrics struct {
	started, handled, received, sent, handling *prometheus.Desc
	// methods are the series of every method registered, in that order
	// (add; services are registered before the server serves).
	mu      sync.Mutex
	methods []*methodMetrics
	// now is the node's clock's monotonic reading.
	now func() time.Duration
}

// methodMetrics are one method's series: its labels and its stripes, one
// at hand per P (percpu), so that calls on different CPUs write different
// lines and a call finds its line in its CPU's cache.
type methodMetrics struct {
	typ, service, method string
	stripes              *percpu.Set[stripe]
}

// stripe is a share of one method's counts. hot is what every call
// writes (on one line of its own); the handled counts of codes other than
// OK and the histogram's buckets follow.
type stripe struct {
	hot struct {
		started  atomic.Uint64
		ok       atomic.Uint64 // handled with code OK
		sumNanos atomic.Uint64 // the handling times' sum
		_        [percpu.CacheLine - 24]byte
	}
	handled [codes.Unauthenticated + 1]atomic.Uint64 // by code (OK's is hot.ok)
	buckets [len(handlingBuckets) + 1]atomic.Uint64  // by handlingBuckets' upper bounds, the last +Inf
	_       [percpu.CacheLine]byte                   // 6 lines in all: the hot one, 256 bytes of counts, then this
}

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
		now:      now,
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
	m.mu.Lock()
	all := m.methods
	m.mu.Unlock()
	for _, mm := range all {
		var started, sumNanos uint64
		var handled [codes.Unauthenticated + 1]uint64
		var buckets [len(handlingBuckets) + 1]uint64
		stripes := mm.stripes.All()
		for i := range stripes {
			s := &stripes[i]
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

// countedServer is a gRPC server that registers its services with each
// unary method's handler wrapped in the method's counts (counted): a call is
// counted by its own handler, with its method's series at hand, not by an
// interceptor that looks the method up by name. Every method, streams
// among them, has its series (at zero) from the first scrape, every code
// of grpc_server_handled_total among them. The embedded server gives
// reflection what it reads (GetServiceInfo).
type countedServer struct {
	*grpc.Server
	m *grpcMetrics
}

// RegisterService is grpc.ServiceRegistrar's, registering sd counted.
// Register every service before the server serves.
func (s countedServer) RegisterService(sd *grpc.ServiceDesc, impl any) {
	s.Server.RegisterService(s.m.counted(sd), impl)
}

// counted is sd with each unary handler counting its calls: started (and
// its message received) as it begins, then handled with its code and its
// time (and its message sent, as the provider counts it: whatever the
// outcome). A call is counted from the moment the server hands it to the
// handler, so a request that does not decode is counted too, handled with
// the code the server gave it. Streams keep their series, at zero.
func (m *grpcMetrics) counted(sd *grpc.ServiceDesc) *grpc.ServiceDesc {
	c := *sd
	c.Methods = slices.Clone(sd.Methods)
	for i := range c.Methods {
		mm := m.add("unary", sd.ServiceName, c.Methods[i].MethodName)
		c.Methods[i].Handler = mm.counting(m.now, c.Methods[i].Handler)
	}
	for _, st := range sd.Streams {
		typ := "bidi_stream"
		switch {
		case st.ClientStreams && !st.ServerStreams:
			typ = "client_stream"
		case st.ServerStreams && !st.ClientStreams:
			typ = "server_stream"
		}
		m.add(typ, sd.ServiceName, st.StreamName)
	}
	return &c
}

// add makes a method's series, in the order registered (the scrapes').
func (m *grpcMetrics) add(typ, service, method string) *methodMetrics {
	mm := &methodMetrics{typ: typ, service: service, method: method, stripes: percpu.NewSet[stripe]()}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.methods = append(m.methods, mm)
	return mm
}

// counting wraps a unary handler in mm's counts. The stripe is the P's
// as the call starts and is kept to its end: a handler that waits lets
// other calls on the P take other stripes meanwhile. The interceptor the
// server passes (none on a node) still runs, inside the counts.
//
// Not inlined: the closure of an inlined function is compiled with its
// own calls left out of line (atomic adds among them, as calls).
//
//go:noinline
func (mm *methodMetrics) counting(now func() time.Duration, h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		s := mm.stripes.Get()
		s.hot.started.Add(1)
		start := now()
		resp, err := h(srv, ctx, dec, icpt)
		took := now() - start
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
		mm.stripes.Put(s)
		return resp, err
	}
}
