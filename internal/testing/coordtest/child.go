package coordtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

// childEnv carries a child holder's orders (JSON of childOrders) from the
// test to a re-executed copy of the test binary.
const childEnv = "FIRN_COORDTEST_CHILD"

// Main is the backend test package's TestMain: in a child holder it runs
// the holder and exits; otherwise it runs the tests.
func Main(m *testing.M, b Backend) {
	if o := os.Getenv(childEnv); o != "" {
		os.Exit(runChild(b, o))
	}
	os.Exit(m.Run())
}

type childOrders struct {
	Endpoint string               `json:"endpoint"`
	Spec     coordinator.Spec     `json:"spec"`
	Node     coordinator.NodeInfo `json:"node"`
	Start    int64                `json:"start"`    // first reservation
	Interval time.Duration        `json:"interval"` // between reservations
	Life     time.Duration        `json:"life"`     // bound on the child's run
}

// runChild acquires one lease and reserves start, start+1, ... every
// interval, printing "acquired <dc> <worker> <floor>", then "ack <R>" after
// each acknowledged reservation, and "lost" when ownership is gone (then it
// exits 0). It exits 2 when its life runs out first.
func runChild(b Backend, raw string) int {
	var o childOrders
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		fmt.Printf("fatal orders: %v\n", err)
		return 3
	}
	clock := clockguard.NewSystem()
	c, err := b.Dial(o.Endpoint, clock)
	if err != nil {
		fmt.Printf("fatal dial: %v\n", err)
		return 3
	}
	defer c.Close()
	return hold(context.Background(), c, clock, o, func(line string) { fmt.Println(line) })
}

// hold is a child holder's life on c, reporting each event as a line to
// out (see runChild), until ctx ends or o.Life runs out.
func hold(ctx context.Context, c coordinator.Coordinator, clock clockguard.Clock, o childOrders, out func(string)) int {
	ctx, cancel := context.WithTimeout(ctx, o.Life)
	defer cancel()
	l, err := c.Acquire(ctx, o.Spec, o.Node)
	if err != nil {
		out(fmt.Sprintf("fatal acquire: %v", err))
		return 3
	}
	out(fmt.Sprintf("acquired %d %d %d", l.Datacenter(), l.WorkerID(), l.Floor()))
	next := max(o.Start, l.Floor()+1)
	for ctx.Err() == nil {
		wall, _ := clock.Now()
		err := l.Reserve(ctx, next, coordinator.Heartbeat{Node: o.Node, Wall: wall})
		switch {
		case err == nil:
			out(fmt.Sprintf("ack %d", next))
			next++
		case errors.Is(err, coordinator.ErrLeaseLost):
			out("lost")
			return 0
		default:
			out(fmt.Sprintf("error %v", strings.ReplaceAll(err.Error(), "\n", " ")))
		}
		select {
		case <-ctx.Done():
		case <-time.After(o.Interval):
		}
	}
	out("timeout")
	return 2
}

// InProcessCluster is an optional interface of a Cluster whose coordinator
// lives in the test process and cannot be reached from another one (the
// memory coordinator). For it the harness runs each child holder as a
// goroutine on a client of its own and freezes it through its Freezer in
// place of SIGSTOP and SIGCONT; the cases check the same things of it.
type InProcessCluster interface {
	Cluster
	// ConnectChild returns a new client for a child holder, as Connect
	// does (closed at t's cleanup), and the means to freeze it.
	ConnectChild(t testing.TB, clock clockguard.Clock) (coordinator.Coordinator, Freezer)
}

// Freezer stops and resumes everything one client does, as SIGSTOP and
// SIGCONT do to a process: while frozen none of its calls returns (one
// already applied gets its reply only after Thaw) and none of its
// renewals is sent, so its ownership runs out after the TTL.
type Freezer interface {
	Freeze()
	Thaw()
}

// child is the test's handle on a child holder: a process, or a goroutine
// with a Freezer for an InProcessCluster.
type child struct {
	t       testing.TB
	cmd     *exec.Cmd
	freezer Freezer
	mu      sync.Mutex
	acks    []int64
	lines   []string
	slot    chan acquired
	lost    chan struct{}
	exit    chan struct{}
	once    sync.Once
}

