package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/internal/certfile"
)

// Config configures the etcd backend. DefaultConfig fills every field but
// Endpoints and Clock.
type Config struct {
	// Endpoints are the etcd client URLs or host:port pairs. Required.
	Endpoints []string
	// Prefix is the first key element, default "firn".
	Prefix string
	// Cluster names the ID space within the prefix (--cluster), default
	// "default".
	Cluster string

	// Username and Password enable etcd authentication when Username is
	// set.
	Username, Password string
	// CAFile, CertFile and KeyFile enable TLS: CAFile alone verifies the
	// server; CertFile with KeyFile adds a client certificate.
	CAFile, CertFile, KeyFile string
	// TLS, when set, is used as is instead of the files above.
	TLS *tls.Config

	// Timing holds the lease TTL, the call timeout (--coordinator-timeout)
	// and the reservation window Validate checks against it.
	Timing coordinator.Timing
	// DialTimeout bounds the first connection. Default 5 s.
	DialTimeout time.Duration
	// KeepAlive is the gRPC keepalive time and timeout (DialKeepAliveTime,
	// DialKeepAliveTimeout): a frozen member is dropped after about twice
	// it. Default 1 s.
	KeepAlive time.Duration

	// Clock gives heartbeat wall readings, take-back ages and the receipt
	// times of peers' heartbeats. Required.
	Clock clockguard.Clock
	// Logger receives one line per state change. Default slog.Default().
	Logger *slog.Logger

	// dialOptions are extra gRPC dial options of both clients (tests set
	// them through export_test.go to lose replies or hold renewals).
	dialOptions []grpc.DialOption
}

// DefaultConfig returns the defaults: prefix "firn", cluster "default",
// coordinator.DefaultTiming(), dial timeout 5 s, keepalive 1 s.
func DefaultConfig() Config {
	return Config{
		Prefix:      "firn",
		Cluster:     "default",
		Timing:      coordinator.DefaultTiming(),
		DialTimeout: 5 * time.Second,
		KeepAlive:   time.Second,
	}
}

func validName(s string) bool {
	return s != "" && len(s) <= 128 && !strings.ContainsAny(s, "/\x00")
}

// Validate refuses a configuration naming the field and the bound. Errors
// match coordinator.ErrInvalidSpec.
func (c Config) Validate() error {
	inv := coordinator.ErrInvalidSpec
	switch {
	case len(c.Endpoints) == 0:
		return fmt.Errorf("%w: etcd endpoints are empty", inv)
	case !validName(strings.Trim(c.Prefix, "/")):
		return fmt.Errorf("%w: etcd prefix %q must be 1..128 bytes, no inner '/'", inv, c.Prefix)
	case !validName(c.Cluster):
		return fmt.Errorf("%w: cluster %q must be 1..128 bytes without '/'", inv, c.Cluster)
	case c.Clock == nil:
		return fmt.Errorf("%w: etcd Config.Clock is nil", inv)
	case c.DialTimeout <= 0:
		return fmt.Errorf("%w: etcd dial timeout %v must be positive", inv, c.DialTimeout)
	case c.KeepAlive <= 0:
		return fmt.Errorf("%w: etcd keepalive %v must be positive", inv, c.KeepAlive)
	case (c.CertFile == "") != (c.KeyFile == ""):
		return fmt.Errorf("%w: etcd TLS needs both a certificate and a key file (cert %q, key %q)", inv, c.CertFile, c.KeyFile)
	case c.Password != "" && c.Username == "":
		return fmt.Errorf("%w: etcd password given without a username", inv)
	}
	for _, e := range c.Endpoints {
		if strings.TrimSpace(e) == "" {
			return fmt.Errorf("%w: etcd endpoint %q is empty", inv, e)
		}
	}
	return c.Timing.Validate()
}

// tlsConfig builds the client TLS configuration, nil when TLS is off.
func (c Config) tlsConfig() (*tls.Config, error) {
	if c.TLS != nil {
		return c.TLS, nil
	}
	if c.CAFile == "" && c.CertFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		cas, err := certfile.LoadPool(c.CAFile)
		if err != nil {
			if os.IsNotExist(err) {
				return nil, fmt.Errorf("etcd: reading CA file: %w", err)
			}
			return nil, fmt.Errorf("%w: etcd CA file %q: %v", coordinator.ErrInvalidSpec, c.CAFile, err)
		}
		// The bundle is read again when its file changes (a CA rotation),
		// so the servers are verified here, against the current bundle,
		// rather than by the handshake against a pool fixed at start.
		tc.RootCAs = cas.Current()
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("etcd: the server sent no certificate")
			}
			opts := x509.VerifyOptions{DNSName: cs.ServerName, Roots: cas.Current(), Intermediates: x509.NewCertPool()}
			for _, ic := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	if c.CertFile != "" {
		// Read again whenever the files change, for the next handshake.
		kp, err := certfile.Load(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("etcd: loading client certificate: %w", err)
		}
		if c.Logger != nil {
			kp.OnReload(func(err error) {
				if err != nil {
					c.Logger.Warn("etcd client certificate changed but does not load", "err", err)
					return
				}
				c.Logger.Info("etcd client certificate reloaded", "cert", c.CertFile)
			})
		}
		tc.GetClientCertificate = kp.GetClientCertificate
	}
	return tc, nil
}
