package main

import (
	"errors"
	"log/slog"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/server"
)

// newZooKeeper builds the ZooKeeper coordinator.
func newZooKeeper(cfg server.Config, timing coordinator.Timing, clock clockguard.Clock, log *slog.Logger) (coordinator.Coordinator, error) {
	return nil, errors.New("the ZooKeeper backend is not wired into this binary yet")
}
