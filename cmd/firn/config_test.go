package main

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/firnid/firn/server"
)

// parseServe runs the serve flag layering with a fake environment.
func parseServe(t *testing.T, args []string, env map[string]string) (server.Config, error) {
	t.Helper()
	cfg := server.DefaultConfig()
	var sf serveFlags
	fs := newServeFlagSet(&cfg, &sf, io.Discard)
	err := parseLayered(fs, args, &sf.config, server.RepeatableFlags, func(k string) string { return env[k] })
	return cfg, err
}

// Each layer beats the ones below it, key by key.
func TestParseLayeredPrecedence(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "firn.yaml")
	yaml := strings.Join([]string{
		"max-batch: 111",
		"cluster: file",
		"ring-size: 1024",
		"lease-ttl: 7s",
		"etcd: [a:1, b:2]",
		"generator: [f1=snowflake, f2=compact]",
		"ntp-required: false",
		"",
	}, "\n")
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"FIRN_MAX_BATCH": "222",
		"FIRN_CLUSTER":   "env",
		"FIRN_GENERATOR": "e1=snowflake;e2=uidgen",
		"FIRN_MAX_LEAD":  "3s",
	}
	cfg, err := parseServe(t, []string{"--config", conf, "--max-batch", "333"}, env)
	if err != nil {
		t.Fatal(err)
	}
	def := server.DefaultConfig()
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"max-batch (flag > env > file)", cfg.MaxBatch, 333},
		{"cluster (env > file)", cfg.Cluster, "env"},
		{"max-lead (env > default)", cfg.MaxLead, 3 * time.Second},
		{"ring-size (file > default)", cfg.RingSize, 1024},
		{"lease-ttl (file > default)", cfg.LeaseTTL, 7 * time.Second},
		{"etcd (file list)", cfg.Etcd, []string{"a:1", "b:2"}},
		{"grpc-addr (default)", cfg.GRPCAddr, def.GRPCAddr},
		{"reservation-window (default)", cfg.ReservationWindow, def.ReservationWindow},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	// The repeatable flag: the environment's two values beat the file's.
	wall := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg.DataDir = t.TempDir()
	cfg.Etcd = []string{"127.0.0.1:2379"}
	if err := cfg.Finish(wall); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Generators) != 2 || cfg.Generators[0].Name != "e1" || cfg.Generators[1].Name != "e2" {
		t.Fatalf("generators %+v, want the environment's e1 and e2", cfg.Generators)
	}

	// A flag given twice on the command line accumulates; it beats both.
	cfg, err = parseServe(t, []string{"--config", conf, "--generator", "c1=snowflake", "--generator", "c2=compact"}, env)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.Etcd = t.TempDir(), []string{"127.0.0.1:2379"}
	if err := cfg.Finish(wall); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Generators) != 2 || cfg.Generators[0].Name != "c1" || cfg.Generators[1].Name != "c2" {
		t.Fatalf("generators %+v, want the flags' c1 and c2", cfg.Generators)
	}
	// Without the environment, the file's list.
	cfg, err = parseServe(t, []string{"--config", conf}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.Etcd = t.TempDir(), []string{"127.0.0.1:2379"}
	if err := cfg.Finish(wall); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Generators) != 2 || cfg.Generators[0].Name != "f1" || cfg.Generators[1].Name != "f2" || cfg.MaxBatch != 111 || cfg.Cluster != "file" {
		t.Fatalf("file only: generators %+v, max batch %d, cluster %q", cfg.Generators, cfg.MaxBatch, cfg.Cluster)
	}
}

// Refusals of the layering name the source and the flag.
func TestParseLayeredRefusals(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"unknown key", []string{"--config", write("a.yaml", "grpc-adr: x\n")}, nil, []string{"unknown key", "grpc-adr"}},
		{"config inside config", []string{"--config", write("b.yaml", "config: other.yaml\n")}, nil, []string{"config"}},
		{"bad file value", []string{"--config", write("c.yaml", "max-batch: many\n")}, nil, []string{"c.yaml", "--max-batch"}},
		{"bad env value", nil, map[string]string{"FIRN_LEASE_TTL": "long"}, []string{"FIRN_LEASE_TTL", "--lease-ttl"}},
		{"missing file", []string{"--config", filepath.Join(dir, "none.yaml")}, nil, []string{"--config"}},
		{"not YAML", []string{"--config", write("d.yaml", "max-batch: [1\n")}, nil, []string{"d.yaml"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseServe(t, c.args, c.env)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %q", err, w)
				}
			}
		})
	}
}
