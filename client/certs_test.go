package client

import (
	"testing"

	"github.com/firnid/firn/internal/testpki"
)

// writeCerts writes a throw-away CA, a server certificate for 127.0.0.1 and
// a client certificate.
func writeCerts(t *testing.T) *testpki.Files {
	t.Helper()
	f, err := testpki.Write(t.TempDir(), "client")
	if err != nil {
		t.Fatal(err)
	}
	return f
}
