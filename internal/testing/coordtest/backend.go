package coordtest

import (
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

// Backend is what a coordinator backend gives the shared cases. Its test
// package implements it over real servers it starts itself (and stops at
// cleanup), and wires the harness in three places:
//
//	func TestMain(m *testing.M) { coordtest.Main(m, backend) } // child holders
//	func TestHarness(t *testing.T) { coordtest.Run(t, backend) }  // every case
//	func TestFenceTakeBack(t *testing.T) { coordtest.FenceTakeBack(t, backend) }
//
// The fence cases (Fence*) are separate exported functions: a backend wraps
// each one its weak fence (build tag firn_weakfence) must break in a
// top-level test named TestFence..., and test/run.sh runs every TestFence
// test under that tag and fails if one passes.
type Backend interface {
	// Name labels the backend in logs ("etcd", "zookeeper").
	Name() string
	// NewCluster returns an empty ID space for one test: a fresh cluster
	// name (or prefix, or chroot) on a server the backend started. It may
	// share one server between tests; everything it opens is closed at
	// t's cleanup.
	NewCluster(t testing.TB) Cluster
	// Dial connects to the cluster that Cluster.Endpoint described, outside
	// any test: a child process (a separate OS process the harness can
	// SIGSTOP) calls it, and so does Decisive. It must use the same TTL and
	// timeouts as Connect. (A cluster that no other process can reach
	// implements InProcessCluster: its children run in the test process.)
	Dial(endpoint string, clock clockguard.Clock) (coordinator.Coordinator, error)
}

// Cluster is one test's ID space on a running coordinator.
type Cluster interface {
	// Connect returns a new coordinator client of its own (its own
	// connection and its own lease or session) on this cluster. Its
	// heartbeat readings and take-back ages come from clock. It is closed
	// at t's cleanup (closing it twice must be harmless).
	Connect(t testing.TB, clock clockguard.Clock) coordinator.Backend
	// Endpoint is an opaque, single-line string for Backend.Dial in a
	// child process.
	Endpoint() string
	// TTL is how long a silent holder keeps ownership (etcd lease TTL,
	// ZooKeeper session timeout) on coordinators from Connect and Dial.
	// The harness waits multiples of it: keep it small (2-3 s).
	TTL() time.Duration
	// Expire ends the liveness behind lease from outside, as a TTL expiry
	// would (etcd: revoke its lease; ZooKeeper: expire its session), and
	// returns once the coordinator itself has let ownership go. Other
	// leases of the same coordinator may go with it.
	Expire(t testing.TB, lease coordinator.Lease)
	// Kill stops c abruptly, as a crashed process would: no release, no
	// revoke, no further keepalive; its ownership lingers until the TTL
	// runs out. c is unusable afterwards.
	Kill(t testing.TB, c coordinator.Coordinator)
	// SetReserved writes reserved[slot] of generator directly, behind every
	// holder's back (what a restored snapshot does).
	SetReserved(t testing.TB, generator string, slot coordinator.Slot, r int64)
	// Reserved reads reserved[slot] of generator directly (-1 if absent).
	Reserved(t testing.TB, generator string, slot coordinator.Slot) int64
	// SetDefinitionRecord replaces the stored definition record of
	// generator, which exists, with rec as it is (what a newer binary
	// writes), behind every client's back.
	SetDefinitionRecord(t testing.TB, generator string, rec []byte)
	// Revision reads the coordinator's global write counter (etcd header
	// revision, ZooKeeper zxid counter) for write-rate measurements.
	Revision(t testing.TB) int64
}