type acquired struct {
	slot  coordinator.Slot
	floor int64
}

// startChild re-executes the test binary as a holder of one lease on cl
// (on an InProcessCluster, starts a goroutine holder on a client of its
// own). It is killed at cleanup.
func startChild(t testing.TB, cl Cluster, spec coordinator.Spec, node coordinator.NodeInfo, start int64) *child {
	t.Helper()
	o := childOrders{Endpoint: cl.Endpoint(), Spec: spec, Node: node, Start: start,
		Interval: 100 * time.Millisecond, Life: 60 * time.Second}
	if ic, ok := cl.(InProcessCluster); ok {
		return startInProcess(t, ic, o)
	}
	raw, err := json.Marshal(o)
	if err != nil {
		t.Fatalf("coordtest: child orders: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("coordtest: starting child holder: %v", err)
	}
	ch := &child{t: t, cmd: cmd, slot: make(chan acquired, 1), lost: make(chan struct{}), exit: make(chan struct{})}
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-ch.exit
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch.line(sc.Text())
		}
		_ = cmd.Wait()
		close(ch.exit)
	}()
	return ch
}

// startInProcess runs a child holder as a goroutine on its own client of
// cl. At cleanup it is thawed and stopped, and waited for.
func startInProcess(t testing.TB, cl InProcessCluster, o childOrders) *child {
	c, fr := cl.ConnectChild(t, sysClock)
	ctx, cancel := context.WithCancel(context.Background())
	ch := &child{t: t, freezer: fr, slot: make(chan acquired, 1), lost: make(chan struct{}), exit: make(chan struct{})}
	t.Cleanup(func() {
		fr.Thaw()
		cancel()
		<-ch.exit
	})
	go func() {
		defer close(ch.exit)
		hold(ctx, c, sysClock, o, ch.line)
	}()
	return ch
}

func (c *child) line(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, s)
	f := strings.Fields(s)
	switch {
	case len(f) == 2 && f[0] == "ack":
		v, _ := strconv.ParseInt(f[1], 10, 64)
		c.acks = append(c.acks, v)
	case len(f) == 4 && f[0] == "acquired":
		dc, _ := strconv.ParseUint(f[1], 10, 64)
		w, _ := strconv.ParseUint(f[2], 10, 64)
		fl, _ := strconv.ParseInt(f[3], 10, 64)
		c.slot <- acquired{slot: coordinator.Slot{Datacenter: dc, Worker: w}, floor: fl}
	case len(f) == 1 && f[0] == "lost":
		c.once.Do(func() { close(c.lost) })
	}
}

// waitAcquired waits for the child's lease.
func (c *child) waitAcquired(d time.Duration) acquired {
	c.t.Helper()
	select {
	case a := <-c.slot:
		return a
	case <-c.exit:
		c.t.Fatalf("coordtest: child exited before acquiring: %q", c.output())
	case <-time.After(d):
		c.t.Fatalf("coordtest: child did not acquire within %v: %q", d, c.output())
	}
	return acquired{}
}

// waitAcks waits until the child printed at least n acks.
func (c *child) waitAcks(n int, d time.Duration) {
	c.t.Helper()
	for i := 0; i < int(d/(20*time.Millisecond)); i++ {
		if len(c.ackList()) >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("coordtest: child printed fewer than %d acks in %v: %q", n, d, c.output())
}

func (c *child) ackList() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.acks...)
}

func (c *child) output() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

func (c *child) freeze() {
	c.t.Helper()
	if c.freezer != nil {
		c.freezer.Freeze()
		return
	}
	if err := syscall.Kill(c.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		c.t.Fatalf("coordtest: SIGSTOP child: %v", err)
	}
}

func (c *child) thaw() {
	c.t.Helper()
	if c.freezer != nil {
		c.freezer.Thaw()
		return
	}
	if err := syscall.Kill(c.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		c.t.Fatalf("coordtest: SIGCONT child: %v", err)
	}
}

// waitLost waits for the child to report its lease lost.
func (c *child) waitLost(d time.Duration) bool {
	select {
	case <-c.lost:
		return true
	case <-time.After(d):
		return false
	}
}

// tail is the last n lines.
func tail(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}
