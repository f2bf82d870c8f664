package main

import (
	"log/slog"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/zookeeper"
	"github.com/firnid/firn/server"
)

// newZooKeeper builds the ZooKeeper coordinator from the serve flags.
func newZooKeeper(cfg server.Config, timing coordinator.Timing, clock clockguard.Clock, log *slog.Logger) (coordinator.Backend, error) {
	zc := zookeeper.DefaultConfig()
	zc.Servers = cfg.ZooKeeper
	if cfg.ZooKeeperPrefix != "" {
		zc.Prefix = cfg.ZooKeeperPrefix
	}
	zc.Cluster = cfg.Cluster
	zc.Auth = cfg.ZooKeeperAuth
	zc.Timing = timing
	zc.Clock = clock
	zc.Logger = log
	return zookeeper.New(zc)
}
