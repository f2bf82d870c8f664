package server_test

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/server/core"
)

// Finish refuses bad values with ErrConfig, naming the flag and the bound.
func TestConfigRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*core.Config)
		want []string
	}{
		{"max-batch 0", func(c *core.Config) { c.MaxBatch = 0 }, []string{"--max-batch", "[1, 1000000]"}},
		{"max-batch too large", func(c *core.Config) { c.MaxBatch = 1_000_001 }, []string{"--max-batch", "[1, 1000000]"}},
		{"layout running out", generators("user=time=20,worker=10,seq=12,unit=1ms,epoch=2020-01-01T00:00:00Z"),
			[]string{"--generator", "user", "within 10 years"}},
		{"generator without name", func(c *core.Config) {
			l, _ := generator.Preset("snowflake")
			c.Generators = []core.GeneratorConfig{{Layout: l}}
		}, []string{"--generator", "name"}},
		{"generator name with a slash", generators("a/b=snowflake"), []string{"--generator", "a/b"}},
		{"generator twice", generators("a=snowflake", "a=compact"), []string{"--generator", `"a" given twice`}},
		{"max-lead below 2 units", func(c *core.Config) {
			generators("u=compact")(c)
			c.MaxLead = time.Second
		}, []string{"--max-lead", "2 time units"}},
		{"datacenter too wide", func(c *core.Config) { c.Datacenter = 32 }, []string{"--datacenter", "max 31"}},
		{"ring size", func(c *core.Config) { c.RingSize = 64 }, []string{"--ring-size", "power of two"}},
		{"lease ttl", func(c *core.Config) { c.Timing.LeaseTTL = 1500 * time.Millisecond }, []string{"--lease-ttl", "at least 2s"}},
		{"timeout not below the ttl", func(c *core.Config) { c.Timing.Timeout = 5 * time.Second }, []string{"--coordinator-timeout", "below the --lease-ttl 5s"}},
		{"short window", func(c *core.Config) { c.Timing.ReservationWindow = 2 * time.Second },
			[]string{"--reservation-window", "2 × --coordinator-timeout 1s + 1.5s"}},
		{"rollback recovery", func(c *core.Config) { c.RollbackRecovery = "sometimes" }, []string{"--rollback-recovery", "auto or manual"}},
		{"manual without mTLS off loopback", func(c *core.Config) { c.RollbackRecovery, c.HTTPAddr = "manual", "0.0.0.0:0" },
			[]string{"--rollback-recovery", "--admin-names", "loopback --http-addr"}},
		{"manual with mTLS but no admin", func(c *core.Config) {
			c.RollbackRecovery, c.TLS = "manual", &tls.Config{Certificates: []tls.Certificate{{}}, ClientAuth: tls.RequireAndVerifyClientCert}
		}, []string{"--rollback-recovery", "--admin-names"}},
		{"admin names without mTLS", func(c *core.Config) { c.AdminNames = []string{"ops"} }, []string{"--admin-names", "mTLS"}},
		{"TLS without a certificate", func(c *core.Config) { c.TLS = &tls.Config{} }, []string{"--tls-cert", "no certificate"}},
		{"fault offset", func(c *core.Config) { c.FaultClockOffset = time.Second }, []string{"--fault-clock-offset", "--enable-fault-injection"}},
		{"ntp bad port", func(c *core.Config) { c.NTP = []string{"127.0.0.1:0"} }, []string{"--ntp", "1..65535"}},
		{"ntp twice", func(c *core.Config) { c.NTP = []string{"127.0.0.1:123", "127.0.0.1"} }, []string{"--ntp", "twice"}},
		{"ntp interval", func(c *core.Config) { c.NTPInterval = 10 * time.Millisecond }, []string{"--ntp-interval", "1s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := nodeConfig(c.mod)
			if !errors.Is(err, core.ErrConfig) {
				t.Fatalf("error %v, want ErrConfig", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %q", err, w)
				}
			}
		})
	}
	// The test-only lift of the window relations.
	if _, err := nodeConfig(func(c *core.Config) {
		c.Timing.ReservationWindow = 200 * time.Millisecond
		c.Timing.AllowShortWindow = true
	}); err != nil {
		t.Fatalf("a 200ms window with AllowShortWindow: %v", err)
	}
}

// With no generator the node runs default=snowflake, and Finish resolves
// max-lead and max-staleness per generator.
func TestConfigDefaults(t *testing.T) {
	cfg, err := nodeConfig()
	if err != nil {
		t.Fatal(err)
	}
	sf, _ := generator.Preset("snowflake")
	if len(cfg.Generators) != 1 || cfg.Generators[0].Name != "default" || cfg.Generators[0].Layout != sf {
		t.Fatalf("generators %+v, want default=snowflake", cfg.Generators)
	}
	if g := cfg.Generators[0]; g.MaxLead != time.Second || g.MaxStaleness != 100*time.Millisecond {
		t.Fatalf("max-lead %v, max-staleness %v; want 1s and 100ms", g.MaxLead, g.MaxStaleness)
	}
}
