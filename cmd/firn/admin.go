package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/server"
)

// coordFlags connect an admin command to the coordinator directly.
type coordFlags struct {
	cfg       server.Config
	generator string
}

func (c *coordFlags) register(fs *flag.FlagSet) {
	c.cfg = server.DefaultConfig()
	full := flag.NewFlagSet("", flag.ContinueOnError)
	c.cfg.RegisterFlags(full)
	// Only the coordinator flags of serve apply here.
	for _, name := range []string{"etcd", "zookeeper", "etcd-prefix", "zookeeper-prefix", "cluster", "etcd-ca", "etcd-cert",
		"etcd-key", "etcd-user", "etcd-password", "zookeeper-auth", "coordinator-timeout", "lease-ttl"} {
		f := full.Lookup(name)
		fs.Var(f.Value, f.Name, f.Usage)
	}
	fs.StringVar(&c.generator, "generator", "default=snowflake", "the generator, as name=layout (the layout gives the time unit)")
}

func (c *coordFlags) layout() (string, generator.Layout, error) {
	name, spec, ok := strings.Cut(c.generator, "=")
	if !ok {
		spec = "snowflake"
	}
	l, err := generator.ParseLayout(spec)
	if err != nil {
		return "", generator.Layout{}, fmt.Errorf("--generator: %w", err)
	}
	return name, l, nil
}

func (c *coordFlags) open() (coordinator.Coordinator, error) {
	clock := clockguard.NewSystem()
	timing := coordinator.Timing{LeaseTTL: c.cfg.LeaseTTL, ReservationWindow: c.cfg.ReservationWindow,
		Timeout: c.cfg.CoordinatorTimeout, RefreshInterval: time.Second}
	if len(c.cfg.ZooKeeper) > 0 {
		return newZooKeeper(c.cfg, timing, clock, newLogger(io.Discard, "error"))
	}
	endpoints := c.cfg.Etcd
	if len(endpoints) == 0 {
		endpoints = []string{"http://127.0.0.1:7310"} // the embedded etcd of a local node
	}
	ec := etcd.DefaultConfig()
	ec.Endpoints = endpoints
	ec.Prefix = strings.Trim(c.cfg.EtcdPrefix, "/")
	ec.Cluster = c.cfg.Cluster
	ec.Username, ec.Password = c.cfg.EtcdUser, c.cfg.EtcdPassword
	ec.CAFile, ec.CertFile, ec.KeyFile = c.cfg.EtcdCA, c.cfg.EtcdCert, c.cfg.EtcdKey
	ec.Timing = timing
	ec.Clock = clock
	ec.Logger = newLogger(io.Discard, "error")
	return etcd.New(ec)
}

func cmdWorkers(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("firn workers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: firn workers [flags]            list worker IDs: holder, heartbeat age, reservation\n       firn workers release W [flags]  free worker W (fenced; its reservation is kept)\n\nFlags:")
		fs.PrintDefaults()
	}
	var c coordFlags
	c.register(fs)
	dc := fs.Uint64("datacenter", 0, "datacenter of the worker to release")
	release := ""
	if len(args) > 0 && args[0] == "release" {
		if len(args) < 2 {
			return fail(stderr, exitUsage, "workers release: want a worker ID")
		}
		release, args = args[1], args[2:]
	}
	if err := parseQuiet(fs, args); err != nil {
		if isHelp(err) {
			return exitOK
		}
		return fail(stderr, exitUsage, "workers: %v", err)
	}
	name, layout, err := c.layout()
	if err != nil {
		return fail(stderr, exitUsage, "workers: %v", err)
	}
	coord, err := c.open()
	if err != nil {
		return fail(stderr, exitFailure, "workers: %v", err)
	}
	defer coord.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if release != "" {
		w, err := strconv.ParseUint(release, 10, 64)
		if err != nil || w >= layout.WorkerLimit() {
			return fail(stderr, exitUsage, "workers release: %q is not a worker ID in [0, %d)", release, layout.WorkerLimit())
		}
		if err := coord.ForceRelease(ctx, name, coordinator.Slot{Datacenter: *dc, Worker: w}); err != nil {
			return fail(stderr, exitFailure, "workers release: %v", err)
		}
		fmt.Fprintf(stdout, "released generator %s dc=%d worker=%d (reservation kept)\n", name, *dc, w)
		return exitOK
	}
	holders, err := coord.Workers(ctx, name)
	if err != nil {
		return fail(stderr, exitFailure, "workers: %v", err)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DC\tWORKER\tLIVE\tNODE\tADDRESS\tHEARTBEAT AGE\tRESERVED UNTIL")
	live := 0
	for _, h := range holders {
		node, addr, age := "-", "-", "-"
		if h.Live {
			live++
			node, addr = h.Heartbeat.Node.Name, h.Heartbeat.Node.Address
			age = now.Sub(h.Heartbeat.Wall).Round(time.Millisecond).String()
		}
		res := "-"
		if h.Reserved >= 0 {
			res = layout.UnitStart(h.Reserved + 1).UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(tw, "%d\t%d\t%v\t%s\t%s\t%s\t%s\n", h.Slot.Datacenter, h.Slot.Worker, h.Live, node, addr, age, res)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d live of %d worker IDs (%s)\n", live, layout.WorkerLimit()*layout.DatacenterLimit(), layout)
	return exitOK
}

func cmdCoordinator(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "bump" {
		return fail(stderr, exitUsage, "coordinator: want \"firn coordinator bump --by D\"")
	}
	fs := flag.NewFlagSet("firn coordinator bump", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c coordFlags
	c.register(fs)
	by := fs.Duration("by", 0, "after restoring the coordinator from a snapshot: raise every reservation of the generator, and the floor of every worker first used later, by this much (at least the time between the snapshot and the last write before the restore, plus the reservation window)")
	if err := parseQuiet(fs, args[1:]); err != nil {
		if isHelp(err) {
			return exitOK
		}
		return fail(stderr, exitUsage, "coordinator bump: %v", err)
	}
	if *by <= 0 {
		return fail(stderr, exitUsage, "coordinator bump: --by %v must be positive", *by)
	}
	name, layout, err := c.layout()
	if err != nil {
		return fail(stderr, exitUsage, "coordinator bump: %v", err)
	}
	units := int64((*by + layout.Unit - 1) / layout.Unit)
	coord, err := c.open()
	if err != nil {
		return fail(stderr, exitFailure, "coordinator bump: %v", err)
	}
	defer coord.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wall, _ := clockguard.NewSystem().Now()
	now := max(0, layout.Units(wall))
	if err := coord.Bump(ctx, name, units, now); err != nil {
		return fail(stderr, exitFailure, "coordinator bump: %v", err)
	}
	fmt.Fprintf(stdout, "raised every reservation of generator %s by %v (%d units), and its floor to at least now + %v\n", name, *by, units, *by)
	return exitOK
}
