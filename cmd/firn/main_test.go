package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// firnBin is the binary under test, built once by TestMain.
var firnBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "firn-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "firn tests:", err)
		os.Exit(1)
	}
	firnBin = filepath.Join(dir, "firn")
	// No VCS stamping whatever the machine's GOFLAGS: `firn version` of
	// this binary is "dev" (TestVersion); deploy/release.sh stamps both.
	build := exec.Command("go", "build", "-buildvcs=false", "-o", firnBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "firn tests: go build:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cleanEnv is the test's environment without any FIRN_ variable, plus
// extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FIRN_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// syncBuf is an output buffer safe for the process's writer goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// addrs are the four loopback listeners of one `firn serve`.
type addrs struct{ grpc, http, eclient, epeer string }

func freeAddrs(t *testing.T) addrs {
	f := func() string { return fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t)) }
	return addrs{f(), f(), f(), f()}
}

func (a addrs) args() []string {
	return []string{"--grpc-addr", a.grpc, "--http-addr", a.http,
		"--embedded-client-addr", a.eclient, "--embedded-peer-addr", a.epeer}
}

// proc is one running `firn serve`.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	stdout  *syncBuf
	stderr  *syncBuf
	done    chan struct{}
	started time.Time
	a       addrs
	conn    *grpc.ClientConn
}

// serve starts `firn serve --data-dir dir` on the listeners a, with args
// after the listener flags and env added to a FIRN_-free environment. The
// process is killed at cleanup if it still runs.
func serve(t *testing.T, dir string, a addrs, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, stdout: &syncBuf{}, stderr: &syncBuf{}, done: make(chan struct{}), a: a}
	full := append([]string{"serve", "--data-dir", dir}, a.args()...)
	p.cmd = exec.Command(firnBin, append(full, args...)...)
	p.cmd.Env = cleanEnv(env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting firn serve: %v", err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("firn serve %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], p.stdout, p.stderr)
		}
	})
	return p
}

// exited reports whether the process ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitReady polls /readyz until 200 and returns how long after the start
// it came.
func (p *proc) waitReady(within time.Duration) time.Duration {
	p.t.Helper()
	c := &http.Client{Timeout: time.Second}
	last := ""
	for time.Since(p.started) < within {
		if p.exited() {
			p.t.Fatalf("firn serve exited (%v) before it served: %s", p.cmd.ProcessState, lastLine(p.stderr.String()))
		}
		resp, err := c.Get("http://" + p.a.http + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return time.Since(p.started)
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		time.Sleep(25 * time.Millisecond)
	}
	p.t.Fatalf("firn serve not ready within %v: last /readyz %s", within, last)
	return 0
}

// signal sends sig and waits for the exit (bounded), returning the code.
func (p *proc) signal(sig syscall.Signal, within time.Duration) int {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("firn serve did not exit within %v of %v", within, sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

// client is a gRPC client of the node (one connection per proc).
func (p *proc) client() firnv1.IDServiceClient {
	p.t.Helper()
	if p.conn == nil {
		conn, err := grpc.NewClient(p.a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			p.t.Fatal(err)
		}
		p.t.Cleanup(func() { conn.Close() })
		p.conn = conn
	}
	return firnv1.NewIDServiceClient(p.conn)
}

func (p *proc) info() *firnv1.InfoResponse {
	p.t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := p.client().Info(c, &firnv1.InfoRequest{})
	if err != nil {
		p.t.Fatalf("Info: %v", err)
	}
	return resp
}

// genServing reports whether Info says the named generator serves.
func (p *proc) genServing(name string) bool {
	p.t.Helper()
	for _, g := range p.info().GetGenerators() {
		if g.GetName() == name {
			return g.GetServing()
		}
	}
	p.t.Fatalf("no generator %q", name)
	return false
}

// cli runs `firn args...` to completion (bounded) and returns its output
// and exit code.
func cli(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(c, firnBin, args...)
	cmd.Env = cleanEnv(env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if c.Err() != nil {
		t.Fatalf("firn %v did not finish within 30s", args)
	}
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("firn %v: %v", args, err)
		}
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// ids runs `firn next -n k` and parses its lines.
func ids(t *testing.T, addr string, k int) []uint64 {
	t.Helper()
	out, errOut, code := cli(t, nil, "next", "--addr", addr, "-n", strconv.Itoa(k))
	if code != 0 {
		t.Fatalf("firn next -n %d: exit %d: %s", k, code, errOut)
	}
	lines := strings.Fields(out)
	if len(lines) != k {
		t.Fatalf("firn next -n %d printed %d IDs", k, len(lines))
	}
	res := make([]uint64, k)
	for i, l := range lines {
		v, err := strconv.ParseUint(l, 10, 64)
		if err != nil {
			t.Fatalf("firn next: %q is not an ID", l)
		}
		res[i] = v
	}
	return res
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
