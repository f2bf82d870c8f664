package load

import (
	"crypto/tls"
	"os"

	"github.com/firnid/firn/internal/devpki"
)

// ephemeralPKI is a throw-away CA with a server certificate for 127.0.0.1
// and a client certificate, in a temporary directory, for the no-op server
// when the run uses TLS. The keys live only as long as the run.
type ephemeralPKI struct {
	*devpki.Files
	// What the load side dials with: trusting the CA, and with the client
	// certificate as well.
	tlsOnly, mtls *tls.Config
}

func newEphemeralPKI() (*ephemeralPKI, error) {
	dir, err := os.MkdirTemp("", "firn-bench-tls-")
	if err != nil {
		return nil, err
	}
	p := &ephemeralPKI{}
	if p.Files, err = devpki.Write(dir, "firn-bench"); err == nil {
		if p.tlsOnly, err = p.ClientTLS(false); err == nil {
			p.mtls, err = p.ClientTLS(true)
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// childArgs are the no-op server's TLS flags; mtls adds the client CA.
func (p *ephemeralPKI) childArgs(mtls bool) []string {
	args := []string{"--tls-cert", p.ServerCert, "--tls-key", p.ServerKey}
	if mtls {
		args = append(args, "--client-ca", p.CA)
	}
	return args
}

// clientConfig is the load side's TLS config for the no-op server.
func (p *ephemeralPKI) clientConfig(mtls bool) *tls.Config {
	if mtls {
		return p.mtls
	}
	return p.tlsOnly
}

func (p *ephemeralPKI) remove() { os.RemoveAll(p.Dir) }
