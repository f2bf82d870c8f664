package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/firnid/firn/internal/devpki"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// The conventions every command keeps: --help prints help and exits 0
// without dialling anything; flags may follow positional arguments; a node
// that cannot be reached is exit 1, not "not serving" (3); a bad
// environment value names the variable and the value; an unknown
// --log-level is refused; secrets can come from files.
func TestCLIConventions(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--help"}, {"next", "--help"}, {"decode", "--help"}, {"info", "--help"},
		{"workers", "--help"}, {"workers", "release", "--help"}, {"coordinator", "bump", "--help"},
		{"generator", "--help"}, {"generator", "create", "--help"}, {"generator", "list", "--help"},
		{"generator", "describe", "--help"}, {"generator", "retire", "--help"},
		{"fault", "clock", "--help"}, {"bench", "--help"}, {"--help"},
	} {
		// The addresses point nowhere: help must not dial.
		out, errOut, code := cli(t, []string{"FIRN_ADDR=127.0.0.1:1", "FIRN_ETCD=127.0.0.1:1"}, args...)
		if code != exitOK || !strings.Contains(strings.ToLower(out+errOut), "usage") {
			t.Errorf("firn %v: exit %d, want 0 and the usage\nstdout %q\nstderr %q", args, code, out, errOut)
		}
	}

	// Flags after the positional argument.
	out, errOut, code := cli(t, nil, "decode", "2127862948218011648", "--layout", "snowflake")
	if code != exitOK || !strings.Contains(out, "datacenter=") {
		t.Errorf("firn decode ID --layout snowflake: exit %d, %q %q", code, out, errOut)
	}
	if _, errOut, code := cli(t, nil, "decode", "--layout", "snowflake", "1", "2"); code != exitUsage {
		t.Errorf("firn decode with two IDs: exit %d (%q), want %d", code, errOut, exitUsage)
	}

	// A refused connection is a failure, not a node that does not serve.
	for _, cmd := range []string{"next", "info"} {
		_, errOut, code := cli(t, nil, cmd, "--addr", "127.0.0.1:1")
		if code != exitFailure || !strings.Contains(errOut, "cannot reach the node") {
			t.Errorf("firn %s to a closed port: exit %d %q, want %d and \"cannot reach the node\"", cmd, code, errOut, exitFailure)
		}
	}

	// A bad environment value: the variable and the value.
	_, errOut, code = cli(t, []string{"FIRN_MAX_LEAD=soon"}, "serve", "--data-dir", t.TempDir())
	if code != exitUsage || !strings.Contains(errOut, "FIRN_MAX_LEAD") || !strings.Contains(errOut, `"soon"`) {
		t.Errorf("FIRN_MAX_LEAD=soon: exit %d %q, want %d naming the variable and the value", code, errOut, exitUsage)
	}
	// An unknown log level.
	_, errOut, code = cli(t, nil, "serve", "--data-dir", t.TempDir(), "--log-level", "loud")
	if code != exitUsage || !strings.Contains(errOut, "--log-level") || !strings.Contains(errOut, `"loud"`) {
		t.Errorf("--log-level loud: exit %d %q, want %d naming the flag and the value", code, errOut, exitUsage)
	}

	// Secrets from files: read without the trailing newline; given twice,
	// or from an empty file, refused.
	dir := t.TempDir()
	pw := filepath.Join(dir, "etcd-password")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := defaultCoordConfig()
	c.EtcdPasswordFile = pw
	c.ZooKeeperAuthFile = pw
	if err := c.readSecrets(); err != nil || c.EtcdPassword != "s3cret" || c.ZooKeeperAuth != "s3cret" {
		t.Errorf("readSecrets: %v, password %q, auth %q", err, c.EtcdPassword, c.ZooKeeperAuth)
	}
	_, errOut, code = cli(t, nil, "workers", "--etcd-password-file", pw, "--etcd-password", "x")
	if code != exitUsage || !strings.Contains(errOut, "--etcd-password-file") {
		t.Errorf("both --etcd-password-file and --etcd-password: exit %d %q", code, errOut)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	_, errOut, code = cli(t, nil, "workers", "--zookeeper", "127.0.0.1:1", "--zookeeper-auth-file", empty)
	if code != exitUsage || !strings.Contains(errOut, "is empty") {
		t.Errorf("an empty --zookeeper-auth-file: exit %d %q", code, errOut)
	}
}

