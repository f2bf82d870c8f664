package etcdtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Binary is the etcd server binary the process starters run (Debian's
// etcd-server package; test/run.sh installs it).
const Binary = "etcd"

// Member is one etcd process.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	Dir       string
	LogPath   string

	args     []string
	initial  string // the --initial-cluster value
	token    string // the --initial-cluster-token value
	restores int
	cmd      *exec.Cmd
	done     chan struct{}
}

// PID is the member's process ID, 0 when stopped.
func (m *Member) PID() int {
	if m.cmd == nil || m.cmd.Process == nil || m.exited() {
		return 0
	}
	return m.cmd.Process.Pid
}

func (m *Member) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

func (m *Member) start(t testing.TB) {
	t.Helper()
	logf, err := os.OpenFile(m.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	cmd := exec.Command(Binary, m.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("etcdtest: starting %s (is Debian's etcd-server installed?): %v", Binary, err)
	}
	m.cmd, m.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(m.done) }()
}

// Freeze stops the member with SIGSTOP (it keeps its sockets: TCP
// handshakes still complete).
func (m *Member) Freeze(t testing.TB) { m.signal(t, syscall.SIGSTOP) }

// Thaw resumes a frozen member with SIGCONT.
func (m *Member) Thaw(t testing.TB) { m.signal(t, syscall.SIGCONT) }

func (m *Member) signal(t testing.TB, s syscall.Signal) {
	t.Helper()
	if pid := m.PID(); pid != 0 {
		if err := syscall.Kill(pid, s); err != nil {
			t.Fatalf("etcdtest: signal %v to %s: %v", s, m.Name, err)
		}
	}
}

// Stop ends the member: SIGCONT, SIGTERM, then SIGKILL after 10 s.
func (m *Member) Stop() {
	pid := m.PID()
	if pid == 0 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-m.done
	}
}

// Kill ends the member with SIGKILL, as a lost machine, and waits for it.
func (m *Member) Kill() {
	pid := m.PID()
	if pid == 0 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	<-m.done
}

// SaveSnapshot writes a snapshot of the member to path with Debian's
// `etcdctl snapshot save`.
func (m *Member) SaveSnapshot(t testing.TB, path string) {
	t.Helper()
	cmd := exec.Command("etcdctl", "--endpoints", m.ClientURL, "snapshot", "save", path)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("etcdtest: etcdctl snapshot save: %v: %s", err, out)
	}
}

// RestoreSnapshot kills the member (SIGKILL), restores the snapshot into a
// fresh data directory with Debian's `ETCDCTL_API=3 etcdctl snapshot
// restore` plus extra (3.4 has no --bump-revision: revision numbers are
// reused after such a restore), starts the member on it and waits until
// it is healthy. For a single-member cluster.
func (p *Procs) RestoreSnapshot(t testing.TB, m *Member, snap string, extra ...string) {
	t.Helper()
	m.Kill()
	m.restores++
	dir := fmt.Sprintf("%s-restored-%d", m.Dir, m.restores)
	args := append([]string{"snapshot", "restore", snap, "--data-dir", dir, "--name", m.Name,
		"--initial-cluster", m.initial, "--initial-cluster-token", m.token,
		"--initial-advertise-peer-urls", m.PeerURL}, extra...)
	cmd := exec.Command("etcdctl", args...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("etcdtest: etcdctl snapshot restore: %v: %s", err, out)
	}
	for i, a := range m.args {
		if a == "--data-dir" {
			m.args[i+1] = dir
		}
	}
	m.Dir = dir
	m.start(t)
	p.waitHealthy(t)
}

// Restart starts a stopped member again on its data directory.
func (m *Member) Restart(t testing.TB) {
	t.Helper()
	m.Stop()
	m.start(t)
}

// Procs is a cluster of etcd processes on loopback.
type Procs struct {
	Members []*Member
	// Certs is set when the cluster serves clients over TLS.
	Certs *Certs
	// User and Password are set when authentication is enabled; the user
	// may read and write every key. RootPassword is the root user's.
	User, Password, RootPassword string
}

// Endpoints are the members' client URLs.
func (p *Procs) Endpoints() []string {
	var e []string
	for _, m := range p.Members {
		e = append(e, m.ClientURL)
	}
	return e
}

// StartCluster starts n members of Debian's etcd binary on free loopback
// ports, waits until every member reports a leader, and stops them all at
// cleanup.
func StartCluster(t testing.TB, n int) *Procs { return start(t, n, nil) }

// StartSecure starts one etcd process serving clients over TLS with client
// certificate authentication, enables etcd authentication with a root user
// and a user "firn" allowed every key, and stops it at cleanup.
func StartSecure(t testing.TB) *Procs {
	t.Helper()
	certs := MakeCerts(t, "firn-client") // not a user: the password decides
	p := start(t, 1, certs)
	p.User, p.Password, p.RootPassword = "firn", "firn-secret-pw", "root-secret-pw"
	cli := p.client(t, "", "")
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", p.RootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "firn-rw"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "firn-rw", "\x00", "\x00", clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, p.User, p.Password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, p.User, "firn-rw"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, s := range steps {
		if err := s(); err != nil {
			t.Fatalf("etcdtest: enabling auth, step %d: %v", i, err)
		}
	}
	return p
}

