package server_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator/local"
	"github.com/firnid/firn/server"
)

// Finish refuses bad values with ErrConfig, naming the flag and the bound.
func TestConfigRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"max-batch 0", []string{"--max-batch", "0"}, []string{"--max-batch", "[1, 1000000]"}},
		{"max-batch too large", []string{"--max-batch", "1000001"}, []string{"--max-batch", "[1, 1000000]"}},
		{"bad layout", []string{"--generator", "user=time=10"}, []string{"--generator", "user"}},
		{"generator without layout", []string{"--generator", "user"}, []string{"--generator", "name=layout"}},
		{"generator twice", []string{"--generator", "a=snowflake", "--generator", "a=compact"}, []string{"--generator", `"a" given twice`}},
		{"max-lead below 2 units", []string{"--generator", "u=compact", "--max-lead", "1s"}, []string{"--max-lead", "2 time units"}},
		{"datacenter too wide", []string{"--datacenter", "32"}, []string{"--datacenter", "max 31"}},
		{"ring size", []string{"--ring-size", "64"}, []string{"--ring-size", "power of two"}},
		{"lease ttl", []string{"--lease-ttl", "1500ms"}, []string{"--lease-ttl", "at least 2s"}},
		{"short window", []string{"--reservation-window", "2s"}, []string{"--reservation-window", "2 × --coordinator-timeout + 1.5s"}},
		{"rollback recovery", []string{"--rollback-recovery", "sometimes"}, []string{"--rollback-recovery", "auto or manual"}},
		{"manual without mTLS", []string{"--rollback-recovery", "manual"}, []string{"--rollback-recovery", "--tls-client-ca"}},
		{"tls cert without key", []string{"--tls-cert", "c.pem"}, []string{"--tls-cert", "--tls-key"}},
		{"fault offset", []string{"--fault-clock-offset", "1s"}, []string{"--fault-clock-offset", "--enable-fault-injection"}},
		{"ntp bad port", []string{"--ntp", "127.0.0.1:0"}, []string{"--ntp", "1..65535"}},
		{"ntp twice", []string{"--ntp", "127.0.0.1:123,127.0.0.1"}, []string{"--ntp", "twice"}},
		{"ntp interval", []string{"--ntp-interval", "10ms"}, []string{"--ntp-interval", "1s"}},
		{"cluster", []string{"--cluster", "a/b"}, []string{"--cluster", "'/'"}},
		{"bad grpc addr", []string{"--grpc-addr", "nowhere"}, []string{"--grpc-addr", "host:port"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := finishConfig(t.TempDir(), append([]string{"--etcd", "127.0.0.1:2379"}, c.args...)...)
			if !errors.Is(err, server.ErrConfig) {
				t.Fatalf("error %v, want ErrConfig", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// Start refuses fault injection without the Offset clock before it binds
// anything: the addresses stay free.
func TestStartRefusalBindsNothing(t *testing.T) {
	addr := freeAddr(t)
	cfg, err := finishConfig(t.TempDir(), "--etcd", "127.0.0.1:1", "--grpc-addr", addr,
		"--enable-fault-injection", "--fault-addr", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st, err := local.Open(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	n, err := server.New(cfg, nil, st, clockguard.NewSystem(), "n")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); !errors.Is(err, server.ErrConfig) {
		t.Fatalf("Start without the Offset clock: %v, want ErrConfig", err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the refused Start left %s bound: %v", addr, err)
	}
	l.Close()
}
