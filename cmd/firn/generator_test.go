package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/sony/sonyflake"
	clientv3 "go.etcd.io/etcd/client/v3"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// firn generator create, list, describe and retire against a real etcd:
// what is stored, what is refused (and that a refusal writes nothing),
// the exit codes.
func TestGeneratorCommands(t *testing.T) {
	t.Parallel() // its own etcd
	srv := etcdtest.StartEmbedded(t)
	ep := srv.Endpoints[0]
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return cli(t, nil, append(append([]string{"generator"}, args...), "--etcd", ep)...)
	}
	must := func(want int, args ...string) (string, string) {
		t.Helper()
		out, errOut, code := run(args...)
		if code != want {
			t.Fatalf("firn generator %v: exit %d, want %d\nstdout %s\nstderr %s", args, code, want, out, errOut)
		}
		return out, errOut
	}
	contains := func(what, s string, subs ...string) {
		t.Helper()
		for _, sub := range subs {
			if !strings.Contains(s, sub) {
				t.Fatalf("%s lacks %q:\n%s", what, sub, s)
			}
		}
	}

	out, _ := must(exitOK, "list")
	contains("list of an empty cluster", out, "no generators defined")
	out, _ = must(exitOK, "create", "orders", "snowflake", "--allow", "billing,shop")
	sf, _ := generator.Preset("snowflake")
	contains("create", out, "generator orders defined: "+sf.String(), "callers allowed: billing, shop", "--generator orders="+sf.String())
	out, _ = must(exitOK, "create", "users", "segment,max=1000000", "--above", "41999")
	contains("create --above of a segment", out, "segment,start=42000,max=1000000", "the first ID is 42000")

	// Refusals, each naming why; none writes.
	_, errOut := must(exitFailure, "create", "orders", "compact")
	contains("a second create", errOut, `generator "orders" is already defined as `+sf.String(), "serving")
	_, errOut = must(exitUsage, "create", "x", "snowflake", "--allow", "a,a")
	contains("--allow a,a", errOut, `--allow: caller name "a" given twice`)
	_, errOut = must(exitUsage, "create", "x", "segment,start=10", "--above", "10")
	contains("a segment start at --above", errOut, "start=10 is at or below ID 10")
	_, errOut = must(exitUsage, "create", "x", "compact", "--above", strconv.FormatUint(1<<50, 10))
	contains("an ID wider than the layout", errOut, "does not decode under", "at most 42 bits")
	_, errOut = must(exitUsage, "create", "x", "time=41,dc=0,worker=10,seq=12,unit=1ms,epoch=2999-01-01T00:00:00Z")
	contains("a layout a node refuses", errOut, "epoch", "is in the future")
	_, errOut = must(exitUsage, "create", "x", "seq", "--above", "5")
	contains("--above on seq", errOut, "seq generator")
	wall, _ := clockguard.NewSystem().Now()
	future, _ := sf.Encode(sf.Units(wall.Add(time.Hour)), 0, 0, 0)
	_, errOut = must(exitUsage, "create", "x", "snowflake", "--above", strconv.FormatUint(future, 10))
	contains("an ID from the future", errOut, "from the future")

	// A generator a node pinned already: another layout is refused naming
	// both; --above is refused pointing at coordinator bump.
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/firn/default/static/pin", fmt.Sprintf(`{"layout":%q,"datacenter":-1,"incarnation":"abc","schema":1}`, sf.String())); err != nil {
		t.Fatal(err)
	}
	_, errOut = must(exitFailure, "create", "static", "compact")
	compact, _ := generator.Preset("compact")
	contains("another layout than the pin", errOut, `pinned to "`+sf.String()+`"`, `the definition is "`+compact.String()+`"`, "nothing was written")
	_, errOut = must(exitFailure, "create", "static", "snowflake", "--above", "1")
	contains("--above on a serving generator", errOut, "already serves", "firn coordinator bump --generator static --by D")
	out, _ = must(exitOK, "create", "static", "snowflake")
	contains("the pinned layout", out, "generator static defined")

	out, _ = must(exitOK, "list")
	if !regexp.MustCompile(`(?m)^orders +`+regexp.QuoteMeta(sf.String())+` +billing,shop +serving$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^users +segment,start=42000,max=1000000 +\(every caller\) +serving$`).MatchString(out) ||
		strings.Index(out, "orders") > strings.Index(out, "static") || strings.Index(out, "static") > strings.Index(out, "users") ||
		strings.Contains(out, "\nx ") {
		t.Fatalf("list: want orders, static and users in order, with definition, allow and state:\n%s", out)
	}
	out, _ = must(exitOK, "describe", "users")
	contains("describe users", out, "segment,start=42000,max=1000000", "above:", "41999", "every caller", "state:", "serving",
		"pin:", "none (no node has served it)", "kept on a counter")
	out, _ = must(exitOK, "describe", "static")
	contains("describe static", out, "pin:", sf.String()+" (incarnation abc)", "workers:", "0 in use (0 live) of 1024")
	_, errOut = must(exitFailure, "describe", "nosuch")
	contains("describe nosuch", errOut, `no generator "nosuch"`)

	out, _ = must(exitOK, "retire", "orders", "--reason", "moved to orders2")
	contains("retire", out, "generator orders retired at ", ": moved to orders2")
	out, _ = must(exitOK, "retire", "orders", "--reason", "again")
	contains("retire again", out, "was already retired at", "moved to orders2", "(kept)")
	_, errOut = must(exitFailure, "retire", "nosuch")
	contains("retire nosuch", errOut, `no generator "nosuch" defined`)
	out, _ = must(exitOK, "list")
	if !regexp.MustCompile(`(?m)^orders .* retired \d{4}-`).MatchString(out) {
		t.Fatalf("list after retire: orders not shown retired:\n%s", out)
	}
	_, errOut = must(exitFailure, "create", "orders", "snowflake")
	contains("create of a retired name", errOut, "already defined", "retired at", "moved to orders2")

	// A record this binary cannot read (a newer one's schema): list and
	// describe show it as such, naming its key and why; the others are
	// listed, described and created as before; its name is not reused.
	if _, err := c.Put(ctx, "/firn/default/future/definition", `{"name":"future","definition":"snowflake","created":"2026-01-01T00:00:00Z","schema":2}`); err != nil {
		t.Fatal(err)
	}
	out, _ = must(exitOK, "list")
	if !regexp.MustCompile(`(?m)^future +\? +\? +unreadable`).MatchString(out) || !strings.Contains(out, "/firn/default/future/definition has schema 2") ||
		!regexp.MustCompile(`(?m)^users +segment`).MatchString(out) {
		t.Fatalf("list with an unreadable record: want it shown unreadable, naming its key and schema, beside the others:\n%s", out)
	}
	out, _ = must(exitOK, "describe", "future")
	contains("describe of an unreadable record", out, "definition:", "unreadable:", "/firn/default/future/definition has schema 2")
	out, _ = must(exitOK, "describe", "users")
	contains("describe beside an unreadable record", out, "segment,start=42000,max=1000000")
	out, _ = must(exitOK, "create", "later", "snowflake")
	contains("create beside an unreadable record", out, "generator later defined")
	_, errOut = must(exitFailure, "create", "future", "snowflake")
	contains("create of the name of an unreadable record", errOut, `generator "future" is already defined`, "schema 2")
}