func start(t testing.TB, n int, certs *Certs) *Procs {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		t.Fatalf("etcdtest: %s not found (test/run.sh installs etcd-server): %v", Binary, err)
	}
	base := t.TempDir()
	p := &Procs{Certs: certs}
	scheme := "http"
	if certs != nil {
		scheme = "https"
	}
	var initial []string
	for i := 0; i < n; i++ {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i+1),
			ClientURL: loopURL(scheme, FreePort(t)),
			PeerURL:   loopURL("http", FreePort(t)),
			Dir:       filepath.Join(base, fmt.Sprintf("m%d", i+1)),
		}
		m.LogPath = filepath.Join(base, m.Name+".log")
		p.Members = append(p.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	token := filepath.Base(base)
	for _, m := range p.Members {
		m.initial, m.token = strings.Join(initial, ","), token
		m.args = []string{
			"--name", m.Name, "--data-dir", m.Dir,
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", token,
			"--initial-cluster-state", "new", "--logger", "zap", "--log-level", "warn",
			// etcd 3.4 leaves pre-vote off (3.5 turns it on): without it a
			// member that rejoins behind the log disrupts elections it
			// cannot win. deploy/README.md recommends it.
			"--pre-vote",
		}
		if certs != nil {
			m.args = append(m.args, "--cert-file", certs.ServerCert, "--key-file", certs.ServerKey,
				"--trusted-ca-file", certs.CA, "--client-cert-auth")
		}
	}
	t.Cleanup(func() {
		for _, m := range p.Members {
			m.Stop()
		}
	})
	for _, m := range p.Members {
		m.start(t)
	}
	p.waitHealthy(t)
	return p
}

func (p *Procs) client(t testing.TB, user, pass string) *clientv3.Client {
	t.Helper()
	var tc *tls.Config
	if p.Certs != nil {
		tc = p.Certs.ClientTLS(t)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: p.Endpoints(), DialTimeout: 5 * time.Second, TLS: tc,
		Username: user, Password: pass, Logger: zap.NewNop(),
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
	})
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	return cli
}

// Client returns a client of the cluster, authenticated as the firn user
// when authentication is on. The caller closes it.
func (p *Procs) Client(t testing.TB) *clientv3.Client {
	return p.client(t, p.User, p.Password)
}

// waitHealthy waits up to 30 s until every member reports a leader.
func (p *Procs) waitHealthy(t testing.TB) {
	t.Helper()
	cli := p.client(t, "", "")
	defer cli.Close()
	tries := 0
	for _, m := range p.Members {
		for ; ; tries++ {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cli.Status(ctx, m.ClientURL)
			cancel()
			if err == nil && st.Leader != 0 {
				break
			}
			if m.exited() {
				log, _ := os.ReadFile(m.LogPath)
				t.Fatalf("etcdtest: member %s exited: %s", m.Name, log)
			}
			if tries >= 300 {
				t.Fatalf("etcdtest: member %s not healthy after 30s: %v", m.Name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// WaitCaughtUp waits up to 30 s until every running member agrees on one
// leader and has applied everything that leader had committed when the
// wait began. A member resumed from SIGSTOP or restarted is behind until
// then: freezing another member before it caught up takes two of three
// out of the quorum at once (the lagging one cannot win an election, and
// without pre-vote its campaigns keep deposing the one that could).
func (p *Procs) WaitCaughtUp(t testing.TB) {
	t.Helper()
	cli := p.client(t, p.User, p.Password)
	defer cli.Close()
	var target uint64
	var last string
	for tries := 0; tries < 300; tries++ {
		if tries > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		var leader uint64
		ok := true
		applied := map[string]uint64{}
		for _, m := range p.Members {
			if m.PID() == 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cli.Status(ctx, m.ClientURL)
			cancel()
			switch {
			case err != nil:
				ok, last = false, fmt.Sprintf("%s: %v", m.Name, err)
			case st.Leader == 0 || (leader != 0 && st.Leader != leader):
				ok, last = false, fmt.Sprintf("%s: leader %x, others %x", m.Name, st.Leader, leader)
			default:
				leader = st.Leader
				applied[m.Name] = st.RaftAppliedIndex
				if st.Leader == st.Header.MemberId && target == 0 {
					target = st.RaftIndex
				}
			}
		}
		if !ok || target == 0 {
			continue
		}
		behind := false
		for name, a := range applied {
			if a < target {
				behind, last = true, fmt.Sprintf("%s applied %d of %d", name, a, target)
			}
		}
		if !behind {
			return
		}
	}
	t.Fatalf("etcdtest: members not caught up after 30s: %s", last)
}
