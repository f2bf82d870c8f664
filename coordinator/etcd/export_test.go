package etcd

import "google.golang.org/grpc"

// WithDialOptions returns cfg with extra gRPC dial options for both of the
// coordinator's clients (interceptors that lose a reply or hold lease
// renewals, for tests).
func WithDialOptions(cfg Config, opts ...grpc.DialOption) Config {
	cfg.dialOptions = append(append([]grpc.DialOption(nil), cfg.dialOptions...), opts...)
	return cfg
}
