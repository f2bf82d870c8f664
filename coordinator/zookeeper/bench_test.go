package zookeeper_test

import (
	"testing"

	"github.com/firnid/firn/internal/testing/coordtest"
	"github.com/firnid/firn/internal/testing/zktest"
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

// BenchmarkWrites: coordinator writes per second per generator (zxid
// delta), idle and at full load, on the 3-server ensemble
// (coordtest.BenchWrites). Run with -benchtime 1x.
func BenchmarkWrites(b *testing.B) {
	e := zktest.StartEnsemble(b, 3)
	coordtest.BenchWrites(b, &zktest.Backend{Servers: e.Addrs(), TTL: ensembleTTL})
}
