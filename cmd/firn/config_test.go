package main

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// parseServe runs the serve flag layering with a fake environment.
func parseServe(t *testing.T, args []string, env map[string]string) (*serveConfig, error) {
	t.Helper()
	sc := defaultServeConfig()
	err := sc.parse(newServeFlagSet(&sc, io.Discard), args, func(k string) string { return env[k] })
	return &sc, err
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
		"FIRN_GENERATOR": "e1=snowflake,e2=wideworker",
		"FIRN_MAX_LEAD":  "3s",
	}
	sc, err := parseServe(t, []string{"--config", conf, "--max-batch", "333"}, env)
	if err != nil {
		t.Fatal(err)
	}
	def := defaultServeConfig()
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"max-batch (flag > env > file)", sc.node.MaxBatch, 333},
		{"cluster (env > file)", sc.coord.Cluster, "env"},
		{"max-lead (env > default)", sc.node.MaxLead, 3 * time.Second},
		{"ring-size (file > default)", sc.node.RingSize, 1024},
		{"lease-ttl (file > default)", sc.coord.LeaseTTL, 7 * time.Second},
		{"etcd (file list)", sc.coord.Etcd, []string{"a:1", "b:2"}},
		{"grpc-addr (default)", sc.node.GRPCAddr, def.node.GRPCAddr},
		{"reservation-window (default)", sc.coord.ReservationWindow, def.coord.ReservationWindow},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	// The repeatable flag: the environment's two values beat the file's.
	wall := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	sc.dataDir = t.TempDir()
	sc.coord.Etcd = []string{"127.0.0.1:2379"}
	cfg, err := sc.finish(wall)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Generators) != 2 || cfg.Generators[0].Name != "e1" || cfg.Generators[1].Name != "e2" {
		t.Fatalf("generators %+v, want the environment's e1 and e2", cfg.Generators)
	}

	// A flag given twice on the command line accumulates; it beats both.
	sc, err = parseServe(t, []string{"--config", conf, "--generator", "c1=snowflake", "--generator", "c2=compact"}, env)
	if err != nil {
		t.Fatal(err)
	}
	sc.dataDir, sc.coord.Etcd = t.TempDir(), []string{"127.0.0.1:2379"}
	if cfg, err = sc.finish(wall); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Generators) != 2 || cfg.Generators[0].Name != "c1" || cfg.Generators[1].Name != "c2" {
		t.Fatalf("generators %+v, want the flags' c1 and c2", cfg.Generators)
	}
	// Without the environment, the file's list.
	sc, err = parseServe(t, []string{"--config", conf}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sc.dataDir, sc.coord.Etcd = t.TempDir(), []string{"127.0.0.1:2379"}
	if cfg, err = sc.finish(wall); err != nil {
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

// finishServe parses args as `firn serve` does (no environment) and
// finishes the node's configuration.
func finishServe(t *testing.T, args ...string) error {
	t.Helper()
	sc, err := parseServe(t, append([]string{"--data-dir", t.TempDir()}, args...), nil)
	if err != nil {
		return err
	}
	_, err = sc.finish(time.Now())
	return err
}

// What the binary checks before the node sees its configuration — the
// coordinator flags, the listeners' loopback rule, the TLS files, the
// --generator syntax — is refused naming the flag; what the node checks
// (core.Config.Finish) too.
func TestServeConfigRefusals(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	etcd := []string{"--etcd", "127.0.0.1:2379"}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"data dir", []string{"--data-dir", ""}, []string{"--data-dir", "must be set"}},
		{"cluster", []string{"--cluster", "a/b"}, []string{"--cluster", "'/'"}},
		{"etcd and zookeeper", []string{"--etcd", "a:1", "--zookeeper", "b:2"}, []string{"--zookeeper", "--etcd"}},
		{"lease ttl", []string{"--lease-ttl", "1500ms"}, []string{"--lease-ttl", "at least 2s"}},
		{"timeout not below the ttl", []string{"--coordinator-timeout", "5s"}, []string{"--coordinator-timeout", "below the --lease-ttl 5s"}},
		{"short window", []string{"--reservation-window", "2s"}, []string{"--reservation-window", "2 × --coordinator-timeout 1s + 1.5s = 3.5s"}},
		{"no flag lifts the window rule", []string{"--reservation-window", "200ms", "--unsafe-allow-short-window"}, []string{"unsafe-allow-short-window"}},
		{"zookeeper session", []string{"--zookeeper", "127.0.0.1:2181", "--lease-ttl", "6s"},
			[]string{"--reservation-window", "2/3 of the ZooKeeper session timeout (--lease-ttl) 6s + 1.5s = 5.5s"}},
		{"generator without layout", []string{"--generator", "user"}, []string{"--generator", "name=layout"}},
		{"generator twice", []string{"--generator", "a=snowflake", "--generator", "a=compact"}, []string{"--generator", `"a" given twice`}},
		{"unknown preset", []string{"--generator", "user=bogus"}, []string{"--generator", "bogus"}},
		{"bad grpc addr", []string{"--grpc-addr", "nowhere"}, []string{"--grpc-addr", "host:port"}},
		{"bad grpc addr on etcd", append([]string{"--grpc-addr", "nowhere"}, etcd...), []string{"--grpc-addr", "host:port"}},
		{"embedded non-loopback", []string{"--grpc-addr", "0.0.0.0:7300"}, []string{"--grpc-addr", "loopback", "--embedded-serve-remote"}},
		{"embedded non-loopback http", []string{"--http-addr", ":7301"}, []string{"--http-addr", "loopback", "--embedded-serve-remote"}},
		{"fault addr", []string{"--enable-fault-injection", "--fault-addr", "10.1.2.3:7302"}, []string{"--fault-addr", "loopback", "--fault-addr-allow-remote"}},
		{"tls cert without key", []string{"--tls-cert", "c.pem"}, []string{"--tls-cert", "--tls-key"}},
		{"client ca without cert", []string{"--tls-client-ca", notPEM}, []string{"--tls-client-ca", "--tls-cert"}},
		{"missing cert file", []string{"--tls-cert", filepath.Join(dir, "none.pem"), "--tls-key", filepath.Join(dir, "none.key")}, []string{"--tls-cert", "none.pem"}},
		{"max-batch (the node's check)", []string{"--max-batch", "0"}, []string{"--max-batch", "[1, 1000000]"}},
		{"manual without mTLS off loopback (the node's check)", append([]string{"--rollback-recovery", "manual", "--http-addr", "0.0.0.0:7301"}, etcd...),
			[]string{"--rollback-recovery", "--admin-names", "loopback"}},
		{"admin names without mTLS (the node's check)", []string{"--admin-names", "ops"}, []string{"--admin-names", "mTLS"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := finishServe(t, c.args...)
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
	// What lifts a rule.
	for _, args := range [][]string{
		{"--grpc-addr", "0.0.0.0:0", "--http-addr", "[::]:0", "--embedded-serve-remote"},
		append([]string{"--grpc-addr", "0.0.0.0:0"}, etcd...),
		{"--grpc-addr", "localhost:0", "--http-addr", "[::1]:0"},
		{"--enable-fault-injection", "--fault-addr", "10.1.2.3:7302", "--fault-addr-allow-remote"},
		{"--fault-addr", "10.1.2.3:7302"}, // no fault injection: the address is not used
		{"--zookeeper", "127.0.0.1:2181", "--lease-ttl", "6s", "--reservation-window", "5500ms"},
	} {
		if err := finishServe(t, args...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// finish hands the node what the flags say: the coordinator's timing and
// cluster, the generators, NTP required by default when --ntp is set, the
// TLS material.
func TestServeConfigToNode(t *testing.T) {
	sc, err := parseServe(t, []string{"--data-dir", t.TempDir(), "--cluster", "c1", "--lease-ttl", "7s",
		"--reservation-window", "6s", "--coordinator-timeout", "2s", "--generator", "a=snowflake", "--generator", "b=compact",
		"--ntp", "127.0.0.1:1234"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := sc.finish(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster != "c1" || cfg.Timing.LeaseTTL != 7*time.Second || cfg.Timing.ReservationWindow != 6*time.Second ||
		cfg.Timing.Timeout != 2*time.Second || cfg.Timing.RefreshInterval != time.Second || cfg.Timing.AllowShortWindow {
		t.Fatalf("cluster %q, timing %+v", cfg.Cluster, cfg.Timing)
	}
	if len(cfg.Generators) != 2 || cfg.Generators[0].Name != "a" || cfg.Generators[1].Name != "b" {
		t.Fatalf("generators %+v", cfg.Generators)
	}
	if !cfg.NTPRequired || cfg.TLS != nil || cfg.Version != readBuild().Version {
		t.Fatalf("NTP required %v, TLS %v, version %q", cfg.NTPRequired, cfg.TLS, cfg.Version)
	}
	sc, err = parseServe(t, []string{"--data-dir", t.TempDir(), "--ntp", "127.0.0.1:1234", "--ntp-required=false"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = sc.finish(time.Now()); err != nil || cfg.NTPRequired {
		t.Fatalf("--ntp-required=false: required %v, %v", cfg.NTPRequired, err)
	}
	if cfg.UncheckedClockOK {
		t.Fatal("--unchecked-clock-ok is set by default")
	}
}

// --unchecked-clock-ok comes from the flag, FIRN_UNCHECKED_CLOCK_OK or the
// --config file's unchecked-clock-ok key, as every serve flag does.
func TestUncheckedClockOKLayers(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "firn.yaml")
	if err := os.WriteFile(conf, []byte("unchecked-clock-ok: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		args []string
		env  map[string]string
		want bool
	}{
		{"default", nil, nil, false},
		{"flag", []string{"--unchecked-clock-ok"}, nil, true},
		{"environment", nil, map[string]string{"FIRN_UNCHECKED_CLOCK_OK": "true"}, true},
		{"file", []string{"--config", conf}, nil, true},
		{"flag beats file", []string{"--config", conf, "--unchecked-clock-ok=false"}, nil, false},
	} {
		sc, err := parseServe(t, append([]string{"--data-dir", t.TempDir(), "--etcd", "127.0.0.1:2379"}, c.args...), c.env)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		cfg, err := sc.finish(time.Now())
		if err != nil || cfg.UncheckedClockOK != c.want {
			t.Fatalf("%s: UncheckedClockOK %v (%v), want %v", c.what, cfg.UncheckedClockOK, err, c.want)
		}
	}
}

// The admin commands read the coordinator flags as serve does: flag >
// FIRN_* > --config file > default. A serve configuration file works as it
// is (its other keys are ignored; a key no serve flag has is refused), and
// the admin commands' own flags (--generator, --datacenter) take nothing
// from the environment or the file.
func TestAdminFlagsLayered(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "firn.yaml")
	yaml := strings.Join([]string{
		"etcd: [a:1, b:2]",
		"cluster: file",
		"etcd-prefix: /fromfile",
		"lease-ttl: 7s",
		"reservation-window: 6s",
		"embedded-client-addr: 127.0.0.1:7410",
		"grpc-addr: 127.0.0.1:7400",
		"generator: [main=snowflake, user=compact]",
		"datacenter: 3",
		"max-batch: 111",
		"",
	}, "\n")
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"FIRN_CLUSTER": "env", "FIRN_GENERATOR": "e=snowflake", "FIRN_COORDINATOR_TIMEOUT": "2s"}
	var a adminFlags
	fs := pflag.NewFlagSet("firn workers", pflag.ContinueOnError)
	a.register(fs, "default", "the generator")
	dc := fs.Uint64("datacenter", 0, "")
	if err := a.parse([]string{"--config", conf, "--lease-ttl", "8s"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"etcd (file)", a.coord.Etcd, []string{"a:1", "b:2"}},
		{"cluster (env > file)", a.coord.Cluster, "env"},
		{"etcd-prefix (file)", a.coord.EtcdPrefix, "/fromfile"},
		{"lease-ttl (flag > file)", a.coord.LeaseTTL, 8 * time.Second},
		{"reservation-window (file)", a.coord.ReservationWindow, 6 * time.Second},
		{"coordinator-timeout (env)", a.coord.CoordinatorTimeout, 2 * time.Second},
		{"embedded-client-addr (file)", a.coord.EmbeddedClientAddr, "127.0.0.1:7410"},
		{"generator (own flag: neither env nor file)", a.generator, "default"},
		{"datacenter (own flag: not the file's)", *dc, uint64(0)},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("etcd: [a:1]\nmax-bach: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var b adminFlags
	b.register(pflag.NewFlagSet("firn workers", pflag.ContinueOnError), "default", "")
	if err := b.parse([]string{"--config", bad}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "max-bach") {
		t.Fatalf("unknown key: %v", err)
	}
	// The coordinator flags are validated as serve's.
	var z adminFlags
	z.register(pflag.NewFlagSet("firn workers", pflag.ContinueOnError), "default", "")
	err := z.parse([]string{"--zookeeper", "127.0.0.1:2181", "--lease-ttl", "6s"}, func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "--reservation-window") || !strings.Contains(err.Error(), "--lease-ttl") {
		t.Fatalf("ZooKeeper session rule: %v", err)
	}
}

// The loopback rule: host:port on loopback ("localhost" or a loopback IP)
// passes; anything else is refused naming the flag and what lifts the
// rule, unless lifted; an address that is not host:port is refused either
// way.
func TestLoopbackRule(t *testing.T) {
	rule := loopbackRule{why: "so it needs --lift-me"}
	for _, c := range []struct {
		addr   string
		lifted bool
		ok     bool
	}{
		{"127.0.0.1:7300", false, true},
		{"localhost:7301", false, true},
		{"[::1]:7300", false, true},
		{"127.5.6.7:0", false, true},
		{"0.0.0.0:7300", false, false},
		{":7301", false, false},
		{"example.com:7300", false, false},
		{"10.1.2.3:7302", false, false},
		{"0.0.0.0:7300", true, true},
		{"nowhere", false, false},
		{"nowhere", true, false},
	} {
		r := rule
		r.lifted = c.lifted
		err := r.check("some-addr", c.addr)
		if (err == nil) != c.ok {
			t.Errorf("check(%q, lifted %v) = %v, want ok=%v", c.addr, c.lifted, err, c.ok)
			continue
		}
		if err != nil && !strings.HasPrefix(err.Error(), "--some-addr: ") {
			t.Errorf("error %q does not name the flag", err)
		}
		if err != nil && c.addr != "nowhere" && !strings.Contains(err.Error(), "--lift-me") {
			t.Errorf("error %q does not name what lifts the rule", err)
		}
	}
}

// A --config value reaches its flag as written, as the command line and
// the environment give it, never retyped by YAML: --cluster names an ID
// space, so a node configured by file and one by flag with the same
// written value must land in the same cluster (a leading zero read as
// octal, a long number rounded or `on` read as true would split the
// fleet in two on one coordinator: duplicates).
func TestConfigFileValuesAsWritten(t *testing.T) {
	for _, v := range []string{"0123", "9007199254740993", "12345678901234567890", "1e3", "0x10", "on"} {
		conf := filepath.Join(t.TempDir(), "firn.yaml")
		if err := os.WriteFile(conf, []byte("cluster: "+v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fromFile, err := parseServe(t, []string{"--config", conf}, nil)
		if err != nil {
			t.Errorf("cluster: %s in --config: %v", v, err)
			continue
		}
		fromFlag, err := parseServe(t, []string{"--cluster", v}, nil)
		if err != nil {
			t.Fatal(err)
		}
		fromEnv, err := parseServe(t, nil, map[string]string{"FIRN_CLUSTER": v})
		if err != nil {
			t.Fatal(err)
		}
		if fromFile.coord.Cluster != fromFlag.coord.Cluster || fromEnv.coord.Cluster != fromFlag.coord.Cluster {
			t.Errorf("cluster written %s: --cluster gives %q, FIRN_CLUSTER %q, the --config file %q", v, fromFlag.coord.Cluster, fromEnv.coord.Cluster, fromFile.coord.Cluster)
		}
	}
}

// A --config file that gives a key twice, or a flag a value it cannot
// take (a mapping; a list for a one-value flag), is refused naming the
// key: keeping the last value would drop the first without a word, as a
// repeated query parameter would turn a request into another.
func TestConfigFileRefusesAmbiguousKeys(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"key twice", "cluster: orders-eu\netcd: [10.0.0.1:2379]\ncluster: orders-us\n", `"cluster" given twice`},
		{"a mapping", "cluster: {name: orders}\n", `"cluster"`},
		{"a list for one value", "cluster: [a, b]\n", `"cluster" takes one value`},
		{"a list of mappings", "etcd: [{host: a}]\n", `"etcd"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			conf := filepath.Join(t.TempDir(), "firn.yaml")
			if err := os.WriteFile(conf, []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
			sc, err := parseServe(t, []string{"--config", conf}, nil)
			if err == nil {
				t.Fatalf("accepted: cluster %q, etcd %q", sc.coord.Cluster, sc.coord.Etcd)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name %s", err, c.want)
			}
		})
	}
}

// --client-rate's bounds hold for every float it can be given: NaN fails
// both comparisons of a check written x < lo || x > hi and would pass as
// "no limit" (the limiter is built only for a rate above 0); a rate so
// small that a refusal's wait (a burst's refill) overflows time.Duration
// is refused naming the least rate for that burst.
func TestClientRateBounds(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--client-rate", "NaN"}, "[0, 1e9]"},
		{[]string{"--client-rate", "NaN", "--client-burst", "100"}, "[0, 1e9]"},
		{[]string{"--client-rate", "Inf"}, "[0, 1e9]"},
		{[]string{"--client-rate", "-1"}, "[0, 1e9]"},
		{[]string{"--client-rate", "1e-10"}, "at least 1e-09 IDs/s"},
		{[]string{"--client-rate", "0.01", "--client-burst", "1000000000"}, "at least 1 IDs/s"},
	} {
		err := finishServe(t, c.args...)
		if err == nil {
			t.Errorf("%v accepted", c.args)
			continue
		}
		if !strings.Contains(err.Error(), "--client-rate") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want --client-rate refused naming %s", c.args, err, c.want)
		}
	}
	for _, args := range [][]string{{"--client-rate", "0"}, {"--client-rate", "1e-9"}, {"--client-rate", "1e9"}, {"--client-rate", "1", "--client-burst", "1000000000"}} {
		if err := finishServe(t, args...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}
