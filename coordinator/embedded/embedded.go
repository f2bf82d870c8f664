package embedded

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/datadir"
)

// ErrMoved: the data directory's identity record names another machine,
// path or instance. Its text is the serving-state reason.
var ErrMoved = errors.New("data dir copied or moved")

// MovedError says what differs. It matches ErrMoved.
type MovedError struct {
	Field            string // "machine ID", "data dir path" or "instance ID"
	Recorded, Actual string
}

func (e *MovedError) Error() string {
	return fmt.Sprintf("data dir copied or moved: %s was %q at first start, is %q now (start with --accept-moved-data-dir to accept)",
		e.Field, e.Recorded, e.Actual)
}

func (e *MovedError) Is(target error) bool { return target == ErrMoved }

// Config configures the embedded member.
type Config struct {
	// DataDir is the node's data directory. Required.
	DataDir string
	// ClientAddr and PeerAddr are loopback host:port pairs for the first
	// start; port 0 picks a free port. Later starts reuse the recorded
	// URLs. Default "127.0.0.1:0".
	ClientAddr, PeerAddr string
	// AcceptMoved accepts a data directory whose machine ID, path or
	// instance ID changed, and records the new values.
	AcceptMoved bool
	// MachineID returns this machine's ID. Default: /etc/machine-id, else
	// the hostname.
	MachineID func() (string, error)
	// ReadyTimeout bounds the member's start. Default 60 s.
	ReadyTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// identity is DataDir/embedded/identity.json.
type identity struct {
	InstanceID string `json:"instance_id"`
	MachineID  string `json:"machine_id"`
	DataDir    string `json:"data_dir"`
	ClientURL  string `json:"client_url"`
	PeerURL    string `json:"peer_url"`
}

// idleTiming is the embedded member's raft tick, election timeout and
// backend commit interval. etcd's defaults (100 ms, 1 s, 100 ms) wake the
// process 20 times a second for a member that has no peer to heartbeat.
// The election timeout keeps etcd's minimum lease TTL, 1.5 election
// timeouts rounded up to whole seconds, at 2 s (firn's lowest
// --lease-ttl); etcd wants it at least 5 ticks.
var idleTiming = struct {
	tick, election uint
	batch          time.Duration
}{tick: 200, election: 1200, batch: time.Second}

// Server is a running embedded member.
type Server struct {
	etcd      *embed.Etcd
	clientURL string
	instance  string
	log       *slog.Logger
}

// DefaultMachineID reads /etc/machine-id, else returns the hostname.
func DefaultMachineID() (string, error) {
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("embedded: no machine ID and no hostname: %w", err)
	}
	return "host:" + h, nil
}

// Start checks the data directory's identity and starts the member. It
// returns a *MovedError (matching ErrMoved) when the data directory was
// copied or moved, coordinator.ErrInvalidSpec for a bad configuration, or
// the member's start error.
func Start(cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("%w: embedded coordinator needs a data dir", coordinator.ErrInvalidSpec)
	}
	cfg.setDefaults()
	log := cfg.Logger.With("coordinator", "embedded")
	for _, a := range []struct{ name, addr string }{{"client", cfg.ClientAddr}, {"peer", cfg.PeerAddr}} {
		if err := checkLoopback(a.addr); err != nil {
			return nil, fmt.Errorf("%w: embedded %s address: %w", coordinator.ErrInvalidSpec, a.name, err)
		}
	}
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	dir := filepath.Join(abs, "embedded")
	id, err := cfg.recordedIdentity(abs, dir, log)
	if err != nil {
		return nil, err
	}
	ecfg, err := etcdConfig(id, dir)
	if err != nil {
		return nil, err
	}
	e, err := embed.StartEtcd(ecfg)
	if err != nil {
		return nil, fmt.Errorf("embedded: starting etcd on %s: %w", id.ClientURL, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded: etcd failed: %w", err)
	case <-time.After(cfg.ReadyTimeout):
		e.Close()
		return nil, fmt.Errorf("embedded: etcd not ready after %v", cfg.ReadyTimeout)
	}
	log.Info("embedded coordinator started", "client_url", id.ClientURL, "data_dir", abs)
	return &Server{etcd: e, clientURL: id.ClientURL, instance: id.InstanceID, log: log}, nil
}

