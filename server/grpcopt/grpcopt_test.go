package grpcopt

import (
	"context"
	"net"
	"runtime/metrics"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// goroutinesCreated is how many goroutines the process has started.
func goroutinesCreated(t *testing.T) uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatalf("runtime metric %s: not supported", s[0].Name)
	}
	return s[0].Value.Uint64()
}

// startedPerCall serves health over loopback with opts and reports how
// many goroutines the process started per unary call, over calls made one
// after another.
func startedPerCall(t *testing.T, opts ...grpc.ServerOption) float64 {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cli := healthpb.NewHealthClient(conn)
	check := func(n int) {
		for range n {
			if _, err := cli.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatalf("Check: %v", err)
			}
		}
	}
	check(100) // the connection and the workers up
	const calls = 2000
	before := goroutinesCreated(t)
	check(calls)
	return float64(goroutinesCreated(t)-before) / calls
}

// A firn server runs unary calls on its stream workers, whose stacks are
// grown already: it starts no goroutine per call, where a server without
// them starts one for each.
func TestServerRunsCallsOnWorkers(t *testing.T) {
	if plain := startedPerCall(t); plain < 1 {
		t.Fatalf("a server without stream workers started %.2f goroutines per call, want at least 1 (the measure does not see them)", plain)
	}
	if got := startedPerCall(t, ServerOptions(nil, 0)...); got > 0.05 {
		t.Fatalf("a firn server started %.2f goroutines per call, want about none (calls run on its %d stream workers)", got, StreamWorkers())
	}
}
