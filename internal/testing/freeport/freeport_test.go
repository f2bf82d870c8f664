package freeport

import (
	"net"
	"testing"
)

// TestPortOutsideEphemeral: every port handed out lies outside the
// kernel's ephemeral range, is distinct, and can be listened on.
func TestPortOutsideEphemeral(t *testing.T) {
	eLo, eHi := ephemeral()
	seen := map[int]bool{}
	for range 200 {
		p := Port(t)
		if p >= eLo && p <= eHi {
			t.Fatalf("port %d lies in the ephemeral range %d–%d", p, eLo, eHi)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	l, err := net.Listen("tcp", Addr(t))
	if err != nil {
		t.Fatalf("listening on a handed-out port: %v", err)
	}
	l.Close()
}
