package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// The embedded default: `firn serve` with a data dir and ports and nothing
// else serves, and next, info and decode work against it; SIGTERM exits 0.
func TestServeEmbeddedDefault(t *testing.T) {
	a := freeAddrs(t)
	p := serve(t, t.TempDir(), a, nil)
	p.waitReady(30 * time.Second)
	if !strings.Contains(p.stdout.String(), "embedded etcd at http://"+a.eclient) {
		t.Fatalf("stdout does not print the embedded etcd URL:\n%s", p.stdout)
	}
	// The node paces GOGC from its live heap (internal/gcpace): a heap of
	// a few MB collects no sooner than 64 MiB later, GOGC well above 100;
	// a GOGC in the environment is left as it is.
	resp, err := http.Get("http://" + a.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go_gc_gogc_percent (\d+)$`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("/metrics lacks go_gc_gogc_percent")
	}
	gogc, _ := strconv.Atoi(string(m[1]))
	if env := os.Getenv("GOGC"); env == "" && gogc <= 100 {
		t.Fatalf("go_gc_gogc_percent %d: want the node to pace it above 100 for its small heap", gogc)
	} else if env != "" && string(m[1]) != env {
		t.Fatalf("go_gc_gogc_percent %d with GOGC=%s in the environment", gogc, env)
	}

	one := ids(t, a.grpc, 1)
	five := ids(t, a.grpc, 5)
	all := append(one, five...)
	for i := 1; i < len(all); i++ {
		if all[i] <= all[i-1] {
			t.Fatalf("firn next IDs not increasing: %v", all)
		}
	}

	out, errOut, code := cli(t, nil, "info", "--addr", a.grpc)
	if code != 0 {
		t.Fatalf("firn info: exit %d: %s", code, errOut)
	}
	// No NTP, one node, no --unchecked-clock-ok: the node's own embedded
	// coordinator serves on the unchecked clock, and says so.
	for _, want := range []string{"generator default (default): SERVING", "embedded etcd: http://" + a.eclient,
		"layout time=41,dc=5,worker=5,seq=12", "max batch 100000",
		"clock check: unchecked, accepted on this node's own embedded coordinator"} {
		if !strings.Contains(out, want) {
			t.Fatalf("firn info lacks %q:\n%s", want, out)
		}
	}

	// The embedded etcd's URL is the coordinator for the admin commands.
	out, errOut, code = cli(t, nil, "workers", "--etcd", "http://"+a.eclient)
	if code != 0 || !strings.Contains(out, "1 live of 1024 worker IDs") || !strings.Contains(out, a.grpc) {
		t.Fatalf("firn workers: exit %d %s\n%s", code, errOut, out)
	}

	id := strconv.FormatUint(all[len(all)-1], 10)
	remote, errOut, code := cli(t, nil, "decode", "--addr", a.grpc, id)
	if code != 0 {
		t.Fatalf("firn decode: exit %d: %s", code, errOut)
	}
	local, errOut, code := cli(t, nil, "decode", "--layout", "snowflake", id)
	if code != 0 {
		t.Fatalf("firn decode --layout: exit %d: %s", code, errOut)
	}
	if !regexp.MustCompile(`^time=\S+ datacenter=\d+ worker=\d+ sequence=\d+\n$`).MatchString(remote) || remote != local {
		t.Fatalf("firn decode: node says %q, layout says %q", remote, local)
	}
	_, errOut, code = cli(t, nil, "decode", "--addr", a.grpc, strconv.FormatUint(1<<63, 10))
	if code != exitUsage || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "InvalidArgument") {
		t.Fatalf("firn decode of a garbage ID: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = cli(t, nil, "next", "--addr", a.grpc, "--generator", "nope")
	if code != exitUsage || !strings.Contains(errOut, "NotFound") {
		t.Fatalf("firn next --generator nope: exit %d, stderr %q", code, errOut)
	}

	if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
}

// A restart on the same data dir resumes above its own reservation: after
// SIGTERM (exit 0, lease released, serving at once) and after kill -9
// (serving within the reservation window + 1s, IDs above).
func TestRestartResumesAbove(t *testing.T) {
	dir := t.TempDir()
	a := freeAddrs(t)
	p := serve(t, dir, a, nil)
	first := p.waitReady(30 * time.Second)
	before := ids(t, a.grpc, 1000)
	if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}

	p = serve(t, dir, a, nil)
	// At once: the start itself (embedded etcd included) and no more. A
	// lease left to expire would add the 5s TTL, an unlowered reservation
	// about 4s.
	again := p.waitReady(30 * time.Second)
	t.Logf("first start served after %v, the restart after SIGTERM after %v", first.Round(time.Millisecond), again.Round(time.Millisecond))
	if again > first+2*time.Second {
		t.Fatalf("after SIGTERM the restart served after %v (the first start after %v): not at once", again, first)
	}
	after := ids(t, a.grpc, 1000)
	if after[0] <= before[len(before)-1] {
		t.Fatalf("after SIGTERM the first ID %d is not above the last %d", after[0], before[len(before)-1])
	}

	// kill -9: the reservation stays up to a window ahead.
	killed := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p = serve(t, dir, a, nil)
	p.waitReady(30 * time.Second)
	since := time.Since(killed)
	t.Logf("the restart after kill -9 served %v after the kill", since.Round(time.Millisecond))
	if since > 5*time.Second+time.Second+first {
		t.Fatalf("after kill -9 the restart served %v after the kill; want within the 5s window + 1s (+ the %v start)", since, first)
	}
	crash := ids(t, a.grpc, 10)
	if crash[0] <= after[len(after)-1] {
		t.Fatalf("after kill -9 the first ID %d is not above the last %d", crash[0], after[len(after)-1])
	}
	if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
}

// Bad flags: exit code 2 and one line on stderr naming the flag and the
// bound; nothing is started.
func TestBadFlags(t *testing.T) {
	a := freeAddrs(t)
	cases := []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{"unknown flag", []string{"--no-such-flag"}, nil, []string{"no-such-flag"}},
		{"bad value", []string{"--max-batch", "abc"}, nil, []string{"max-batch", "abc"}},
		{"max-batch 0", []string{"--max-batch", "0"}, nil, []string{"--max-batch", "0", "[1, 1000000]"}},
		{"bad layout", []string{"--generator", "user=time=41,dc=5,worker=10,seq=12,unit=1ms,epoch=2020-01-01T00:00:00Z"}, nil,
			[]string{"--generator", "user", "68 exceeds 63 bits"}},
		{"layout running out", []string{"--generator", "user=time=20,worker=10,seq=12,unit=1ms,epoch=2020-01-01T00:00:00Z"}, nil,
			[]string{"--generator", "user", "within 10 years"}},
		{"bad layout key", []string{"--generator", "user=bits=99"}, nil, []string{"--generator", "user", "bits"}},
		{"unknown preset", []string{"--generator", "user=bogus"}, nil, []string{"--generator", "bogus"}},
		{"non-loopback grpc-addr", []string{"--grpc-addr", "0.0.0.0:7300"}, nil, []string{"--grpc-addr", "loopback", "--embedded-serve-remote"}},
		{"non-loopback http-addr", []string{"--http-addr", "192.0.2.1:7301"}, nil, []string{"--http-addr", "loopback"}},
		{"fault offset without the flag", []string{"--fault-clock-offset", "-5s"}, nil, []string{"--fault-clock-offset", "--enable-fault-injection"}},
		{"ring size", []string{"--ring-size", "100"}, nil, []string{"--ring-size", "power of two"}},
		{"lease ttl", []string{"--lease-ttl", "1s"}, nil, []string{"--lease-ttl", "2s"}},
		{"env max-batch", nil, []string{"FIRN_MAX_BATCH=2000000"}, []string{"--max-batch", "[1, 1000000]"}},
		{"env bad value", nil, []string{"FIRN_MAX_BATCH=lots"}, []string{"FIRN_MAX_BATCH", "max-batch"}},
		{"extra argument", []string{"now"}, nil, []string{"unexpected argument", "now"}},
		{"ntp port", []string{"--ntp", "127.0.0.1:0"}, nil, []string{"--ntp", "1..65535"}},
		{"segment start 0", []string{"--generator", "orders=segment,start=0"}, nil, []string{"--generator", "orders", "start", "[1, 9223372036854775807)"}},
		{"segment start not below max", []string{"--generator", "orders=segment,start=10,max=5"}, nil, []string{"--generator", "orders", "start", "max 5"}},
		{"segment unknown parameter", []string{"--generator", "orders=segment,step=5"}, nil, []string{"--generator", "orders", "step", "start=N and max=M"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			args := append(append([]string{"serve", "--data-dir", dir}, a.args()...), c.args...)
			out, errOut, code := cli(t, c.env, args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want 2; stderr %q", code, errOut)
			}
			msg := strings.TrimSpace(errOut)
			if msg == "" || strings.Contains(msg, "\n") {
				t.Fatalf("stderr is not one line:\n%s", errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Fatalf("stderr %q does not name %q", msg, w)
				}
			}
			if out != "" {
				t.Fatalf("stdout %q for a refused start", out)
			}
			if _, err := os.Stat(dir); err == nil {
				t.Fatalf("a refused start created the data dir")
			}
		})
	}
	// The other commands refuse bad flags the same way.
	for _, args := range [][]string{{"next", "-n", "0"}, {"next", "--bogus"}, {"decode"}, {"decode", "abc"},
		{"info", "--bogus"}, {"fault", "clock", "--offset", "soon"}, {"nosuchcommand"}} {
		_, errOut, code := cli(t, nil, args...)
		if msg := strings.TrimSpace(errOut); code != exitUsage || msg == "" || strings.Contains(msg, "\n") {
			t.Fatalf("firn %v: exit %d, stderr %q; want 2 and one line", args, code, errOut)
		}
	}
}

// Precedence: a flag beats the environment, which beats the --config file,
// which beats the default; a list's environment variable separates its
// items with ','.
func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(t.TempDir(), "firn.yaml")
	yaml := "max-batch: 111\ncluster: from-file\ngenerator:\n  - only=snowflake\nnode-name: file-node\n"
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	a := freeAddrs(t)
	p := serve(t, dir, a, []string{"FIRN_MAX_BATCH=222", "FIRN_GENERATOR=main=snowflake,user=compact", "FIRN_NODE_NAME=env-node"},
		"--config", conf, "--max-batch", "333")
	p.waitReady(30 * time.Second)
	info := p.info()
	if info.GetCluster() != "from-file" {
		t.Fatalf("cluster %q, want the file's from-file over the default", info.GetCluster())
	}
	gens := info.GetGenerators()
	if len(gens) != 2 || gens[0].GetName() != "main" || gens[1].GetName() != "user" {
		t.Fatalf("generators %v, want the environment's main and user over the file's", gens)
	}
	if mb := gens[0].GetMaxBatch(); mb != 333 {
		t.Fatalf("max batch %d, want the flag's 333 over the environment's 222 and the file's 111", mb)
	}
	if name := info.GetNodeName(); name != "env-node" {
		t.Fatalf("node name %q, want the environment's env-node over the file's", name)
	}
	if mb := gens[1].GetMaxBatch(); mb != 128 {
		t.Fatalf("user max batch %d, want min(333, compact's 64 × 2)", mb)
	}
	if ml := gens[0].GetMaxLead().AsDuration(); ml != time.Second {
		t.Fatalf("max lead %v, want the default 1s", ml)
	}
	// /readyz follows the default generator only; wait for user too.
	for start := time.Now(); !p.genServing("user"); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("generator user not serving within 10s")
		}
	}
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.client().NextID(c, &firnv1.NextIDRequest{Generator: "user"}); err != nil {
		t.Fatalf("NextID user: %v", err)
	}
	if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}

	// An unknown key in the file is refused like a bad flag.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("max-bach: 5\n"), 0o600)
	_, errOut, code := cli(t, nil, append(append([]string{"serve", "--data-dir", t.TempDir()}, freeAddrs(t).args()...), "--config", bad)...)
	if code != exitUsage || !strings.Contains(errOut, "max-bach") {
		t.Fatalf("unknown config key: exit %d, stderr %q", code, errOut)
	}
}

// `firn fault clock` sets the offset of a node with fault injection: −5s
// takes it out of service, 0 brings it back; without the flag nothing
// listens.
func TestFaultClockCommand(t *testing.T) {
	a := freeAddrs(t)
	fault := freeAddrs(t).grpc
	p := serve(t, t.TempDir(), a, nil, "--enable-fault-injection", "--fault-addr", fault)
	p.waitReady(30 * time.Second)
	if !strings.Contains(p.stderr.String(), "FAULT INJECTION ENABLED") {
		t.Fatal("fault injection is not logged loudly")
	}
	// IDs first, so that the generator's time stands at the clock when it
	// steps back (a generator that issued nothing has nothing to protect).
	ids(t, a.grpc, 10)
	out, errOut, code := cli(t, nil, "fault", "clock", "--addr", fault, "--offset", "-5s")
	if code != 0 || !strings.Contains(out, "-5s") {
		t.Fatalf("firn fault clock --offset -5s: exit %d, %q %q", code, out, errOut)
	}
	var msg string
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(20 * time.Millisecond) {
		_, errOut, code = cli(t, nil, "next", "--addr", a.grpc)
		if code != 0 {
			msg = errOut
			break
		}
	}
	if code != exitNotReady || !strings.Contains(msg, "not serving (CLOCK_ROLLBACK)") || !strings.Contains(msg, "clock rolled back") {
		t.Fatalf("firn next after −5s: exit %d, stderr %q; want 3 and the rollback", code, msg)
	}
	if out, _, code := cli(t, nil, "info", "--addr", a.grpc); code != 0 || !strings.Contains(out, "NOT SERVING (CLOCK_ROLLBACK): clock rolled back") {
		t.Fatalf("firn info after −5s: exit %d:\n%s", code, out)
	}
	if _, errOut, code := cli(t, nil, "fault", "clock", "--addr", fault, "--offset", "0"); code != 0 {
		t.Fatalf("firn fault clock --offset 0: exit %d %q", code, errOut)
	}
	p.started = time.Now()
	p.waitReady(5 * time.Second)
	ids(t, a.grpc, 3)

	if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}

	// A node without the flag, given the same fault address: nothing
	// listens there.
	q := serve(t, t.TempDir(), freeAddrs(t), nil, "--fault-addr", fault)
	q.waitReady(30 * time.Second)
	_, errOut, code = cli(t, nil, "fault", "clock", "--addr", fault, "--offset", "-1s")
	if code != exitFailure || strings.Contains(strings.TrimSpace(errOut), "\n") || !strings.Contains(errOut, "--enable-fault-injection") {
		t.Fatalf("firn fault clock against a node without fault injection: exit %d, stderr %q", code, errOut)
	}
	if strings.Contains(q.stderr.String(), "FAULT INJECTION") {
		t.Fatal("a node without the flag logs fault injection")
	}
}

// A copied data dir is refused on the embedded coordinator (two copies
// would be two private coordinators issuing the same IDs), unless
// --accept-moved-data-dir accepts it.
func TestCopiedDataDirRefused(t *testing.T) {
	orig := filepath.Join(t.TempDir(), "orig")
	a := freeAddrs(t)
	p := serve(t, orig, a, nil)
	p.waitReady(30 * time.Second)
	instance := p.info().GetInstanceId()
	last := ids(t, a.grpc, 100)
	if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	// The identity record is the node's own: its instance ID.
	b, err := os.ReadFile(filepath.Join(orig, "embedded", "identity.json"))
	if err != nil {
		t.Fatalf("no identity record in the data dir: %v", err)
	}
	var id struct {
		InstanceID string `json:"instance_id"`
	}
	if err := json.Unmarshal(b, &id); err != nil || id.InstanceID != instance {
		t.Fatalf("identity record %s (%v) does not carry the node's instance ID %s", b, err, instance)
	}

	copyDir := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", orig, copyDir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	q := serve(t, copyDir, a, nil)
	select {
	case <-q.done:
	case <-time.After(20 * time.Second):
		t.Fatal("a copied data dir was not refused within 20s")
	}
	msg := strings.TrimSpace(q.stderr.String())
	if code := q.cmd.ProcessState.ExitCode(); code != exitFailure || !strings.Contains(lastLine(msg), "data dir copied or moved") ||
		!strings.Contains(lastLine(msg), "--accept-moved-data-dir") {
		t.Fatalf("copied data dir: exit %d, stderr %q", code, msg)
	}

	r := serve(t, copyDir, a, nil, "--accept-moved-data-dir")
	r.waitReady(30 * time.Second)
	if got := ids(t, a.grpc, 1); got[0] <= last[len(last)-1] {
		t.Fatalf("accepted copy issued %d, not above the original's last %d", got[0], last[len(last)-1])
	}
	if code := r.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
}

// After a restore from a snapshot older than a worker's first use, the
// coordinator knows nothing of that worker: `firn coordinator bump` sets
// the generator floor, and the next holder of the worker starts above
// max(now, every reservation) + D rather than at its clock.
func TestBumpAfterRestore(t *testing.T) {
	t.Parallel() // its own etcd, ports and dirs
	srv := etcdtest.StartEmbedded(t)
	ep := srv.Endpoints[0]
	a := freeAddrs(t)
	// One node on an external etcd without NTP: --unchecked-clock-ok (the
	// test is about the bump's floor, not the clock check).
	p := serve(t, t.TempDir(), a, nil, "--etcd", ep, "--unchecked-clock-ok")
	p.waitReady(30 * time.Second)
	ids(t, a.grpc, 100)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done

	// The restore: the snapshot holds the pin and the cursor, but neither
	// the owner nor the reservation of the worker used since.
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, dir := range []string{"owner/", "reserved/"} {
		del, err := c.Delete(ctx, "/firn/default/default/"+dir, clientv3.WithPrefix())
		if err != nil || del.Deleted != 1 {
			t.Fatalf("deleting %s: %v (%d keys); want one key", dir, err, del.Deleted)
		}
	}
	if _, err := c.Put(ctx, "/firn/default/default/cursor", fmt.Sprintf("%019d", 0)); err != nil {
		t.Fatal(err)
	}

	const by = 3 * time.Second
	bumped, _ := clockguard.NewSystem().Now()
	out, errOut, code := cli(t, nil, "coordinator", "bump", "--by", by.String(), "--etcd", ep)
	if code != 0 || !strings.Contains(out, "floor") {
		t.Fatalf("firn coordinator bump: exit %d, %q %q", code, out, errOut)
	}

	b := freeAddrs(t)
	q := serve(t, t.TempDir(), b, nil, "--etcd", ep, "--unchecked-clock-ok")
	q.waitReady(30 * time.Second)
	first := ids(t, b.grpc, 1)[0]
	sf, _ := generator.Preset("snowflake")
	parts, err := sf.Decode(first)
	if err != nil {
		t.Fatal(err)
	}
	if parts.Worker != 0 || !parts.Time.After(bumped.Add(by)) {
		t.Fatalf("after the bump the worker %d holder's first ID has time %v; want worker 0 above the bump at %v + %v",
			parts.Worker, parts.Time, bumped, by)
	}
	if code := q.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
}

// On an external coordinator, with no NTP and one node, `firn serve`
// does not serve unless told to: /readyz and `firn info` (exit 3) name
// CLOCK_UNCHECKED and what to do; FIRN_UNCHECKED_CLOCK_OK=true serves.
func TestServeUncheckedClockRefused(t *testing.T) {
	srv := etcdtest.StartEmbedded(t)
	ep := srv.Endpoints[0]
	a := freeAddrs(t)
	p := serve(t, t.TempDir(), a, nil, "--etcd", ep)
	var out, errOut string
	code := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, errOut, code = cli(t, nil, "info", "--addr", a.grpc)
		if strings.Contains(out, "CLOCK_UNCHECKED") {
			break
		}
	}
	for _, want := range []string{"NOT SERVING (CLOCK_UNCHECKED)", "no NTP configured", "--unchecked-clock-ok",
		"clock check: unchecked: not serving"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("firn info: exit %d, stderr %q, stdout lacks %q:\n%s", code, errOut, want, out)
		}
	}
	if _, errOut, code := cli(t, nil, "next", "--addr", a.grpc); code != exitNotReady || !strings.Contains(errOut, "CLOCK_UNCHECKED") {
		t.Fatalf("firn next: exit %d, stderr %q; want %d naming CLOCK_UNCHECKED", code, errOut, exitNotReady)
	}
	if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}

	q := serve(t, t.TempDir(), freeAddrs(t), []string{"FIRN_UNCHECKED_CLOCK_OK=true"}, "--etcd", ep)
	q.waitReady(30 * time.Second)
	out, errOut, code = cli(t, nil, "info", "--addr", q.a.grpc)
	if code != 0 || !strings.Contains(out, "clock check: unchecked, accepted by --unchecked-clock-ok") {
		t.Fatalf("firn info with FIRN_UNCHECKED_CLOCK_OK=true: exit %d %s\n%s", code, errOut, out)
	}
	if code := q.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
}

// The profiler (--pprof-addr, held to loopback) answers local callers
// alone: a page that rebinds its own name to 127.0.0.1 sends no Origin
// with a GET but its own name as Host, and would read
// /debug/pprof/cmdline — the node's command line, --etcd-password and
// --zookeeper-auth included. The Host rule is /admin/resume's
// (server.LocalOnly).
func TestPprofLocalCallersOnly(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t))
	stop, err := servePprof(addr, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, c := range []struct {
		host, origin string
		code         int
	}{
		{"", "", 200},
		{"localhost", "", 200},
		{"[::1]", "", 200},
		{"rebound.evil.example", "", 403},
		{"rebound.evil.example:" + addr[strings.LastIndex(addr, ":")+1:], "", 403},
		{"", "http://evil.example", 403},
	} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/debug/pprof/cmdline", nil)
		if c.host != "" {
			req.Host = c.host
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("GET /debug/pprof/cmdline, Host %q Origin %q: %d %q, want %d", c.host, c.origin, resp.StatusCode, strings.ReplaceAll(string(b), "\x00", " "), c.code)
		}
	}
}
