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
)

// The interceptor's counts, summed over its stripes, are the provider's:
// started and received one per call, handled by code, sent one per call
// whatever its code, and the handling time in its bucket — from calls on
// many goroutines, and for a method initialize never saw.
func TestGRPCMetricsCounts(t *testing.T) {
	var mu sync.Mutex
	var clock time.Duration
	m := newGRPCMetrics(func() time.Duration { mu.Lock(); defer mu.Unlock(); return clock })
	m.methods = append(m.methods, m.newMethod("unary", "firn.v1.IDService", "NextID"))
	m.byMethod["/firn.v1.IDService/NextID"] = m.methods[0]
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.collectors()...)

	call := func(full string, took time.Duration, err error) {
		info := &grpc.UnaryServerInfo{FullMethod: full}
		m.unary(context.Background(), nil, info, func(context.Context, any) (any, error) {
			if took > 0 {
				mu.Lock()
				clock += took
				mu.Unlock()
			}
			return nil, err
		})
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				call("/firn.v1.IDService/NextID", 0, nil)
			}
		})
	}
	wg.Wait()
	call("/firn.v1.IDService/NextID", 3*time.Millisecond, status.Error(codes.Unavailable, "x"))
	call("/firn.v1.IDService/NextID", 0, errors.New("plain")) // Unknown, as status.Code says
	call("/other.Service/Call", 0, status.Error(codes.NotFound, "x"))

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
	const calls = 8*1000 + 2
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
	if v := find("grpc_server_handled_total", "Call", map[string]string{"grpc_code": "NotFound", "grpc_service": "other.Service"}).GetCounter().GetValue(); v != 1 {
		t.Errorf("a method initialize did not see: handled NotFound %v, want 1", v)
	}
}

// BenchmarkUnaryInterceptor is the metrics interceptor around a handler
// that does nothing, from every CPU at once: what the metrics add to a
// call, contention between CPUs included.
//
//	go test -run '^$' -bench UnaryInterceptor -cpu 1,2 ./server/
func BenchmarkUnaryInterceptor(b *testing.B) {
	origin := time.Now()
	m := newGRPCMetrics(func() time.Duration { return time.Since(origin) })
	srv := grpc.NewServer()
	defer srv.Stop()
	registerForBench(srv)
	m.initialize(srv)
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.unary(context.Background(), nil, info, handler)
		}
	})
}