// The walk-throughs of docs/migrate.md, one generator each on one node:
// IDs made by Leaf's snowflake (its layout: 41-bit ms from Twitter's
// epoch, 10-bit worker, 12-bit sequence — firn's snowflake preset, the
// worker split 5+5), by sony/sonyflake and by bwmarrin/snowflake; `firn
// generator create legacy-* LAYOUT --above MAX` writes the floor above
// MAX; a node started with the same --generator then issues IDs above MAX,
// whose time is above MAX's, and becomes ready as fast as any node does.
func TestMigrateWalkthroughs(t *testing.T) {
	t.Parallel() // its own etcd, ports and dirs
	srv := etcdtest.StartEmbedded(t)
	ep := srv.Endpoints[0]
	sf, _ := generator.Preset("snowflake")
	sony, _ := generator.Preset("sonyflake")

	// The old fleets' largest IDs.
	wall, _ := clockguard.NewSystem().Now()
	leafMax, err := sf.Encode(sf.Units(wall), 31, 31, 4095) // Leaf worker 1023, the last sequence of this ms
	if err != nil {
		t.Fatal(err)
	}
	sonyGen := sonyflake.NewSonyflake(sonyflake.Settings{MachineID: func() (uint16, error) { return 0xBEEF, nil }})
	if sonyGen == nil {
		t.Fatal("sonyflake.NewSonyflake refused its settings")
	}
	bwNode, err := snowflake.NewNode(1023)
	if err != nil {
		t.Fatal(err)
	}
	var sonyMax, bwMax uint64
	for range 1000 {
		id, err := sonyGen.NextID()
		if err != nil {
			t.Fatal(err)
		}
		sonyMax = max(sonyMax, id)
		bwMax = max(bwMax, uint64(bwNode.Generate().Int64()))
	}
	// The libraries' own decoding agrees with firn's layouts: the
	// walk-throughs rest on it.
	if p, _ := sony.Decode(sonyMax); p.Worker != 0xBEEF || p.Sequence != sonyflake.Decompose(sonyMax)["sequence"] {
		t.Fatalf("sonyflake ID %d decodes under the sonyflake preset to %+v, sonyflake says %v", sonyMax, p, sonyflake.Decompose(sonyMax))
	}
	bwID := snowflake.ParseInt64(int64(bwMax))
	if p, _ := sf.Decode(bwMax); p.Time.UnixMilli() != bwID.Time() || p.Datacenter<<5|p.Worker != uint64(bwID.Node()) || p.Sequence != uint64(bwID.Step()) {
		t.Fatalf("bwmarrin ID %d decodes under the snowflake preset to %+v, bwmarrin says time %d node %d step %d",
			bwMax, p, bwID.Time(), bwID.Node(), bwID.Step())
	}

	walks := []struct {
		name, layout string
		max          uint64
		l            generator.Layout
	}{
		{"legacy-leaf", "snowflake", leafMax, sf},
		{"legacy-sony", "sonyflake", sonyMax, sony},
		{"legacy-bw", "snowflake", bwMax, sf},
	}
	var gens []string
	for _, w := range walks {
		out, errOut, code := cli(t, nil, "generator", "create", w.name, w.layout, "--above", strconv.FormatUint(w.max, 10), "--etcd", ep)
		if code != exitOK || !strings.Contains(out, "written before the definition") {
			t.Fatalf("firn generator create %s %s --above %d: exit %d\n%s%s", w.name, w.layout, w.max, code, out, errOut)
		}
		out, _, _ = cli(t, nil, "generator", "describe", w.name, "--etcd", ep)
		p, _ := w.l.Decode(w.max)
		if want := fmt.Sprintf(`(?m)^floor: +%d: `, p.Units+1); !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("describe %s: want %s (the floor above the ID's time %d):\n%s", w.name, want, p.Units, out)
		}
		gens = append(gens, w.name+"="+w.layout)
	}

	a := freeAddrs(t)
	// A short window and skew shorten the restore guard every take on a
	// shared coordinator waits (the floors are not what it waits for).
	node := serve(t, t.TempDir(), a, nil, "--etcd", ep, "--unchecked-clock-ok", "--reservation-window", "3500ms", "--max-peer-skew", "100ms",
		"--generator", strings.Join(gens, ","))
	node.waitReady(30 * time.Second)
	for _, w := range walks {
		for !node.genServing(w.name) {
			if time.Since(node.started) > 20*time.Second {
				t.Fatalf("generator %s does not serve %v after the start: the floors lie in the past and must not delay it", w.name, time.Since(node.started))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, w := range walks {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := node.client().NextIDs(ctx, &firnv1.NextIDsRequest{Generator: w.name, Count: 100})
		cancel()
		if err != nil {
			t.Fatalf("NextIDs(%s): %v", w.name, err)
		}
		old, _ := w.l.Decode(w.max)
		for _, id := range resp.GetIds() {
			p, err := w.l.Decode(id)
			if err != nil || id <= w.max || p.Units <= old.Units {
				t.Fatalf("%s: ID %d (time %v, %v) is not above the old fleet's %d (time %v)", w.name, id, p.Time, err, w.max, old.Time)
			}
		}
	}
	if code := node.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
}