// `firn serve` run in a clone writes its default data dir there: git must
// ignore it, or a newcomer's first `git status` shows an etcd data dir to
// commit.
func TestDefaultDataDirIgnored(t *testing.T) {
	dir := defaultServeConfig().dataDir
	b, err := os.ReadFile(filepath.Join("..", "..", ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p := strings.TrimSpace(line); p == "/"+dir+"/" || p == "/"+dir || p == dir+"/" || p == dir {
			return
		}
	}
	t.Fatalf(".gitignore does not ignore the default data dir %q:\n%s", dir, b)
}

// longFlagOneDash finds a long flag written with one dash (-addr): help
// names flags --addr, with one-letter shorthands (-n) only.
var longFlagOneDash = regexp.MustCompile(`(^|[\s(\[,])-[a-z][a-z-]+`)

// Every command's help names its flags --flag; serve's lists the
// essential flags first and the test-only and rule-lifting switches last,
// under their own heading.
func TestHelpConventions(t *testing.T) {
	for _, args := range [][]string{
		{"serve"}, {"next"}, {"decode"}, {"info"}, {"workers"}, {"coordinator", "bump"}, {"coordinator"},
		{"generator"}, {"generator", "create"}, {"generator", "list"}, {"generator", "describe"}, {"generator", "retire"},
		{"fault", "clock"}, {"fault"}, {"version"}, {"bench"},
	} {
		out, errOut, code := cli(t, nil, append(args, "--help")...)
		if code != exitOK || errOut != "" || !strings.HasPrefix(out, "Usage: firn "+strings.Join(args, " ")) {
			t.Errorf("firn %v --help: exit %d, stderr %q, stdout %q; want 0 and the usage on stdout", args, code, errOut, out)
		}
		if m := longFlagOneDash.FindString(out); m != "" {
			t.Errorf("firn %v --help names a flag with one dash, %q:\n%s", args, m, out)
		}
	}
	if out, _, _ := cli(t, nil, "help", "next"); !strings.Contains(out, "-n, --count") {
		t.Errorf("firn help next: %q, want next's flags", out)
	}

	out, _, _ := cli(t, nil, "serve", "--help")
	at := strings.Index(out, "\n"+testingHeading+"\n")
	if at < 0 {
		t.Fatalf("firn serve --help has no %q heading:\n%s", testingHeading, out)
	}
	line := func(name string) int {
		loc := regexp.MustCompile(`(?m)^ +--` + name + `[ \[]`).FindStringIndex(out)
		if loc == nil {
			t.Fatalf("firn serve --help does not list --%s", name)
		}
		return loc[0]
	}
	flags := strings.Index(out, "\nFlags:\n")
	essentialEnd := flags + 1 + strings.Index(out[flags+1:], "\n\n")
	for _, name := range []string{"config", "data-dir", "grpc-addr", "http-addr", "generator", "etcd", "zookeeper", "cluster", "ntp", "tls-cert"} {
		if i := line(name); flags < 0 || i < flags || i > essentialEnd {
			t.Errorf("--%s is not among the first flags, under Flags:", name)
		}
	}
	// Every fault-injection and unsafe flag, and every rule-lifting one
	// named here, comes after the heading; a new --fault-* or --unsafe-*
	// flag must too.
	unsafe := map[string]bool{"enable-fault-injection": true, "unchecked-clock-ok": true, "embedded-serve-remote": true}
	for name := range serveFlagNames() {
		if strings.HasPrefix(name, "fault-") || strings.HasPrefix(name, "unsafe-") || unsafe[name] {
			if i := line(name); i < at {
				t.Errorf("--%s is listed before %q", name, testingHeading)
			}
		} else if i := line(name); i > at {
			t.Errorf("--%s is listed under %q", name, testingHeading)
		}
	}
}

// Every command refuses an unknown flag and an argument it does not take,
// with exit 2 and a message naming it.
func TestUnknownFlagsAndArguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"version", "--bogus"}, "--bogus"},
		{[]string{"version", "extra"}, `"extra"`},
		{[]string{"--version", "extra"}, `"extra"`},
		{[]string{"help", "--bogus"}, "--bogus"},
		{[]string{"help", "nosuch"}, `"nosuch"`},
		{[]string{"nosuch"}, `"nosuch"`},
		{[]string{"serve", "--bogus"}, "--bogus"},
		{[]string{"serve", "extra"}, `"extra"`},
		{[]string{"next", "--bogus"}, "--bogus"},
		{[]string{"next", "extra"}, `"extra"`},
		{[]string{"next", "-addr", "127.0.0.1:1"}, "--addr"},
		{[]string{"decode", "--bogus", "1"}, "--bogus"},
		{[]string{"decode", "--layout", "snowflake", "1", "2"}, "one ID"},
		{[]string{"info", "--bogus"}, "--bogus"},
		{[]string{"info", "extra"}, `"extra"`},
		{[]string{"workers", "--bogus"}, "--bogus"},
		{[]string{"workers", "extra"}, `"extra"`},
		{[]string{"workers", "release"}, "one worker ID"},
		{[]string{"workers", "release", "1", "2"}, "one worker ID"},
		{[]string{"coordinator"}, "coordinator bump"},
		{[]string{"coordinator", "extra"}, "coordinator bump"},
		{[]string{"coordinator", "bump", "--bogus"}, "--bogus"},
		{[]string{"coordinator", "bump", "--by", "1s", "extra"}, `"extra"`},
		{[]string{"generator"}, "create, list, describe or retire"},
		{[]string{"generator", "extra"}, `"extra"`},
		{[]string{"generator", "create", "--bogus", "a", "snowflake"}, "--bogus"},
		{[]string{"generator", "create", "a", "snowflake", "extra"}, `"extra"`},
		{[]string{"generator", "create", "a"}, "NAME DEFINITION"},
		{[]string{"generator", "create", "a", "snowflake", "--above", "x"}, "--above"},
		{[]string{"generator", "list", "--bogus"}, "--bogus"},
		{[]string{"generator", "list", "extra"}, `"extra"`},
		{[]string{"generator", "describe"}, "NAME"},
		{[]string{"generator", "describe", "a", "b"}, `"b"`},
		{[]string{"generator", "retire", "--bogus", "a"}, "--bogus"},
		{[]string{"generator", "retire", "a", "b"}, `"b"`},
		{[]string{"fault"}, "fault clock"},
		{[]string{"fault", "clock", "--bogus"}, "--bogus"},
		{[]string{"fault", "clock", "--offset", "1s", "extra"}, `"extra"`},
		{[]string{"bench", "--bogus"}, "bogus"},
		{[]string{"bench", "extra"}, `"extra"`},
	} {
		// The addresses point nowhere: a refusal must come before any dial.
		_, errOut, code := cli(t, []string{"FIRN_ADDR=127.0.0.1:1", "FIRN_ETCD=127.0.0.1:1"}, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("firn %v: exit %d, stderr %q; want %d naming %s", c.args, code, errOut, exitUsage, c.want)
		}
	}
}

