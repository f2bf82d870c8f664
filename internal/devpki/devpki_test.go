package devpki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
)

// The server certificate verifies against the CA for 127.0.0.1, and a TLS
// handshake with client certificates succeeds both ways over loopback.
func TestWriteHandshake(t *testing.T) {
	f, err := Write(t.TempDir(), "firn-test-client")
	if err != nil {
		t.Fatal(err)
	}
	roots, err := f.Roots()
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{srvCert},
		ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			peer <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			peer <- "handshake: " + err.Error()
			return
		}
		peer <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}()
	cfg, err := f.ClientTLS(true)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := <-peer; got != "firn-test-client" {
		t.Fatalf("server saw client %q, want firn-test-client", got)
	}

	// Without the client certificate the server refuses the handshake.
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	noCert, _ := f.ClientTLS(false)
	if c, err := tls.Dial("tcp", ln.Addr().String(), noCert); err == nil {
		_, err = c.Read(make([]byte, 1))
		c.Close()
		if err == nil {
			t.Fatal("handshake without a client certificate succeeded")
		}
	}

	// The server certificate does not verify for another name.
	cert, _ := x509.ParseCertificate(srvCert.Certificate[0])
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.invalid"}); err == nil {
		t.Fatal("server certificate verifies for example.invalid")
	}
	if err := cert.VerifyHostname(net.IPv4(127, 0, 0, 1).String()); err != nil {
		t.Fatal(err)
	}
}
