package etcd

import "google.golang.org/grpc"

// WithDialOptions returns cfg with extra gRPC dial options for both of the
// coordinator's clients (interceptors that lose a reply or hold lease
// renewals, for tests).
func WithDialOptions(cfg Config, opts ...grpc.DialOption) Config {
	cfg.dialOptions = append(append([]grpc.DialOption(nil), cfg.dialOptions...), opts...)
	return cfg
}

// EndSession ends the coordinator's current etcd lease on the client side
// alone, as a keepalive that got no answer for a TTL does: its leases end,
// and etcd keeps the lease (and its owner keys) until the TTL runs out.
func EndSession(c *Coordinator) {
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		s.stop()
		<-s.done
	}
}
