package etcdtest

import (
	"fmt"
	"net"
	"sync"
	"testing"
)

var portMu sync.Mutex
var handedOut = map[int]bool{}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// was not handed out before by this process.
func FreePort(t testing.TB) int {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("etcdtest: probing a free port: %v", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut[p] {
			handedOut[p] = true
			return p
		}
	}
	t.Fatal("etcdtest: no free port after 100 probes")
	return 0
}

func loopURL(scheme string, port int) string { return fmt.Sprintf("%s://127.0.0.1:%d", scheme, port) }