// setDefaults fills in what cfg leaves unset.
func (cfg *Config) setDefaults() {
	if cfg.ClientAddr == "" {
		cfg.ClientAddr = "127.0.0.1:0"
	}
	if cfg.PeerAddr == "" {
		cfg.PeerAddr = "127.0.0.1:0"
	}
	if cfg.MachineID == nil {
		cfg.MachineID = DefaultMachineID
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
}

// recordedIdentity is the member's identity recorded in dir (the data dir
// abs's embedded/): created with fresh URLs on the first start; on a
// later one compared with this machine, instance and path, and refused
// when the data dir was copied or moved unless cfg.AcceptMoved (then
// rewritten).
func (cfg *Config) recordedIdentity(abs, dir string, log *slog.Logger) (identity, error) {
	st, err := datadir.Open(abs)
	if err != nil {
		return identity{}, err
	}
	machine, err := cfg.MachineID()
	if err != nil {
		return identity{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return identity{}, fmt.Errorf("embedded: %w", err)
	}
	idPath := filepath.Join(dir, "identity.json")
	now := identity{InstanceID: st.InstanceID(), MachineID: machine, DataDir: abs}
	id, err := loadIdentity(idPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if now.ClientURL, err = pickURL(cfg.ClientAddr); err != nil {
			return identity{}, err
		}
		if now.PeerURL, err = pickURL(cfg.PeerAddr); err != nil {
			return identity{}, err
		}
		if err := saveIdentity(idPath, now); err != nil {
			return identity{}, err
		}
		log.Info("embedded coordinator initialised", "data_dir", abs, "machine_id", machine, "instance", now.InstanceID)
		return now, nil
	case err != nil:
		return identity{}, err
	}
	if merr := compare(id, now); merr != nil {
		if !cfg.AcceptMoved {
			return identity{}, merr
		}
		log.Warn("accepting a copied or moved data dir", "reason", merr.Error())
		id.InstanceID, id.MachineID, id.DataDir = now.InstanceID, now.MachineID, now.DataDir
		if err := saveIdentity(idPath, id); err != nil {
			return identity{}, err
		}
	}
	return id, nil
}

// etcdConfig is the single member's configuration: its recorded URLs, its
// data under dir/etcd, hourly compaction and the idle timing.
func etcdConfig(id identity, dir string) (*embed.Config, error) {
	ecfg := embed.NewConfig()
	ecfg.Name = "firn"
	ecfg.Dir = filepath.Join(dir, "etcd")
	cu, err := url.Parse(id.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("embedded: recorded client URL %q: %w", id.ClientURL, err)
	}
	pu, err := url.Parse(id.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("embedded: recorded peer URL %q: %w", id.PeerURL, err)
	}
	ecfg.ListenClientUrls, ecfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	ecfg.ListenPeerUrls, ecfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	ecfg.InitialCluster = ecfg.InitialClusterFromName(ecfg.Name)
	ecfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	ecfg.AutoCompactionMode = "periodic"
	ecfg.AutoCompactionRetention = "1h"
	// One member with no peers: its raft heartbeat goes to no one, and the
	// WAL, not the backend commit, makes a write durable. Fewer timer
	// wake-ups keep an idle node idle (see idleTiming).
	ecfg.TickMs, ecfg.ElectionMs = idleTiming.tick, idleTiming.election
	ecfg.BackendBatchInterval = idleTiming.batch
	return ecfg, nil
}

// ClientURL is the member's client URL: a second local node joins with
// --etcd and it.
func (s *Server) ClientURL() string { return s.clientURL }

// Endpoints is []string{ClientURL()}, for etcd.Config.Endpoints.
func (s *Server) Endpoints() []string { return []string{s.clientURL} }

// InstanceID is the data directory's instance ID.
func (s *Server) InstanceID() string { return s.instance }

// Close stops the member.
func (s *Server) Close() error {
	s.etcd.Close()
	s.log.Info("embedded coordinator stopped")
	return nil
}

func compare(rec, now identity) *MovedError {
	switch {
	case rec.MachineID != now.MachineID:
		return &MovedError{Field: "machine ID", Recorded: rec.MachineID, Actual: now.MachineID}
	case rec.DataDir != now.DataDir:
		return &MovedError{Field: "data dir path", Recorded: rec.DataDir, Actual: now.DataDir}
	case rec.InstanceID != now.InstanceID:
		return &MovedError{Field: "instance ID", Recorded: rec.InstanceID, Actual: now.InstanceID}
	}
	return nil
}

func loadIdentity(path string) (identity, error) {
	var id identity
	b, err := os.ReadFile(path)
	if err != nil {
		return id, err
	}
	if err := json.Unmarshal(b, &id); err != nil || id.ClientURL == "" || id.PeerURL == "" {
		return id, fmt.Errorf("%w: %s is unreadable (%v)", datadir.ErrCorrupt, path, err)
	}
	return id, nil
}

func saveIdentity(path string, id identity) error {
	b, _ := json.MarshalIndent(id, "", "  ")
	return datadir.WriteFileAtomic(path, append(b, '\n'))
}

// pickURL turns a loopback host:port into an http URL, choosing a free
// port for port 0.
func pickURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%w: address %q: %w", coordinator.ErrInvalidSpec, addr, err)
	}
	if port == "0" {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return "", fmt.Errorf("embedded: probing a free port on %s: %w", host, err)
		}
		port = fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback IP address", addr)
	}
	return nil
}
