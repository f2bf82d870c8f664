package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
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
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/testing/freeport"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary builds the firn binary once per test process, without -race (the
// harness itself runs under -race).
func Binary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			binErr = err
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		dir, err := os.MkdirTemp("", "firn-cluster-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "firn")
		// FIRN_CHAOS_TAGS builds a weakened node (test/run.sh runs a
		// scenario against one, which must go red).
		cmd := exec.Command("go", "build", "-tags", os.Getenv("FIRN_CHAOS_TAGS"), "-o", binPath, "./cmd/firn")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/firn: %v\n%s", err, b)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// freePort returns a free loopback port, never the same one twice in this
// process, outside the ephemeral range (a node restarted keeps its ports).
func freePort(t testing.TB) int {
	t.Helper()
	return freeport.Port(t)
}

// Node is one firn process.
type Node struct {
	t        testing.TB
	Name     string
	DataDir  string
	GRPCAddr string
	HTTPAddr string
	FaultAdr string
	args     []string
	logPath  string

	mu    sync.Mutex
	cmd   *exec.Cmd
	exit  chan struct{}
	runs  int
	conn  *grpc.ClientConn
	ID    firnv1.IDServiceClient
	Hlth  healthpb.HealthClient
	state string
}

// NodeOptions configure a Node.
type NodeOptions struct {
	// Coordinator flags (--etcd … or --zookeeper …).
	Coord []string
	// Extra flags for every start.
	Extra []string
	// Cluster name (a fresh one per scenario).
	Cluster string
}

// NewNode prepares a node (not started) with its own data dir and ports.
func NewNode(t testing.TB, name string, o NodeOptions) *Node {
	t.Helper()
	dir := t.TempDir()
	n := &Node{
		t:        t,
		Name:     name,
		DataDir:  filepath.Join(dir, "data"),
		GRPCAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		HTTPAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		FaultAdr: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		logPath:  filepath.Join(dir, "node.log"),
	}
	n.args = append([]string{"serve",
		"--data-dir", n.DataDir, "--node-name", name,
		"--enable-fault-injection",
		"--cluster", o.Cluster, "--log-level", "debug"}, o.Coord...)
	n.args = append(n.args, o.Extra...)
	t.Cleanup(func() {
		n.Kill()
		n.mu.Lock()
		if n.conn != nil {
			n.conn.Close()
		}
		n.mu.Unlock()
		if t.Failed() {
			if b, err := os.ReadFile(n.logPath); err == nil {
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				if len(lines) > 40 {
					lines = lines[len(lines)-40:]
				}
				t.Logf("node %s log tail:\n%s", name, strings.Join(lines, "\n"))
			}
		}
	})
	return n
}

// Start runs the node with its flags plus extra ones for this run. At the
// first start it waits until the node listens (or exits): a port taken by
// another process between picking it and binding it is replaced by a fresh
// one, so that a busy machine does not fail the scenario.
func (n *Node) Start(extra ...string) {
	n.t.Helper()
	for attempt := 0; ; attempt++ {
		n.start(extra)
		if n.runs > 1 || attempt == 3 {
			return
		}
		if !n.waitListening(20*time.Second) && n.bindFailed() {
			n.Kill()
			n.mu.Lock()
			n.GRPCAddr = fmt.Sprintf("127.0.0.1:%d", freePort(n.t))
			n.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", freePort(n.t))
			n.FaultAdr = fmt.Sprintf("127.0.0.1:%d", freePort(n.t))
			if n.conn != nil {
				n.conn.Close()
				n.conn = nil
			}
			n.runs = 0
			n.mu.Unlock()
			continue
		}
		return
	}
}

// waitListening waits until the process says it listens (its "serving
// gRPC on" line) or exits.
func (n *Node) waitListening(d time.Duration) bool {
	n.mu.Lock()
	exit := n.exit
	n.mu.Unlock()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(n.logPath); strings.Contains(string(b), "serving gRPC on") {
			return true
		}
		select {
		case <-exit:
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

func (n *Node) bindFailed() bool {
	b, _ := os.ReadFile(n.logPath)
	return strings.Contains(string(b), "address already in use")
}

func (n *Node) start(extra []string) {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		n.t.Fatalf("node %s already running", n.Name)
	}
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	n.runs++
	fmt.Fprintf(f, "{\"harness\":\"start\",\"run\":%d}\n", n.runs)
	args := append(append([]string{}, n.args...), "--grpc-addr", n.GRPCAddr, "--http-addr", n.HTTPAddr, "--fault-addr", n.FaultAdr)
	cmd := exec.Command(Binary(n.t), append(args, extra...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		n.t.Fatalf("start node %s: %v", n.Name, err)
	}
	exit := make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(exit) }()
	n.cmd, n.exit = cmd, exit
	if n.conn == nil {
		conn, err := grpc.NewClient(n.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			n.t.Fatal(err)
		}
		n.conn, n.ID, n.Hlth = conn, firnv1.NewIDServiceClient(conn), healthpb.NewHealthClient(conn)
	}
}

// Run is how many times the node was started: which of its processes
// runs (or ran last).
func (n *Node) Run() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runs
}

// PID of the running process (0 when stopped).
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

func (n *Node) signal(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		n.cmd.Process.Signal(sig)
	}
}

