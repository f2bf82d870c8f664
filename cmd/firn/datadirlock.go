package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes the data dir's lock, an flock on DataDir/lock, until
// the returned file is closed (serve closes it as it returns; the kernel
// releases it when the process ends, however it ends). A node on its embedded coordinator takes it
// exclusively: that data dir admits one process (docs/design.md: the
// private coordinator takes its own instance's records back at once on
// that ground), and a second process on it — a node joining the embedded
// etcd with --etcd, started on the first one's --data-dir — would run as
// the same instance, under the same node name, writing the same journal.
// A node on a shared coordinator takes it shared: a replacement may run
// beside the zombie it replaced on one data dir (docs/design.md,
// Restarts), but not beside an embedded node.
func lockDataDir(dataDir string, embedded bool) (*os.File, error) {
	path := filepath.Join(dataDir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_SH
	if embedded {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			abs, _ := filepath.Abs(dataDir)
			if embedded {
				return nil, fmt.Errorf("%s is in use by another firn process (its lock %s is held): the embedded coordinator's data dir admits one process", abs, path)
			}
			return nil, fmt.Errorf("%s is in use by a node on its embedded coordinator (its lock %s is held): a node joining it needs a --data-dir of its own", abs, path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return f, nil
}
