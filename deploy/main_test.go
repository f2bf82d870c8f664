package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Built once by TestMain.
var (
	firnBin    string          // ../cmd/firn, built
	healthzBin string          // ./cmd/firn-healthz, built
	serveFlags map[string]bool // flag names `firn serve --help` lists
)

// repoRoot is the main module's directory.
const repoRoot = ".."

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "firn-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	firnBin = filepath.Join(dir, "firn")
	healthzBin = filepath.Join(dir, "firn-healthz")
	for _, b := range []struct{ dir, out, pkg string }{
		{repoRoot, firnBin, "./cmd/firn"},
		{".", healthzBin, "./cmd/firn-healthz"},
	} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", b.pkg, err, out)
			return 1
		}
	}
	serveFlags, err = helpFlags(firnBin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

var helpFlagLine = regexp.MustCompile(`(?m)^\s+(?:-[a-z], )?--([a-z0-9][a-z0-9-]*)\b`)

// helpFlags runs `firn serve --help` and returns the flag names it lists.
func helpFlags(bin string) (map[string]bool, error) {
	out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("firn serve --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range helpFlagLine.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 10 || !flags["grpc-addr"] || !flags["http-addr"] {
		return nil, fmt.Errorf("firn serve --help lists too few flags (%d):\n%s", len(flags), out)
	}
	return flags, nil
}

// flagOfEnv maps FIRN_NODE_NAME to node-name; ok is false for a name that
// is not FIRN_<FLAG> of any serve flag.
func flagOfEnv(name string) (string, bool) {
	rest, found := strings.CutPrefix(name, "FIRN_")
	if !found {
		return "", false
	}
	f := strings.ToLower(strings.ReplaceAll(rest, "_", "-"))
	return f, serveFlags[f]
}

// flagName returns the name of a command-line flag argument ("--a=b",
// "-a", "--a"), or "" for a value.
func flagName(arg string) string {
	if !strings.HasPrefix(arg, "-") || arg == "-" || arg == "--" {
		return ""
	}
	name := strings.TrimLeft(arg, "-")
	name, _, _ = strings.Cut(name, "=")
	return name
}

// checkArgs fails t for every flag in args that `firn serve` does not know.
func checkArgs(t *testing.T, where string, args []string) {
	t.Helper()
	for _, a := range args {
		if n := flagName(a); n != "" && !serveFlags[n] {
			t.Errorf("%s: flag --%s is not a `firn serve` flag", where, n)
		}
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// node is a running `firn serve` process.
type node struct {
	cmd        *exec.Cmd
	httpAddr   string
	faultAddr  string
	clientAddr string // embedded etcd client URL, "" when external
	out        *lockedBuffer
	done       chan struct{}
	waitErr    error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func newLockedBuffer() *lockedBuffer { return &lockedBuffer{} }

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startNode runs firn serve with loopback listeners on free ports, fault
// injection on, and extra flags; embedded selects the embedded etcd. It
// waits for /healthz and stops the process when the test ends.
func startNode(t *testing.T, embedded bool, extra ...string) *node {
	t.Helper()
	return startNodeEnv(t, nil, embedded, extra...)
}

// startNodeEnv is startNode with env (NAME=value) added to the node's
// environment.
func startNodeEnv(t *testing.T, env []string, embedded bool, extra ...string) *node {
	t.Helper()
	n := &node{
		httpAddr:  fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		faultAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		out:       newLockedBuffer(),
		done:      make(chan struct{}),
	}
	args := []string{"serve",
		"--data-dir", t.TempDir(),
		"--grpc-addr", "127.0.0.1:0",
		"--http-addr", n.httpAddr,
		"--enable-fault-injection", "--fault-addr", n.faultAddr,
	}
	if embedded {
		n.clientAddr = fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
		args = append(args,
			"--embedded-client-addr", strings.TrimPrefix(n.clientAddr, "http://"),
			"--embedded-peer-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	}
	args = append(args, extra...)
	n.cmd = exec.Command(firnBin, args...)
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	// Only the flags given here: no FIRN_* from the caller's environment.
	n.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.waitErr = n.cmd.Wait(); close(n.done) }()
	t.Cleanup(func() { n.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _, err := httpGet("http://" + n.httpAddr + "/healthz"); err == nil && code == 200 {
			return n
		}
		select {
		case <-n.done:
			t.Fatalf("firn serve %v exited: %v\n%s", args, n.waitErr, n.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("firn serve: /healthz not answering after 30s\n%s", n.out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits (killing after 15 s).
func (n *node) stop(t *testing.T) {
	select {
	case <-n.done:
		return
	default:
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(15 * time.Second):
		n.cmd.Process.Kill()
		<-n.done
		t.Errorf("firn serve did not stop within 15s of SIGTERM\n%s", n.out)
	}
}

func httpGet(u string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitReady waits until /readyz answers want (200 or 503).
func (n *node) waitReady(t *testing.T, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var code int
	var body string
	for time.Now().Before(deadline) {
		var err error
		code, body, err = httpGet("http://" + n.httpAddr + "/readyz")
		if err == nil && code == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("/readyz did not answer %d within %v (last %d %s)\n%s", want, within, code, body, n.out)
}

// setOffset sets the injected clock offset through the fault listener.
func (n *node) setOffset(t *testing.T, d time.Duration) {
	t.Helper()
	resp, err := http.PostForm("http://"+n.faultAddr+"/debug/fault/clock-offset", url.Values{"offset": {d.String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("set offset %v: %s %s", d, resp.Status, b)
	}
}

// issue takes count IDs over HTTP, so the generator's logical time is at
// the clock.
func (n *node) issue(t *testing.T, count int) {
	t.Helper()
	code, body, err := httpGet("http://" + n.httpAddr + "/v1/ids?count=" + strconv.Itoa(count))
	if err != nil || code != 200 {
		t.Fatalf("/v1/ids: %d %s %v", code, body, err)
	}
}

// scrape returns the node's /metrics text.
func (n *node) scrape(t *testing.T) string {
	t.Helper()
	code, body, err := httpGet("http://" + n.httpAddr + "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	return body
}

// sampleNames returns the metric names of the samples in a text
// exposition (histogram series appear as _bucket, _sum and _count).
func sampleNames(exposition string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(exposition, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// promtool runs promtool with args (and stdin), returning its output and
// exit code.
func promtool(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("promtool", args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	default:
		t.Fatalf("promtool %v: %v (test/run.sh installs Debian's prometheus package, which ships promtool)", args, err)
		return "", -1
	}
}

// runHealthz runs the image's health check against u and returns its exit
// code.
func runHealthz(t *testing.T, u string) int {
	t.Helper()
	cmd := exec.Command(healthzBin, u)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		t.Logf("firn-healthz %s: exit %d: %s", u, ee.ExitCode(), strings.TrimSpace(string(out)))
		return ee.ExitCode()
	default:
		t.Fatal(err)
		return -1
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", freePort(t))
}
