package zookeeper_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator/coordtest"
	"github.com/firnid/firn/coordinator/zookeeper/zktest"
)

// benchBackends are the real servers the benchmarks run against: a
// standalone server and a 3-server ensemble (the client knows all three).
func benchBackends(b *testing.B) map[string]*zktest.Backend {
	s := zktest.StartStandalone(b)
	e := zktest.StartEnsemble(b, 3)
	return map[string]*zktest.Backend{
		"standalone": {Servers: []string{s.Addr}, TTL: standaloneTTL},
		"ensemble3":  {Servers: e.Addrs(), TTL: ensembleTTL},
	}
}

func BenchmarkAcquire(b *testing.B) {
	for name, be := range benchBackends(b) {
		b.Run(name, func(b *testing.B) { coordtest.BenchAcquire(b, be) })
	}
}

func BenchmarkReserve(b *testing.B) {
	for name, be := range benchBackends(b) {
		b.Run(name, func(b *testing.B) { coordtest.BenchReserve(b, be) })
	}
}

// BenchmarkWrites measures coordinator writes per second per generator
// (zxid delta) over FIRN_WRITES_SECONDS (default 60), idle and at full
// load, on the 3-server ensemble. Run with -benchtime 1x.
func BenchmarkWrites(b *testing.B) {
	d := 60 * time.Second
	if s := os.Getenv("FIRN_WRITES_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("FIRN_WRITES_SECONDS=%q", s)
		}
		d = time.Duration(n) * time.Second
	}
	e := zktest.StartEnsemble(b, 3)
	be := &zktest.Backend{Servers: e.Addrs(), TTL: ensembleTTL}
	for _, load := range []bool{false, true} {
		name := map[bool]string{false: "idle", true: "load"}[load]
		b.Run(name, func(b *testing.B) {
			rate, ids := coordtest.WriteRate(b, be, 2, d, load)
			b.ReportMetric(rate, "writes/s/gen")
			b.ReportMetric(float64(ids)/d.Seconds(), "ids/s")
			if rate > 1.05 {
				b.Errorf("%.2f coordinator writes/s per generator %s, target <= 1", rate, name)
			}
		})
	}
}
