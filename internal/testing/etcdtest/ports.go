package etcdtest

import (
	"fmt"
	"testing"

	"github.com/firnid/firn/internal/testing/freeport"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, was
// not handed out before by this process, and lies outside the ephemeral
// range (a member killed and started again keeps its ports: see freeport).
func FreePort(t testing.TB) int {
	t.Helper()
	return freeport.Port(t)
}

func loopURL(scheme string, port int) string { return fmt.Sprintf("%s://127.0.0.1:%d", scheme, port) }
