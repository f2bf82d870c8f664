package zktest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/firnid/firn/internal/testing/freeport"
)

// Jar is the ZooKeeper server jar of Debian's zookeeper package.
const Jar = "/usr/share/java/zookeeper.jar"

// classpath is the jar plus a log4j binding, so the server logs at all.
var classpath = []string{Jar, "/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"}

// ReadyTimeout bounds the wait for a server (or an ensemble's quorum) to
// answer srvr with a mode.
const ReadyTimeout = 45 * time.Second

// TickTime is the servers' tick. Session timeouts are negotiated into
// [2, 120] ticks: 1 s to 60 s.
const TickTime = 500 * time.Millisecond

const log4jProperties = `log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
`

// Server is one ZooKeeper process.
type Server struct {
	// ID is the server's myid (1 for a standalone server).
	ID int
	// Addr is the client address, 127.0.0.1:port.
	Addr string

	tb      testing.TB
	dir     string
	cfgPath string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	frozen bool
}

// Ensemble is a group of servers forming one quorum.
type Ensemble struct {
	Servers []*Server
}

type ports struct{ client, quorum, election int }

// freePorts returns n distinct free loopback ports, outside the ephemeral
// range (a server killed and started again keeps its ports: see freeport).
func freePorts(tb testing.TB, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = freeport.Port(tb)
	}
	return out
}

// Options tunes the servers; zero values take the defaults.
type Options struct {
	// MinSessionTimeout and MaxSessionTimeout bound the session timeouts
	// the servers negotiate. Defaults 1 s and 60 s.
	MinSessionTimeout, MaxSessionTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.MinSessionTimeout == 0 {
		o.MinSessionTimeout = time.Second
	}
	if o.MaxSessionTimeout == 0 {
		o.MaxSessionTimeout = 60 * time.Second
	}
	return o
}

// StartStandalone starts one standalone server and waits until it serves.
// It is killed at tb's cleanup.
func StartStandalone(tb testing.TB) *Server {
	tb.Helper()
	return StartStandaloneWith(tb, Options{})
}

// StartStandaloneWith is StartStandalone with options.
func StartStandaloneWith(tb testing.TB, o Options) *Server {
	tb.Helper()
	e := start(tb, 1, o.withDefaults())
	return e.Servers[0]
}

// StartEnsemble starts n servers (n >= 3 for a quorum that survives one
// loss) and waits until every one of them is leader or follower. They are
// killed at tb's cleanup.
func StartEnsemble(tb testing.TB, n int) *Ensemble {
	tb.Helper()
	if n < 2 {
		tb.Fatalf("zktest: an ensemble needs at least 2 servers, got %d", n)
	}
	return start(tb, n, Options{}.withDefaults())
}

func start(tb testing.TB, n int, o Options) *Ensemble {
	tb.Helper()
	if _, err := os.Stat(Jar); err != nil {
		tb.Fatalf("zktest: %s missing (install the Debian package zookeeper; test/run.sh does): %v", Jar, err)
	}
	if _, err := exec.LookPath("java"); err != nil {
		tb.Fatalf("zktest: java not found: %v", err)
	}
	root := tb.TempDir()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		e, err := tryStart(tb, filepath.Join(root, fmt.Sprintf("try%d", attempt)), n, o)
		if err == nil {
			return e
		}
		lastErr = err
		tb.Logf("zktest: start attempt %d failed, retrying with new ports: %v", attempt+1, err)
	}
	tb.Fatalf("zktest: could not start %d server(s): %v", n, lastErr)
	return nil
}

func tryStart(tb testing.TB, root string, n int, o Options) (*Ensemble, error) {
	p := freePorts(tb, 3*n)
	ps := make([]ports, n)
	for i := range ps {
		ps[i] = ports{p[3*i], p[3*i+1], p[3*i+2]}
	}
	e := &Ensemble{}
	for i := 0; i < n; i++ {
		s, err := newServer(tb, root, i+1, ps, o)
		if err != nil {
			e.killAll()
			return nil, err
		}
		e.Servers = append(e.Servers, s)
	}
	for _, s := range e.Servers {
		if err := s.launch(); err != nil {
			e.killAll()
			return nil, err
		}
	}
	deadline := time.Now().Add(ReadyTimeout)
	for _, s := range e.Servers {
		if err := s.waitReady(time.Until(deadline)); err != nil {
			e.killAll()
			return nil, err
		}
	}
	return e, nil
}

func (e *Ensemble) killAll() {
	for _, s := range e.Servers {
		s.kill()
	}
}

