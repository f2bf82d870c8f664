package server

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/firnid/firn/internal/testing/benchpar"
)

// The counted handlers' counts, summed over their stripes, are the
// provider's: started and received one per call, handled by code, sent
// one per call whatever its code, and the handling time in its bucket —
// from calls on many goroutines, a request that does not decode among
// them; a stream's series are there, at zero.
func TestGRPCMetricsCounts(t *testing.T) {
	var mu sync.Mutex
	var clock time.Duration
	m := newGRPCMetrics(func() time.Duration { mu.Lock(); defer mu.Unlock(); return clock })
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.collectors()...)

	// A call's outcome: how long its handler takes and what it returns.
	type outcome struct {
		took time.Duration
		err  error
	}
	handler := func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		var o outcome
		if err := dec(&o); err != nil {
			return nil, err
		}
		if o.took > 0 {
			mu.Lock()
			clock += o.took
			mu.Unlock()
		}
		return nil, o.err
	}
	sd := m.counted(&grpc.ServiceDesc{
		ServiceName: "firn.v1.IDService",
		Methods:     []grpc.MethodDesc{{MethodName: "NextID", Handler: handler}},
		Streams:     []grpc.StreamDesc{{StreamName: "Watch", ServerStreams: true}},
	})
	call := func(took time.Duration, err error) {
		sd.Methods[0].Handler(nil, context.Background(), func(v any) error {
			*v.(*outcome) = outcome{took, err}
			return nil
		}, nil)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				call(0, nil)
			}
		})
	}
	wg.Wait()
	call(3*time.Millisecond, status.Error(codes.Unavailable, "x"))
	call(0, errors.New("plain")) // Unknown, as status.Code says
	sd.Methods[0].Handler(nil, context.Background(), func(any) error {
		return status.Error(codes.ResourceExhausted, "grpc: received message larger than max")
	}, nil)

	fams := map[string]*dto.MetricFamily{}
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range got {
		fams[f.GetName()] = f
	}
	find := func(name, method string, labels map[string]string) *dto.Metric {
		t.Helper()
	next:
		for _, mt := range fams[name].GetMetric() {
			lv := map[string]string{}
			for _, l := range mt.GetLabel() {
				lv[l.GetName()] = l.GetValue()
			}
			if lv["grpc_method"] != method {
				continue
			}
			for k, v := range labels {
				if lv[k] != v {
					continue next
				}
			}
			return mt
		}
		t.Fatalf("no %s{grpc_method=%s %v}", name, method, labels)
		return nil
	}
	const calls = 8*1000 + 3
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"grpc_server_started_total", nil, calls},
		{"grpc_server_msg_received_total", nil, calls},
		{"grpc_server_msg_sent_total", nil, calls},
		{"grpc_server_handled_total", map[string]string{"grpc_code": "OK"}, 8000},
		{"grpc_server_handled_total", map[string]string{"grpc_code": "Unavailable"}, 1},
		{"grpc_server_handled_total", map[string]string{"grpc_code": "Unknown"}, 1},
		{"grpc_server_handled_total", map[string]string{"grpc_code": "ResourceExhausted"}, 1},
		{"grpc_server_handled_total", map[string]string{"grpc_code": "NotFound"}, 0},
	} {
		if v := find(c.name, "NextID", c.labels).GetCounter().GetValue(); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	h := find("grpc_server_handling_seconds", "NextID", nil).GetHistogram()
	if h.GetSampleCount() != calls || h.GetSampleSum() < 0.003 || h.GetSampleSum() > 0.0031 {
		t.Errorf("histogram count %d sum %v, want %d and 3ms", h.GetSampleCount(), h.GetSampleSum(), calls)
	}
	for _, b := range h.GetBucket() {
		want := uint64(calls - 1) // all but the 3 ms call take no time
		if b.GetUpperBound() >= 0.005 {
			want = calls
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if v := find("grpc_server_started_total", "Watch", map[string]string{"grpc_type": "server_stream"}).GetCounter().GetValue(); v != 0 {
		t.Errorf("a stream: started %v, want 0", v)
	}
}

// BenchmarkUnaryCounted is a counted unary handler around one that does
// nothing, from every CPU at once: what the metrics add to a call,
// contention between CPUs included (benchpar, not RunParallel, whose
// counters cost more than the metrics when they share a cache line).
//
//	go test -run '^$' -bench UnaryCounted -cpu 1,2 ./server/
func BenchmarkUnaryCounted(b *testing.B) {
	origin := time.Now()
	m := newGRPCMetrics(func() time.Duration { return time.Since(origin) })
	nop := func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) { return nil, nil }
	sd := m.counted(&grpc.ServiceDesc{ServiceName: "bench.Service", Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: nop}}})
	call := sd.Methods[0].Handler
	b.ReportAllocs()
	benchpar.Run(b, func() { call(nil, context.Background(), nil, nil) })
}