// Every list-valued variable takes its items the same ways: the flag
// repeated, the flag or its FIRN_* variable with items separated by
// commas, and the --config file's YAML list or comma-separated value.
func TestListSeparators(t *testing.T) {
	gens := []string{"a=snowflake", "b=segment,start=5,max=10", "c=time=41,dc=5,worker=5,seq=12,unit=1ms,epoch=2020-01-01T00:00:00Z", "d=seq,sections=4", "max=compact"}
	lists := map[string]struct {
		items []string
		got   func(*serveConfig) []string
	}{
		"etcd":        {[]string{"a:2379", "b:2379"}, func(sc *serveConfig) []string { return sc.coord.Etcd }},
		"zookeeper":   {[]string{"a:2181", "b:2181"}, func(sc *serveConfig) []string { return sc.coord.ZooKeeper }},
		"ntp":         {[]string{"ntp1:123", "ntp2"}, func(sc *serveConfig) []string { return sc.node.NTP }},
		"admin-names": {[]string{"ops", "admin.example"}, func(sc *serveConfig) []string { return sc.node.AdminNames }},
		"generator":   {gens, func(sc *serveConfig) []string { return sc.generators }},
		"allow-callers": {[]string{"default=billing", "default=shop.example"}, func(sc *serveConfig) []string {
			return sc.allowCallers
		}},
	}
	// The table holds every list-valued serve flag.
	sc := defaultServeConfig()
	newServeFlagSet(&sc, io.Discard).VisitAll(func(f *pflag.Flag) {
		if _, ok := lists[f.Name]; isList(f) != ok {
			t.Errorf("--%s: list-valued %v, in this test's table %v", f.Name, isList(f), ok)
		}
	})
	dir := t.TempDir()
	for name, l := range lists {
		env := "FIRN_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		joined := strings.Join(l.items, ",")
		var repeated []string
		for _, it := range l.items {
			repeated = append(repeated, "--"+name, it)
		}
		quoted := make([]string, len(l.items))
		for i, it := range l.items {
			quoted[i] = fmt.Sprintf("%q", it)
		}
		yamlList := filepath.Join(dir, name+"-list.yaml")
		yamlOne := filepath.Join(dir, name+"-one.yaml")
		os.WriteFile(yamlList, []byte(name+": ["+strings.Join(quoted, ", ")+"]\n"), 0o600)
		os.WriteFile(yamlOne, []byte(fmt.Sprintf("%s: %q\n", name, joined)), 0o600)
		for _, c := range []struct {
			how  string
			args []string
			env  map[string]string
		}{
			{"the flag repeated", repeated, nil},
			{"the flag, commas", []string{"--" + name, joined}, nil},
			{"the flag=, commas", []string{"--" + name + "=" + joined}, nil},
			{env + ", commas", nil, map[string]string{env: joined}},
			{"a YAML list", []string{"--config", yamlList}, nil},
			{"a YAML value, commas", []string{"--config", yamlOne}, nil},
		} {
			sc, err := parseServe(t, c.args, c.env)
			if err != nil {
				t.Errorf("--%s as %s: %v", name, c.how, err)
				continue
			}
			if got := l.got(sc); !reflect.DeepEqual(got, l.items) {
				t.Errorf("--%s as %s: %q, want %q", name, c.how, got, l.items)
			}
		}
	}
	// ';' was FIRN_GENERATOR's separator: refused, naming the one to use.
	_, err := parseServe(t, nil, map[string]string{"FIRN_GENERATOR": "a=snowflake;b=compact"})
	if err == nil || !strings.Contains(err.Error(), "FIRN_GENERATOR") || !strings.Contains(err.Error(), "separated by ','") {
		t.Errorf("FIRN_GENERATOR with ';': %v, want a refusal naming ','", err)
	}
}