func newServer(tb testing.TB, root string, id int, ps []ports, o Options) (*Server, error) {
	dir := filepath.Join(root, fmt.Sprintf("zk%d", id))
	conf := filepath.Join(dir, "conf")
	data := filepath.Join(dir, "data")
	for _, d := range []string{conf, data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(conf, "log4j.properties"), []byte(log4jProperties), 0o644); err != nil {
		return nil, err
	}
	me := ps[id-1]
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=%d\n", TickTime.Milliseconds())
	fmt.Fprintf(&b, "dataDir=%s\n", data)
	fmt.Fprintf(&b, "clientPort=%d\nclientPortAddress=127.0.0.1\n", me.client)
	b.WriteString("admin.enableServer=false\n")
	b.WriteString("4lw.commands.whitelist=ruok,srvr,mntr,stat,cons\n")
	fmt.Fprintf(&b, "minSessionTimeout=%d\nmaxSessionTimeout=%d\n", o.MinSessionTimeout.Milliseconds(), o.MaxSessionTimeout.Milliseconds())
	// The data dir is a test's scratch space: no fsync per transaction, a
	// small preallocated log.
	b.WriteString("forceSync=no\npreAllocSize=1024\n")
	if len(ps) > 1 {
		b.WriteString("initLimit=20\nsyncLimit=5\n")
		for i, p := range ps {
			fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", i+1, p.quorum, p.election)
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprintf("%d\n", id)), 0o644); err != nil {
			return nil, err
		}
	}
	cfg := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	s := &Server{
		ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", me.client),
		tb: tb, dir: dir, cfgPath: cfg, logPath: filepath.Join(dir, "zookeeper.log"),
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("zktest: server %d (%s) log tail:\n%s", s.ID, s.Addr, s.LogTail(40))
		}
		s.kill()
	})
	return s, nil
}

// launch starts the java process.
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("zktest: server %d already running (pid %d)", s.ID, s.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cp := append([]string{filepath.Join(s.dir, "conf")}, classpath...)
	cmd := exec.Command("java",
		"-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.admin.enableServer=false",
		"-cp", strings.Join(cp, ":"),
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", s.cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = s.dir
	// A test binary that dies without its cleanups (a panic, a timeout)
	// takes its servers with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("zktest: starting java: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	s.cmd, s.exited, s.frozen = cmd, exited, false
	return nil
}

// waitReady polls srvr until the server reports a mode.
func (s *Server) waitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		s.mu.Lock()
		exited := s.exited
		s.mu.Unlock()
		if exited == nil {
			return fmt.Errorf("zktest: server %d is not running", s.ID)
		}
		select {
		case <-exited:
			return fmt.Errorf("zktest: server %d exited during start; log tail:\n%s", s.ID, s.LogTail(20))
		default:
		}
		if m, err := s.Mode(); err == nil && m != "" {
			return nil
		}
		if strings.Contains(s.LogTail(40), "Address already in use") {
			return fmt.Errorf("zktest: server %d: address in use", s.ID)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zktest: server %d at %s not ready after %v; log tail:\n%s", s.ID, s.Addr, d, s.LogTail(20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitReady waits until the server answers with a mode (after Start or
// Thaw, or for a follower to rejoin).
func (s *Server) WaitReady(d time.Duration) error { return s.waitReady(d) }

// PID is the running process's ID, 0 when stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Running reports whether the process is alive (frozen counts as alive).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Freeze stops the process with SIGSTOP: it keeps its sockets (the kernel
// still completes TCP handshakes) but answers nothing.
func (s *Server) Freeze() {
	s.tb.Helper()
	s.signal(syscall.SIGSTOP, true)
}

// Thaw resumes a frozen process with SIGCONT.
func (s *Server) Thaw() {
	s.tb.Helper()
	s.signal(syscall.SIGCONT, false)
}

func (s *Server) signal(sig syscall.Signal, frozen bool) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.tb.Fatalf("zktest: server %d is not running", s.ID)
		return
	}
	if err := syscall.Kill(s.cmd.Process.Pid, sig); err != nil {
		s.tb.Fatalf("zktest: signal %v to server %d (pid %d): %v", sig, s.ID, s.cmd.Process.Pid, err)
	}
	s.frozen = frozen
}

// Kill stops the process with SIGKILL and waits for it, as a crash would.
// Its data directory stays, so Start brings the same server back.
func (s *Server) Kill() { s.kill() }

func (s *Server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd, s.exited, s.frozen = nil, nil, false
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		s.tb.Logf("zktest: server %d (pid %d) did not exit 10 s after SIGKILL", s.ID, cmd.Process.Pid)
	}
}

// Start starts a killed server again on its data directory and ports and
// waits until it is ready.
func (s *Server) Start() error {
	if err := s.launch(); err != nil {
		return err
	}
	return s.waitReady(ReadyTimeout)
}

// Mode asks srvr for the server's mode: "standalone", "leader" or
// "follower" ("" when it is not serving yet).
func (s *Server) Mode() (string, error) {
	out, err := FourLetter(s.Addr, "srvr", time.Second)
	if err != nil {
		return "", err
	}
	return field(out, "Mode"), nil
}

