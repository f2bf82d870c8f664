// Package grpcopt holds the gRPC server options every firn listener uses —
// the node and the no-op floor server of `firn bench` alike, so that the
// two are measured with the same settings.
package grpcopt

import (
	"crypto/tls"
	"runtime"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

const (
	// MaxRecvMsgSize bounds a request: firn's requests are a few bytes, so
	// anything larger is refused with RESOURCE_EXHAUSTED.
	MaxRecvMsgSize = 64 << 10
	// MaxSendMsgSize bounds a response: 100,000 packed fixed64 IDs are
	// 800 kB; the bound leaves room for the largest --max-batch of 1 M.
	MaxSendMsgSize = 9 << 20
	// KeepaliveMinTime is the shortest client ping interval accepted; a
	// client pinging faster is sent away (GOAWAY "too_many_pings").
	KeepaliveMinTime = 10 * time.Second
	// KeepaliveTime and KeepaliveTimeout: the server pings an idle
	// connection after KeepaliveTime and closes it if no answer comes
	// within KeepaliveTimeout.
	KeepaliveTime    = 30 * time.Second
	KeepaliveTimeout = 10 * time.Second
	// MaxConcurrentStreams per connection.
	MaxConcurrentStreams = 1024
	// MaxConnectionAgeGrace is how long calls in flight (and health
	// watches) may run on a connection past its age before it is closed.
	MaxConnectionAgeGrace = 30 * time.Second
	// MinStreamWorkers is the fewest goroutines kept to run calls
	// (StreamWorkers).
	MinStreamWorkers = 64
)

// StreamWorkers is how many goroutines a server keeps to run calls on:
// MinStreamWorkers, or 4 per CPU when that is more. A call handed to a
// waiting worker runs on a stack already grown; one started on a goroutine
// of its own grows a fresh 2 KiB stack twice (to 4 and 8 KiB, copying its
// frames each time), which cost about a fifth of a unary call's CPU. A
// call that finds every worker busy (a long stream, a wait) gets a
// goroutine of its own, as without workers; a worker starts afresh every
// 65,536 calls, so a stack grown by a rare deep call is given back.
func StreamWorkers() uint32 { return uint32(max(MinStreamWorkers, 4*runtime.GOMAXPROCS(0))) }

// ServerOptions returns the options for a firn gRPC server; tlsConfig nil
// means plaintext. A connection older than maxAge (0: no limit) is asked
// to go away (GOAWAY, with gRPC's ±10% jitter) and closed
// MaxConnectionAgeGrace later: a client behind one Service address, or one
// that resolves a name, then connects anew and spreads over the nodes that
// joined since.
func ServerOptions(tlsConfig *tls.Config, maxAge time.Duration) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxRecvMsgSize),
		grpc.MaxSendMsgSize(MaxSendMsgSize),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.NumStreamWorkers(StreamWorkers()),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             KeepaliveMinTime,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  KeepaliveTime,
			Timeout:               KeepaliveTimeout,
			MaxConnectionAge:      maxAge,
			MaxConnectionAgeGrace: MaxConnectionAgeGrace,
		}),
	}
	if tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}
	return opts
}
