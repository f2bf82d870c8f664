package main

import (
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startEmbeddedEtcd runs etcd's own server as a single member in
// <dataDir>/etcd on loopback and returns its client URL.
func startEmbeddedEtcd(dataDir, clientAddr, peerAddr string) (string, func(), error) {
	cfg := embed.NewConfig()
	cfg.Name = "firn"
	cfg.Dir = filepath.Join(dataDir, "etcd")
	cu, err := url.Parse("http://" + clientAddr)
	if err != nil {
		return "", nil, fmt.Errorf("--embedded-client-addr: %w", err)
	}
	pu, err := url.Parse("http://" + peerAddr)
	if err != nil {
		return "", nil, fmt.Errorf("--embedded-peer-addr: %w", err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return "", nil, fmt.Errorf("not ready after 30s")
	}
	return cu.String(), e.Close, nil
}