// Zxid is the last transaction ID the server has applied (srvr's Zxid).
// Its low 32 bits count transactions within one leader epoch.
func (s *Server) Zxid() (int64, error) {
	out, err := FourLetter(s.Addr, "srvr", time.Second)
	if err != nil {
		return 0, err
	}
	z := field(out, "Zxid")
	if z == "" {
		return 0, fmt.Errorf("zktest: srvr from %s has no Zxid: %q", s.Addr, out)
	}
	var v int64
	if _, err := fmt.Sscanf(z, "0x%x", &v); err != nil {
		return 0, fmt.Errorf("zktest: zxid %q: %w", z, err)
	}
	return v, nil
}

// DataDir is the server's dataDir (its snapshots and transaction logs; for
// an ensemble member also its myid). A test that restores the server from
// an older copy of it kills the server, replaces the directory's contents
// and starts it again.
func (s *Server) DataDir() string { return filepath.Join(s.dir, "data") }

// LogTail returns the last n lines of the server's log.
func (s *Server) LogTail(n int) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func field(out, name string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// FourLetter sends a four-letter command (ruok, srvr, mntr, stat, cons) and
// returns the whole answer.
func FourLetter(addr, cmd string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(cmd)); err != nil {
		return "", err
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && b.Len() == 0 {
				return "", err
			}
			return b.String(), nil
		}
	}
}

// Addrs lists the servers' client addresses.
func (e *Ensemble) Addrs() []string {
	out := make([]string, len(e.Servers))
	for i, s := range e.Servers {
		out[i] = s.Addr
	}
	return out
}

// Leader returns the server that reports itself leader (frozen or killed
// servers are skipped).
func (e *Ensemble) Leader() (*Server, error) {
	for _, s := range e.Servers {
		if !s.Running() || s.isFrozen() {
			continue
		}
		if m, err := s.Mode(); err == nil && m == "leader" {
			return s, nil
		}
	}
	return nil, errors.New("zktest: no server reports itself leader")
}

// Zxid is the largest zxid any of the servers at addrs reports (for a
// write-rate measurement across an ensemble).
func Zxid(addrs []string) (int64, error) {
	var best int64 = -1
	var last error
	for _, a := range addrs {
		out, err := FourLetter(a, "srvr", time.Second)
		if err != nil {
			last = err
			continue
		}
		var v int64
		if _, err := fmt.Sscanf(field(out, "Zxid"), "0x%x", &v); err != nil {
			last = fmt.Errorf("zktest: srvr from %s: %q", a, out)
			continue
		}
		best = max(best, v)
	}
	if best < 0 {
		return 0, fmt.Errorf("zktest: no server reports a zxid: %v", last)
	}
	return best, nil
}

// ByAddr returns the server with client address addr, or nil.
func (e *Ensemble) ByAddr(addr string) *Server {
	for _, s := range e.Servers {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// Zxid is the largest zxid any running, unfrozen server reports.
func (e *Ensemble) Zxid() (int64, error) {
	var best int64 = -1
	var last error
	for _, s := range e.Servers {
		if !s.Running() || s.isFrozen() {
			continue
		}
		z, err := s.Zxid()
		if err != nil {
			last = err
			continue
		}
		best = max(best, z)
	}
	if best < 0 {
		return 0, fmt.Errorf("zktest: no server reports a zxid: %v", last)
	}
	return best, nil
}

func (s *Server) isFrozen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.frozen
}

// PeerQuorumAddr is the quorum address (host:port) s's config gives
// server id: where s connects to follow it when id leads.
func (s *Server) PeerQuorumAddr(id int) (string, error) {
	b, err := os.ReadFile(s.cfgPath)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, fmt.Sprintf("server.%d=", id)); ok {
			parts := strings.Split(v, ":")
			if len(parts) != 3 {
				return "", fmt.Errorf("zktest: %s: %q", s.cfgPath, line)
			}
			return parts[0] + ":" + parts[1], nil
		}
	}
	return "", fmt.Errorf("zktest: %s names no server.%d", s.cfgPath, id)
}

// RoutePeer rewrites s's config so that s reaches server id's quorum port
// at addr (a proxy a test controls: a partition between s and id when id
// leads). It takes effect when s starts again (Kill, then Start).
func (s *Server) RoutePeer(id int, addr string) error {
	b, err := os.ReadFile(s.cfgPath)
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	found := false
	for i, line := range lines {
		if v, ok := strings.CutPrefix(line, fmt.Sprintf("server.%d=", id)); ok {
			parts := strings.Split(v, ":")
			if len(parts) != 3 {
				return fmt.Errorf("zktest: %s: %q", s.cfgPath, line)
			}
			lines[i] = fmt.Sprintf("server.%d=%s:%s", id, addr, parts[2])
			found = true
		}
	}
	if !found {
		return fmt.Errorf("zktest: %s names no server.%d", s.cfgPath, id)
	}
	return os.WriteFile(s.cfgPath, []byte(strings.Join(lines, "\n")), 0o644)
}
