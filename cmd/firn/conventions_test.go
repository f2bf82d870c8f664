package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
