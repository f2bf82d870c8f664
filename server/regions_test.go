package server_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server/core"
)

// Two regions, each with its own coordinator, pinned to datacenters 1 and
// 2: under load their IDs never meet, although each region hands out the
// same worker IDs (neither coordinator knows of the other). Info and the
// status page show the pinned datacenter.
func TestRegionsWithDistinctDatacentersNeverMeet(t *testing.T) {
	regions := []*tnode{}
	for dc := int64(1); dc <= 2; dc++ {
		e := etcdtest.StartEmbedded(t)
		n := startNamedNode(t, "region-"+string(rune('0'+dc)), e.Endpoints, t.TempDir(),
			func(c *core.Config) { c.Datacenter = dc; c.MaxBatch = 10_000 })
		waitServing(t, n.ids, "", 10*time.Second)
		regions = append(regions, n)
	}
	infos := []*firnv1.GeneratorInfo{regions[0].genInfo(t, ""), regions[1].genInfo(t, "")}
	for i, g := range infos {
		if !g.GetDatacenterFixed() || g.GetDatacenter() != uint32(i+1) {
			t.Fatalf("region %d: Info datacenter %d fixed=%v, want %d pinned", i+1, g.GetDatacenter(), g.GetDatacenterFixed(), i+1)
		}
	}
	if infos[0].GetWorker() != infos[1].GetWorker() {
		t.Fatalf("the regions hold workers %d and %d: the test needs them to share a worker ID, so that only the datacenter keeps them apart",
			infos[0].GetWorker(), infos[1].GetWorker())
	}
	if code, page := httpGet(t, regions[0].httpc, regions[0].base+"/"); code != 200 || !strings.Contains(page, "datacenter pinned by --datacenter") {
		t.Fatalf("status page %d does not show the pinned datacenter", code)
	}

	// Load on both at once.
	ids := make([][]uint64, 2)
	var wg sync.WaitGroup
	for i, n := range regions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for len(ids[i]) < 200_000 {
				resp, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 10_000})
				if err != nil {
					t.Error(err)
					return
				}
				ids[i] = append(ids[i], resp.GetIds()...)
			}
		}()
	}
	wg.Wait()
	l, _ := generator.Preset("snowflake")
	for i := range ids {
		for _, id := range ids[i] {
			if p, _ := l.Decode(id); p.Datacenter != uint64(i+1) {
				t.Fatalf("region %d issued ID %d with datacenter %d", i+1, id, p.Datacenter)
			}
		}
	}
	a, b := slices.Clone(ids[0]), slices.Clone(ids[1])
	slices.Sort(a)
	slices.Sort(b)
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			t.Fatalf("ID %d issued in both regions", a[i])
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
}
