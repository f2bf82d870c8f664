package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/server/core"
)

// segmentGen adds a segment generator named name with definition def
// after the node's other generators.
func segmentGen(name, def string) func(*core.Config) {
	return func(c *core.Config) {
		d, err := segment.ParseDefinition(def)
		if err != nil {
			panic(err)
		}
		if len(c.Generators) == 0 {
			generators("default=snowflake")(c)
		}
		c.Generators = append(c.Generators, core.GeneratorConfig{Name: name, Segment: &d})
	}
}

// TestSegmentGenerator: two nodes serve one segment generator beside a
// snowflake one over gRPC (NextID, NextIDs, NextRange) and HTTP: every ID
// once, each caller's IDs increasing, all within [start, max]; Info names
// the kind and the counter; Decode refuses naming the kind; graceful stops
// hand back what the nodes held, so a node started again hands out first
// the lowest ID never handed out.
func TestSegmentGenerator(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	opts := segmentGen("orders", "segment,start=1000")
	a := startNamedNode(t, "seg-a", e.Endpoints, t.TempDir(), opts)
	bdir := t.TempDir()
	b := startNamedNode(t, "seg-b", e.Endpoints, bdir, opts)
	waitServing(t, a.ids, "orders", 30*time.Second)
	waitServing(t, b.ids, "orders", 30*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := map[uint64]bool{}
	record := func(ids []uint64) error {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if seen[id] {
				return fmt.Errorf("ID %d issued twice", id)
			}
			if id < 1000 || id > segment.MaxID {
				return fmt.Errorf("ID %d outside [1000, max]", id)
			}
			seen[id] = true
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for _, n := range []*tnode{a, b} {
		for caller := range 3 {
			wg.Go(func() {
				var last uint64
				for i := range 200 {
					var ids []uint64
					switch (caller + i) % 3 {
					case 0:
						r, err := n.ids.NextID(ctx, &firnv1.NextIDRequest{Generator: "orders"})
						if err != nil {
							errs <- err
							return
						}
						ids = []uint64{r.GetId()}
					case 1:
						r, err := n.ids.NextIDs(ctx, &firnv1.NextIDsRequest{Generator: "orders", Count: 37})
						if err != nil {
							errs <- err
							return
						}
						ids = r.GetIds()
					default:
						r, err := n.ids.NextRange(ctx, &firnv1.NextRangeRequest{Generator: "orders", Count: 500})
						if err != nil {
							errs <- err
							return
						}
						for _, run := range r.GetRuns() {
							for k := range run.GetCount() {
								ids = append(ids, run.GetFirst()+k)
							}
						}
						if len(ids) != 500 {
							errs <- fmt.Errorf("NextRange of 500 gave %d IDs", len(ids))
							return
						}
					}
					for _, id := range ids {
						if id <= last {
							errs <- fmt.Errorf("caller's IDs went down: %d after %d", id, last)
							return
						}
						last = id
					}
					if err := record(ids); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// HTTP too.
	resp, err := a.httpc.Get(a.base + "/v1/ids?generator=orders&count=5")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ IDs []string }
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(body, &got); err != nil || len(got.IDs) != 5 {
		t.Fatalf("HTTP /v1/ids: %s (%v)", body, err)
	}
	var httpIDs []uint64
	for _, s := range got.IDs {
		id, _ := strconv.ParseUint(s, 10, 64)
		httpIDs = append(httpIDs, id)
	}
	if err := record(httpIDs); err != nil {
		t.Fatal(err)
	}

	// Info names the kind, the definition and the counter.
	info, err := a.ids.Info(ctx, &firnv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var gi *firnv1.GeneratorInfo
	for _, g := range info.GetGenerators() {
		if g.GetName() == "orders" {
			gi = g
		} else if g.GetKind() != "snowflake" {
			t.Errorf("generator %s kind %q, want snowflake", g.GetName(), g.GetKind())
		}
	}
	if gi == nil || gi.GetKind() != "segment" || gi.GetLayout() != "segment,start=1000,max=9223372036854775807" ||
		gi.GetCounterNext() <= 1000 || gi.GetSegmentStep() == 0 || !gi.GetServing() {
		t.Fatalf("Info of orders: %v", gi)
	}
	// Decode refuses naming the kind.
	_, err = a.ids.Decode(ctx, &firnv1.DecodeRequest{Generator: "orders", Id: 1000})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "segment generator") {
		t.Fatalf("Decode of a segment ID: %v, want INVALID_ARGUMENT naming the kind", err)
	}
	// A count beyond the bounds Info advertises is refused naming the
	// field and the bound; nothing is handed out for it.
	over := gi.GetMaxBatch() + 1
	_, err = a.ids.NextIDs(ctx, &firnv1.NextIDsRequest{Generator: "orders", Count: over})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "count") || !strings.Contains(err.Error(), strconv.Itoa(int(gi.GetMaxBatch()))) {
		t.Fatalf("NextIDs of %d: %v, want INVALID_ARGUMENT naming count and %d", over, err, gi.GetMaxBatch())
	}
	_, err = a.ids.NextRange(ctx, &firnv1.NextRangeRequest{Generator: "orders", Count: gi.GetMaxRange() + 1})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "count") || !strings.Contains(err.Error(), strconv.FormatUint(gi.GetMaxRange(), 10)) {
		t.Fatalf("NextRange of %d: %v, want INVALID_ARGUMENT naming count and %d", gi.GetMaxRange()+1, err, gi.GetMaxRange())
	}

	// Nothing lost on graceful stops: with both nodes stopped, a node
	// started again hands out first the lowest ID never handed out.
	a.stop()
	b.stop()
	gap := uint64(1000)
	for seen[gap] {
		gap++
	}
	b2 := startNamedNode(t, "seg-b", e.Endpoints, bdir, opts)
	waitServing(t, b2.ids, "orders", 30*time.Second)
	r, err := b2.ids.NextIDs(ctx, &firnv1.NextIDsRequest{Generator: "orders", Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := record(r.GetIds()); err != nil {
		t.Fatal(err)
	}
	if r.GetIds()[0] != gap {
		t.Fatalf("after graceful stops the next node began at %d; the lowest ID never handed out is %d (%d IDs handed out)", r.GetIds()[0], gap, len(seen))
	}
}

// TestSegmentPinMismatch: a node whose segment generator's definition
// differs from the pin does not serve it, naming both definitions, and
// refuses its calls at once with that reason; the node's other generator
// serves.
func TestSegmentPinMismatch(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	a := startNamedNode(t, "pin-a", e.Endpoints, t.TempDir(), segmentGen("orders", "segment"))
	waitServing(t, a.ids, "orders", 30*time.Second)
	b := startNamedNode(t, "pin-b", e.Endpoints, t.TempDir(), segmentGen("orders", "segment,max=9007199254740991"))
	waitServing(t, b.ids, "default", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for range 100 { // until the first claim's refusal is the reason (STARTING before it)
		_, err = b.ids.NextID(ctx, &firnv1.NextIDRequest{Generator: "orders"})
		if err != nil && strings.Contains(err.Error(), "max=9007199254740991") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "segment,start=1,max=9223372036854775807") ||
		!strings.Contains(err.Error(), "segment,start=1,max=9007199254740991") {
		t.Fatalf("NextID of a generator pinned to another definition: %v, want UNAVAILABLE naming both definitions", err)
	}
}

// A segment generator whose coordinator is gone serves what it holds; a
// call for more than that is refused with its cause: UNAVAILABLE,
// COORDINATOR_UNAVAILABLE, limit_ids what the node holds (the most a call
// gets now), measured_ids what was asked, and RetryInfo — not OVERLOADED
// with bound max-queue and a limit of 0, a queue bound that does not
// exist. A call within what it holds is still served.
func TestSegmentShortRefusalNamesItsCause(t *testing.T) {
	p := etcdtest.StartCluster(t, 1)
	n := startNode(t, p.Endpoints(), t.TempDir(), segmentGen("orders", "segment"))
	waitServing(t, n.ids, "orders", 30*time.Second)
	if _, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Generator: "orders", Count: 10}); err != nil {
		t.Fatal(err)
	}
	p.Members[0].Stop()
	maxBatch := n.genInfo(t, "orders").GetMaxBatch()
	var err error
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(100 * time.Millisecond) {
		if _, err = n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Generator: "orders", Count: maxBatch}); err != nil {
			break
		}
	}
	wantCode(t, "NextIDs beyond what the node holds, its coordinator gone", err, codes.Unavailable, "claims of the counter fail")
	retry := wantInfo(t, "NextIDs beyond what the node holds", err, "COORDINATOR_UNAVAILABLE",
		map[string]string{"generator": "orders", "measured_ids": strconv.FormatUint(uint64(maxBatch), 10)})
	if retry == nil {
		t.Errorf("no RetryInfo on %v", err)
	}
	var info map[string]string
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(interface{ GetMetadata() map[string]string }); ok {
			info = ei.GetMetadata()
		}
	}
	held, perr := strconv.ParseUint(info["limit_ids"], 10, 64)
	if perr != nil || held == 0 || held >= uint64(maxBatch) || info["bound"] != "" {
		t.Fatalf("metadata %v: want limit_ids what the node holds (0 < held < %d) and no bound", info, maxBatch)
	}
	if _, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Generator: "orders", Count: 1}); err != nil {
		t.Errorf("a call within the %d IDs held: %v", held, err)
	}
}