// next, decode and info reach the node the serve configuration names:
// --addr, else FIRN_ADDR, else FIRN_GRPC_ADDR, else grpc-addr of the
// --config file (a wildcard host read as loopback); a node serving TLS by
// its configuration is dialled with TLS, trusted by its certificate.
func TestClientReadsNodeConfig(t *testing.T) {
	dir := t.TempDir()
	closed := fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t))
	_, closedPort, _ := net.SplitHostPort(closed)
	other := fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t))
	conf := filepath.Join(dir, "firn.yaml")
	os.WriteFile(conf, []byte("grpc-addr: "+closed+"\nmax-batch: 10\n"), 0o600)
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"--config", nil, []string{"--config", conf}, closed},
		{"FIRN_CONFIG", []string{"FIRN_CONFIG=" + conf}, nil, closed},
		{"FIRN_GRPC_ADDR, a wildcard", []string{"FIRN_GRPC_ADDR=0.0.0.0:" + closedPort}, nil, closed},
		{"FIRN_GRPC_ADDR beats the file", []string{"FIRN_GRPC_ADDR=" + other}, []string{"--config", conf}, other},
		{"FIRN_ADDR beats the node's", []string{"FIRN_ADDR=" + other, "FIRN_GRPC_ADDR=" + closed}, nil, other},
		{"--addr beats FIRN_ADDR", []string{"FIRN_ADDR=" + closed}, []string{"--addr", other}, other},
	} {
		for _, cmd := range []string{"next", "info"} {
			_, errOut, code := cli(t, c.env, append([]string{cmd}, c.args...)...)
			if code != exitFailure || !strings.Contains(errOut, "cannot reach the node at "+c.want) {
				t.Errorf("firn %s, %s: exit %d %q; want %d naming %s", cmd, c.name, code, errOut, exitFailure, c.want)
			}
		}
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("grpc-adr: x\n"), 0o600)
	if _, errOut, code := cli(t, nil, "info", "--config", bad); code != exitUsage || !strings.Contains(errOut, "grpc-adr") {
		t.Errorf("firn info --config with an unknown key: exit %d %q", code, errOut)
	}

	// A node serving TLS, started from its file: the file is all a client
	// needs.
	pki, err := devpki.Write(t.TempDir(), "caller")
	if err != nil {
		t.Fatal(err)
	}
	a := freeAddrs(t)
	tlsConf := filepath.Join(dir, "tls.yaml")
	os.WriteFile(tlsConf, []byte(fmt.Sprintf("grpc-addr: %s\ntls-cert: %s\ntls-key: %s\n", a.grpc, pki.ServerCert, pki.ServerKey)), 0o600)
	serve(t, t.TempDir(), a, nil, "--config", tlsConf)
	var out, errOut string
	code := -1
	for start := time.Now(); code != exitOK && time.Since(start) < 30*time.Second; time.Sleep(50 * time.Millisecond) {
		out, errOut, code = cli(t, nil, "info", "--config", tlsConf)
	}
	if code != exitOK || !strings.Contains(out, "generator default") {
		t.Fatalf("firn info --config of a TLS node: exit %d, %q %q", code, out, errOut)
	}
	env := []string{"FIRN_GRPC_ADDR=" + a.grpc, "FIRN_TLS_CERT=" + pki.ServerCert, "FIRN_TLS_KEY=" + pki.ServerKey}
	if out, errOut, code := cli(t, env, "next", "-n", "2"); code != exitOK || len(strings.Fields(out)) != 2 {
		t.Errorf("firn next -n 2 with the node's FIRN_*: exit %d, %q %q", code, out, errOut)
	}
	// Another certificate in the file is not trusted.
	other2, err := devpki.Write(t.TempDir(), "caller")
	if err != nil {
		t.Fatal(err)
	}
	env = []string{"FIRN_GRPC_ADDR=" + a.grpc, "FIRN_TLS_CERT=" + other2.ServerCert, "FIRN_TLS_KEY=" + other2.ServerKey}
	if _, errOut, code := cli(t, env, "info"); code == exitOK || !strings.Contains(errOut, other2.ServerCert) {
		t.Errorf("firn info pinned to another certificate: exit %d %q, want a refusal naming it", code, errOut)
	}
	// A node asking for client certificates: the flags are needed.
	env = append(env, "FIRN_TLS_CLIENT_CA="+pki.CA)
	if _, errOut, code := cli(t, env, "info"); code != exitUsage || !strings.Contains(errOut, "--tls-cert") {
		t.Errorf("firn info of an mTLS node without --tls-cert: exit %d %q", code, errOut)
	}
}
