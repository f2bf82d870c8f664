package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/segment"
)

// adminEtcd is an embedded etcd with generators set up through the
// coordinator itself, as nodes would leave them, on cluster "default"
// under prefix "firn" (what the admin commands use by default).
type adminEtcd struct {
	t     *testing.T
	ep    string
	coord *etcd.Coordinator
	cli   *clientv3.Client
}

func newAdminEtcd(t *testing.T) *adminEtcd {
	t.Helper()
	srv := etcdtest.StartEmbedded(t)
	cfg := etcd.DefaultConfig()
	cfg.Endpoints, cfg.Clock = srv.Endpoints, clockguard.NewSystem()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := etcd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &adminEtcd{t: t, ep: srv.Endpoints[0], coord: c, cli: c.Client()}
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// holder acquires a worker of generator name on preset and reserves
// `ahead` units past the clock; it returns the slot and the reservation.
func (a *adminEtcd) holder(name, preset string, ahead int64) (coordinator.Slot, int64) {
	a.t.Helper()
	l, ok := generator.Preset(preset)
	if !ok {
		a.t.Fatalf("no preset %s", preset)
	}
	now := l.Units(time.Now())
	spec := coordinator.Spec{Generator: name, Layout: l.String(), WorkerLimit: l.WorkerLimit(), DatacenterLimit: l.DatacenterLimit(),
		Datacenter: -1, MaxFloor: now + ahead + 1, LocalFloor: -1}
	node := coordinator.NodeInfo{Name: "holder-" + name, InstanceID: "instance-" + name, Address: "127.0.0.1:7300", StartTime: time.Now()}
	lease, err := a.coord.Acquire(ctx10(a.t), spec, node)
	if err != nil {
		a.t.Fatal(err)
	}
	if err := lease.Reserve(ctx10(a.t), now+ahead, coordinator.Heartbeat{Node: node, Wall: time.Now()}); err != nil {
		a.t.Fatal(err)
	}
	return lease.Slot(), now + ahead
}

// value reads a number key of generator name (-1: absent).
func (a *adminEtcd) value(key string) int64 {
	a.t.Helper()
	g, err := a.cli.Get(ctx10(a.t), key)
	if err != nil {
		a.t.Fatal(err)
	}
	if len(g.Kvs) == 0 {
		return -1
	}
	v, err := etcd.DecodeReserved(g.Kvs[0].Value)
	if err != nil {
		a.t.Fatal(err)
	}
	return v
}

func (a *adminEtcd) reserved(name string, slot coordinator.Slot) int64 {
	return a.value(etcd.ReservedKey(a.coord.Root(), name, slot))
}

func (a *adminEtcd) floor(name string) int64 { return a.value(a.coord.Root() + name + "/floor") }

// TestBumpReadsLayoutFromPin: `firn coordinator bump --generator NAME`
// takes the time unit from the generator's pin: a wideworker generator (1 s
// units) bumped by 10s gains 10 units, not the 10000 a snowflake layout
// would make of it; `firn workers` reads the pin too and shows a standing
// restore marker, which the bump clears, saying when nodes serve again.
func TestBumpReadsLayoutFromPin(t *testing.T) {
	a := newAdminEtcd(t)
	// Reserved 7 units ahead, the most a bump takes without
	// --include-ahead (its window 5 s + max-lead 2 s + --max-skew 1 s):
	// the gaps below count from the reservation only while it is ahead of
	// the clock (past it, from the clock), and a loaded machine once took
	// more than 5 s between here and the bump.
	slot, r := a.holder("ids", "wideworker", 7)
	uid, _ := generator.Preset("wideworker")

	ev := coordinator.RestoreEvidence{Generator: "ids", Slot: slot, Acked: r + 3, Shown: r, At: time.Now(),
		Node: coordinator.NodeInfo{Name: "noticer", InstanceID: "i-n", Address: "10.1.2.3:7300"}}
	if err := a.coord.MarkRestored(ctx10(t), ev); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cli(t, nil, "workers", "--etcd", a.ep, "--generator", "ids")
	if code != 0 || !strings.Contains(out, uid.String()) || !strings.Contains(out, "1 live of 524288 worker IDs") ||
		!strings.Contains(out, "RESTORE MARKER") || !strings.Contains(out, `"noticer"`) || !strings.Contains(out, "gap 3s") ||
		!strings.Contains(out, "firn coordinator bump --generator ids --by D") {
		t.Fatalf("firn workers --generator ids: exit %d %s\n%s", code, errOut, out)
	}

	// The marker's node acknowledged 3 units above the reservations: a
	// bump by 2s would leave the floor below that, and is refused naming
	// the gap and the least D; nothing changes.
	out, errOut, code = cli(t, nil, "coordinator", "bump", "--by", "2s", "--etcd", a.ep, "--generator", "ids")
	if code != 1 || !strings.Contains(errOut, "gap of 3") || !strings.Contains(errOut, "at least 3s") {
		t.Fatalf("firn coordinator bump --by 2s under a marker with gap 3s: exit %d, stdout %q, stderr %q; want exit 1 naming the gap and at least 3s", code, out, errOut)
	}
	if got := a.reserved("ids", slot); got != r {
		t.Fatalf("a refused bump changed the reservation to %d, want %d", got, r)
	}

	bumped := time.Now()
	out, errOut, code = cli(t, nil, "coordinator", "bump", "--by", "10s", "--etcd", a.ep, "--generator", "ids")
	if code != 0 {
		t.Fatalf("firn coordinator bump --generator ids: exit %d: %s", code, errOut)
	}
	if got := a.reserved("ids", slot); got != r+10 {
		t.Fatalf("reservation %d after a bump by 10s of a wideworker generator, want %d + 10 units", got, r)
	}
	nowUnits := uid.Units(bumped)
	if f := a.floor("ids"); f != r+10 || f < nowUnits+10 {
		t.Fatalf("floor %d, want max(now %d, R %d) + 10", f, nowUnits, r)
	}
	for _, want := range []string{"generator ids:", "10 units of 1s", "nodes serve again from about", "cleared the restore marker"} {
		if !strings.Contains(out, want) {
			t.Fatalf("bump output lacks %q:\n%s", want, out)
		}
	}
	// Serving resumes at the floor's time less max-lead (2 units for
	// wideworker): about D + the 7 s reserved ahead from now.
	serveAt := uid.UnitStart(r + 10).Add(-generator.DefaultMaxLead(uid)).UTC().Format(time.RFC3339)
	if !strings.Contains(out, serveAt) {
		t.Fatalf("bump output does not say nodes serve again at %s:\n%s", serveAt, out)
	}
	out, _, code = cli(t, nil, "workers", "--etcd", a.ep, "--generator", "ids")
	if code != 0 || strings.Contains(out, "RESTORE MARKER") || !strings.Contains(out, "generator floor") {
		t.Fatalf("firn workers after the bump: exit %d\n%s", code, out)
	}
}

// TestBumpRefusesAnotherLayout: a layout on the command line that differs
// from the pin is refused naming both, and nothing is written; `firn
// workers` refuses it the same way.
func TestBumpRefusesAnotherLayout(t *testing.T) {
	a := newAdminEtcd(t)
	slot, r := a.holder("ids", "wideworker", 5)
	uid, _ := generator.Preset("wideworker")
	sf, _ := generator.Preset("snowflake")
	for _, args := range [][]string{
		{"coordinator", "bump", "--by", "10s", "--etcd", a.ep, "--generator", "ids=snowflake"},
		{"workers", "--etcd", a.ep, "--generator", "ids=snowflake"},
	} {
		_, errOut, code := cli(t, nil, args...)
		if code == 0 || !strings.Contains(errOut, uid.String()) || !strings.Contains(errOut, sf.String()) {
			t.Fatalf("firn %v: exit %d, stderr %q; want a refusal naming %s and %s", args, code, errOut, uid, sf)
		}
	}
	// The same layout spelled otherwise (the preset's canonical form) is
	// the pin's.
	if _, errOut, code := cli(t, nil, "workers", "--etcd", a.ep, "--generator", "ids="+uid.String()); code != 0 {
		t.Fatalf("workers with the pinned layout spelled out: exit %d %s", code, errOut)
	}
	if got, f := a.reserved("ids", slot), a.floor("ids"); got != r || f != -1 {
		t.Fatalf("after the refused bump: reservation %d (want %d), floor %d (want none)", got, r, f)
	}
}

// TestBumpPastLayoutEndWritesNothing: a bump whose floor would pass the
// layout's last time value (wideworker's 31 bits of seconds end in 2094) is
// refused, and neither the floor nor any reservation changes.
func TestBumpPastLayoutEndWritesNothing(t *testing.T) {
	a := newAdminEtcd(t)
	slot, r := a.holder("ids", "wideworker", 5)
	_, errOut, code := cli(t, nil, "coordinator", "bump", "--by", "600000h", "--etcd", a.ep, "--generator", "ids")
	if code == 0 || !strings.Contains(errOut, "last time value") || !strings.Contains(errOut, "nothing was written") {
		t.Fatalf("bump by 600000h of a wideworker generator: exit %d, stderr %q; want a refusal", code, errOut)
	}
	if got, f := a.reserved("ids", slot), a.floor("ids"); got != r || f != -1 {
		t.Fatalf("after the refused bump: reservation %d (want %d), floor %d (want none)", got, r, f)
	}
}

// TestBumpEveryGenerator: with no --generator the bump raises every
// generator of the cluster, each in the units of its own pinned layout.
func TestBumpEveryGenerator(t *testing.T) {
	a := newAdminEtcd(t)
	us, ur := a.holder("users", "wideworker", 5)
	os, or := a.holder("orders", "snowflake", 5000)
	out, errOut, code := cli(t, nil, "coordinator", "bump", "--by", "3s", "--etcd", a.ep)
	if code != 0 {
		t.Fatalf("firn coordinator bump with no --generator: exit %d: %s", code, errOut)
	}
	if got := a.reserved("users", us); got != ur+3 {
		t.Fatalf("users (wideworker) reservation %d, want %d + 3", got, ur)
	}
	if got := a.reserved("orders", os); got != or+3000 {
		t.Fatalf("orders (snowflake) reservation %d, want %d + 3000", got, or)
	}
	if !strings.Contains(out, "generator orders:") || !strings.Contains(out, "generator users:") {
		t.Fatalf("bump output does not report both generators:\n%s", out)
	}
	// An unknown generator with no layout is refused, naming what to do.
	_, errOut, code = cli(t, nil, "coordinator", "bump", "--by", "3s", "--etcd", a.ep, "--generator", "nosuch")
	if code == 0 || !strings.Contains(errOut, "nosuch=LAYOUT") {
		t.Fatalf("bump of a generator with no pin: exit %d, stderr %q", code, errOut)
	}
}

// TestAdminReadsServeConfig: `firn workers` and `firn coordinator bump`
// reach the coordinator a serve configuration names — the same --config
// file (whose node keys they ignore) or the same FIRN_* variables.
func TestAdminReadsServeConfig(t *testing.T) {
	a := newAdminEtcd(t)
	a.holder("ids", "wideworker", 5)
	conf := filepath.Join(t.TempDir(), "firn.yaml")
	body := "etcd: [" + a.ep + "]\ngrpc-addr: 127.0.0.1:7300\nmax-batch: 5000\ngenerator: [ids=wideworker]\nntp-required: false\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cli(t, nil, "workers", "--config", conf, "--generator", "ids")
	if code != 0 || !strings.Contains(out, "1 live of 524288 worker IDs") {
		t.Fatalf("firn workers --config: exit %d %s\n%s", code, errOut, out)
	}
	out, errOut, code = cli(t, []string{"FIRN_ETCD=" + a.ep, "FIRN_CONFIG=" + conf}, "workers", "--generator", "ids")
	if code != 0 || !strings.Contains(out, "1 live of 524288 worker IDs") {
		t.Fatalf("firn workers with FIRN_ETCD and FIRN_CONFIG: exit %d %s\n%s", code, errOut, out)
	}
	out, errOut, code = cli(t, []string{"FIRN_ETCD=" + a.ep}, "coordinator", "bump", "--by", "1s", "--generator", "ids")
	if code != 0 || !strings.Contains(out, "generator ids:") {
		t.Fatalf("firn coordinator bump with FIRN_ETCD: exit %d %s\n%s", code, errOut, out)
	}
	// Another cluster in the environment is another ID space: nothing there.
	_, errOut, code = cli(t, []string{"FIRN_CLUSTER=other"}, "workers", "--config", conf, "--generator", "ids")
	if code == 0 || !strings.Contains(errOut, "ids=LAYOUT") {
		t.Fatalf("firn workers on FIRN_CLUSTER=other: exit %d, stderr %q", code, errOut)
	}
}

// TestBumpRefusesReservationsAhead: a reservation beyond the bump's clock
// plus the reservation window, max-lead and --max-skew — a node whose
// clock runs an hour ahead wrote it — makes the bump refuse before
// anything is written, in every generator, naming the worker, its node,
// the reservation's time and the limit, and how to proceed; with no live
// holder it says so; --include-ahead bumps as before, the floor following
// the reservation ahead.
func TestBumpRefusesReservationsAhead(t *testing.T) {
	a := newAdminEtcd(t)
	hour := int64(time.Hour / time.Millisecond)
	slot, r := a.holder("ids", "snowflake", hour)
	oslot, or := a.holder("orders", "snowflake", 3000)
	sf, _ := generator.Preset("snowflake")

	out, errOut, code := cli(t, nil, "coordinator", "bump", "--by", "3s", "--etcd", a.ep)
	until := sf.UnitStart(r + 1).UTC().Format(time.RFC3339Nano)
	for _, want := range []string{"generator ids: refused, nothing was written", "dc=0 worker=0", "reserved until " + until,
		`held by node "holder-ids" (127.0.0.1:7300)`, "limit ", "the reservation window 5s + max-lead 1s + --max-skew 1s",
		"wait until", "--include-ahead"} {
		if code != exitFailure || !strings.Contains(errOut, want) {
			t.Fatalf("bump over a reservation an hour ahead: exit %d, stdout %q, stderr %q; want exit 1 naming %q", code, out, errOut, want)
		}
	}
	if strings.Contains(errOut, "generator orders") {
		t.Fatalf("the generator within the limit is named as ahead: %s", errOut)
	}
	for name, sr := range map[string]struct {
		slot coordinator.Slot
		r    int64
	}{"ids": {slot, r}, "orders": {oslot, or}} {
		if got, f := a.reserved(name, sr.slot), a.floor(name); got != sr.r || f != -1 {
			t.Fatalf("%s after the refused bump: reservation %d (want %d), floor %d (want none)", name, got, sr.r, f)
		}
	}
	// A wider --max-skew takes it.
	if _, errOut, code := cli(t, nil, "coordinator", "bump", "--by", "1ms", "--etcd", a.ep, "--generator", "orders", "--max-skew", "2h"); code != 0 {
		t.Fatalf("bump of orders: exit %d %s", code, errOut)
	}

	// With no live holder, the refusal says so.
	if err := a.coord.ForceRelease(ctx10(t), "ids", slot); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = cli(t, nil, "coordinator", "bump", "--by", "3s", "--etcd", a.ep, "--generator", "ids")
	if code != exitFailure || !strings.Contains(errOut, "dc=0 worker=0") || !strings.Contains(errOut, "no live holder") {
		t.Fatalf("bump over a reservation ahead with no holder: exit %d, stderr %q", code, errOut)
	}

	out, errOut, code = cli(t, nil, "coordinator", "bump", "--by", "3s", "--etcd", a.ep, "--generator", "ids", "--include-ahead")
	if code != 0 || !strings.Contains(out, "including dc=0 worker=0") {
		t.Fatalf("bump --include-ahead: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got, f := a.reserved("ids", slot), a.floor("ids"); got != r+3000 || f != r+3000 {
		t.Fatalf("after bump --include-ahead: reservation %d, floor %d; want both %d + 3000", got, f, r)
	}
}

// TestBumpSegmentBelowMarker: a segment generator's bump whose --ids
// leaves next below what the restore marker's node saw is refused before
// anything is written, naming --ids and the least value (it would clear
// the marker with IDs handed out before the restore still to be claimed),
// as a snowflake bump whose --by does not cover the marker's gap is; an
// --ids past the largest ID is a usage error.
func TestBumpSegmentBelowMarker(t *testing.T) {
	a := newAdminEtcd(t)
	spec := coordinator.CounterSpec{Generator: "orders", Definition: segment.Definition{Start: 100, Max: segment.MaxID}}
	claim, err := coordinator.ClaimSegment(ctx10(t), a.coord, spec, 50, 0, segment.Mark{}, 0) // next 150
	if err != nil {
		t.Fatal(err)
	}
	seen := claim.Record.State.Mark()
	seen.Next = 2150 // the noticing node saw claims up to 2149, which the restore lost
	rb := &coordinator.CounterRolledBackError{Generator: "orders", Seen: claim.Record.State, Known: seen, Cause: segment.ErrForked}
	if err := a.coord.MarkRestored(ctx10(t), rb.Evidence(coordinator.NodeInfo{Name: "noticer"}, time.Now())); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cli(t, nil, "coordinator", "bump", "--etcd", a.ep, "--generator", "orders", "--ids", "9223372036854775808")
	if code != 2 || !strings.Contains(errOut, "--ids 9223372036854775808 is past 9223372036854775807") {
		t.Fatalf("bump --ids 2^63: exit %d, stdout %q, stderr %q; want a usage refusal naming --ids and the bound", code, out, errOut)
	}
	out, errOut, code = cli(t, nil, "coordinator", "bump", "--etcd", a.ep, "--generator", "orders", "--ids", "1999")
	if code != 1 || !strings.Contains(errOut, "--ids at least 2000") || !strings.Contains(errOut, "nothing was written") || strings.Contains(out, "raised") {
		t.Fatalf("bump --ids 1999: exit %d, stdout %q, stderr %q; want a refusal naming --ids at least 2000", code, out, errOut)
	}
	if _, err := a.coord.ReadCounter(ctx10(t), spec); !errors.Is(err, coordinator.ErrRestored) {
		t.Fatalf("after the refusal: %v, want the marker standing", err)
	}
	out, errOut, code = cli(t, nil, "coordinator", "bump", "--etcd", a.ep, "--generator", "orders", "--ids", "2000")
	if code != 0 || !strings.Contains(out, "next 150 -> 2150") || !strings.Contains(out, "cleared the restore marker") {
		t.Fatalf("bump --ids 2000: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestBumpSegmentGenerator: `firn coordinator bump --ids N` raises a
// segment generator's counter, read from its pin, by N IDs and clears its
// restore marker; `firn workers` shows the marker before. A segment
// generator without --ids, and --ids alone over a snowflake generator,
// are refused before anything is written.
func TestBumpSegmentGenerator(t *testing.T) {
	a := newAdminEtcd(t)
	spec := coordinator.CounterSpec{Generator: "orders", Definition: segment.Definition{Start: 100, Max: segment.MaxID}}
	claim, err := coordinator.ClaimSegment(ctx10(t), a.coord, spec, 50, 0, segment.Mark{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.holder("ids", "wideworker", 5)
	rb := &coordinator.CounterRolledBackError{Generator: "orders", Seen: segment.Counter{Next: 100}, Known: claim.Record.State.Mark(), Cause: segment.ErrForked}
	if err := a.coord.MarkRestored(ctx10(t), rb.Evidence(coordinator.NodeInfo{Name: "noticer", Address: "10.1.2.3:7300"}, time.Now())); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cli(t, nil, "workers", "--etcd", a.ep, "--generator", "orders")
	if code != 0 || !strings.Contains(out, "segment generator") || !strings.Contains(out, "RESTORE MARKER") ||
		!strings.Contains(out, "firn coordinator bump --generator orders --ids N") || !strings.Contains(out, "saw next 150") {
		t.Fatalf("firn workers --generator orders: exit %d %s\n%s", code, errOut, out)
	}
	for _, args := range [][]string{
		{"--by", "10s"},                                    // every generator: orders needs --ids
		{"--by", "10s", "--generator", "orders"},           // a segment generator needs --ids
		{"--ids", "1000"},                                  // every generator: ids needs --by
		{"--ids", "1000", "--generator", "ids"},            // a snowflake generator needs --by
		{"--ids", "1000", "--generator", "orders=segment"}, // another definition than the pin's
	} {
		out, errOut, code := cli(t, nil, append([]string{"coordinator", "bump", "--etcd", a.ep}, args...)...)
		if code != 2 || !strings.Contains(errOut, "nothing was bumped") {
			t.Fatalf("bump %v: exit %d, stdout %q, stderr %q; want a usage refusal", args, code, out, errOut)
		}
	}
	if _, err := a.coord.ReadCounter(ctx10(t), spec); !errors.Is(err, coordinator.ErrRestored) {
		t.Fatalf("after the refusals: %v, want the marker standing", err)
	}
	out, errOut, code = cli(t, nil, "coordinator", "bump", "--etcd", a.ep, "--generator", "orders", "--ids", "1000")
	if code != 0 || !strings.Contains(out, "next 150 -> 1150") || !strings.Contains(out, "cleared the restore marker") {
		t.Fatalf("bump --ids 1000: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	rec, err := a.coord.ReadCounter(ctx10(t), spec)
	if err != nil || rec.State.Next != 1150 {
		t.Fatalf("after the bump: %+v %v, want next 1150 and no marker", rec.State, err)
	}
	// Both kinds in one bump: each with its flag.
	out, errOut, code = cli(t, nil, "coordinator", "bump", "--etcd", a.ep, "--ids", "10", "--by", "1s")
	if code != 0 || !strings.Contains(out, "generator orders: raised the counter by 10 IDs") || !strings.Contains(out, "generator ids: raised every reservation") {
		t.Fatalf("bump of both kinds: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestBumpEveryGeneratorWithAFloorAlone: a generator created with --above
// that no node has served yet has a generator floor and no pin; a
// cluster-wide bump (the restore procedure) bumps it by the layout its
// definition stores, and every other generator with it (before, it refused
// every generator, naming the one without a pin).
func TestBumpEveryGeneratorWithAFloorAlone(t *testing.T) {
	a := newAdminEtcd(t)
	slot, r := a.holder("orders", "snowflake", 5000)
	sf, _ := generator.Preset("snowflake")
	old, _ := sf.Encode(sf.Units(time.Now().Add(-time.Hour)), 0, 0, 0)
	out, errOut, code := cli(t, nil, "generator", "create", "legacy", "snowflake", "--above", strconv.FormatUint(old, 10), "--etcd", a.ep)
	if code != 0 {
		t.Fatalf("create --above: exit %d: %s %s", code, out, errOut)
	}
	out, errOut, code = cli(t, nil, "coordinator", "bump", "--by", "3s", "--etcd", a.ep)
	if code != 0 {
		t.Fatalf("cluster-wide bump: exit %d: %s %s", code, out, strings.TrimSpace(errOut))
	}
	if got := a.reserved("orders", slot); got != r+3000 {
		t.Fatalf("orders reservation %d, want %d + 3000", got, r)
	}
	if !strings.Contains(out, "legacy") {
		t.Fatalf("bump output does not name generator legacy:\n%s", out)
	}
}
