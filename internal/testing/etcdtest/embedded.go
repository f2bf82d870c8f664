package etcdtest

import (
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Embedded is an in-process single-member etcd.
type Embedded struct {
	Etcd      *embed.Etcd
	Endpoints []string
	Dir       string
}

// StartEmbedded starts a single member in a temporary directory on free
// loopback ports and stops it at cleanup.
func StartEmbedded(t testing.TB) *Embedded {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "m0"
	cfg.Dir = t.TempDir()
	cu, _ := url.Parse(loopURL("http", FreePort(t)))
	pu, _ := url.Parse(loopURL("http", FreePort(t)))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("etcdtest: starting embedded etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcdtest: embedded etcd not ready after 30s")
	}
	return &Embedded{Etcd: e, Endpoints: []string{cu.String()}, Dir: cfg.Dir}
}