// Stop sends SIGTERM and waits for the exit (up to d); it returns the exit code.
func (n *Node) Stop(d time.Duration) int {
	n.mu.Lock()
	cmd, exit := n.cmd, n.exit
	n.mu.Unlock()
	if cmd == nil {
		return 0
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exit:
	case <-time.After(d):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exit
	}
	n.mu.Lock()
	n.cmd = nil
	n.mu.Unlock()
	return cmd.ProcessState.ExitCode()
}

// Kill sends SIGKILL (to the process group) and waits.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd, exit := n.cmd, n.exit
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exit
}

// Freeze and Thaw send SIGSTOP and SIGCONT.
func (n *Node) Freeze() { n.signal(syscall.SIGSTOP) }
func (n *Node) Thaw()   { n.signal(syscall.SIGCONT) }

// Ready reports /readyz's status code and body (0 when unreachable).
func (n *Node) Ready() (int, string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + n.HTTPAddr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// WaitReady waits until /readyz answers 200, and reports how long it took.
func (n *Node) WaitReady(d time.Duration) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < d {
		if code, _ := n.Ready(); code == 200 {
			return time.Since(start), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, body := n.Ready()
	return time.Since(start), fmt.Errorf("node %s not ready after %v: %d %s", n.Name, d, code, body)
}

// WaitNotReady waits until /readyz answers 503 and returns its body.
func (n *Node) WaitNotReady(d time.Duration) (time.Duration, string, error) {
	start := time.Now()
	for time.Since(start) < d {
		if code, body := n.Ready(); code == 503 {
			return time.Since(start), body, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, body := n.Ready()
	return time.Since(start), body, fmt.Errorf("node %s still %d after %v: %s", n.Name, code, d, body)
}

// SetOffset sets the node's injected clock offset.
func (n *Node) SetOffset(d time.Duration) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.PostForm("http://"+n.FaultAdr+"/debug/fault/clock-offset", url.Values{"offset": {d.String()}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("set offset: %s", resp.Status)
	}
	return nil
}

// Health asks grpc.health.v1 for a service ("" is the default generator).
func (n *Node) Health(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := n.Hlth.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return r.Status, nil
}

// LogLines returns the node's JSON log lines (all runs), decoded.
func (n *Node) LogLines() []map[string]any {
	f, err := os.Open(n.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// Interval is one holder interval a node logged: a lease of one worker, from its floor to its last acknowledged reservation.
type Interval struct {
	Node       string
	Generator  string
	Worker     uint64
	Datacenter uint64
	Floor      int64
	Reserved   int64 // the largest acknowledged reservation logged
	Instance   string
	// Released: the holder released its lease, lowering the reservation
	// to Highest (the highest time it produced).
	Released bool
	Highest  int64
}

// Upper is the largest time the holder may have used.
func (h *Interval) Upper() int64 {
	if h.Released {
		return h.Highest
	}
	return h.Reserved
}

// Intervals parses the node's holder_open / holder_reserve / holder_close
// lines. A node holds one interval per generator and worker at a time (a
// wide generator several at once, one per worker), but for a moment: a
// holding whose lease ended, not yet closed, beside another of the node
// that took its worker again. The lines name their holding apart.
func (n *Node) Intervals() []*Interval {
	var out []*Interval
	type key struct {
		gen             string
		dc, wk, holding int64
	}
	cur := map[key]*Interval{}
	num := func(m map[string]any, k string) int64 {
		switch v := m[k].(type) {
		case float64:
			return int64(v)
		case string:
			x, _ := strconv.ParseInt(v, 10, 64)
			return x
		}
		return 0
	}
	for _, m := range n.LogLines() {
		if m["harness"] == "start" {
			cur = map[key]*Interval{}
			continue
		}
		gen, _ := m["generator"].(string)
		k := key{gen, num(m, "datacenter"), num(m, "worker"), num(m, "holding")}
		switch m["event"] {
		case "holder_open":
			h := &Interval{Node: n.Name, Generator: gen, Worker: uint64(num(m, "worker")), Datacenter: uint64(num(m, "datacenter")),
				Floor: num(m, "floor"), Reserved: num(m, "floor")}
			h.Instance, _ = m["instance"].(string)
			cur[k] = h
			out = append(out, h)
		case "holder_reserve", "holder_close":
			if h := cur[k]; h != nil {
				if r := num(m, "reserved"); r > h.Reserved {
					h.Reserved = r
				}
				if m["event"] == "holder_close" {
					h.Released, _ = m["released"].(bool)
					h.Highest = num(m, "highest")
					delete(cur, k)
				}
			}
		}
	}
	return out
}
