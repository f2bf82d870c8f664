package server_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// TestStoredAllowListKeptWhenRecordLost: a generator whose stored
// definition names its callers (`firn generator create orders snowflake
// --allow billing`) keeps refusing the others when that record is later
// gone from the coordinator — restored from a snapshot older than the
// create, as the restore procedure does — as a retirement is kept ("a
// record lost later does not revive the generator") and as an unreadable
// record keeps the list: the flag's list (here none: every caller) is no
// stand-in for a stored one. It served every caller.
func TestStoredAllowListKeptWhenRecordLost(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	certs := etcdtest.MakeCerts(t, "billing")
	n := startNode(t, e.Endpoints, t.TempDir(), serveTLS(t, certs, true), generators("default=snowflake", "orders=snowflake"))
	billing, shop := certs.ClientTLS(t), certs.ClientTLSAs(t, "shop")
	// Both generators serve both callers before the list is stored: the
	// first refusal the loop below meets is then the list's, not orders'
	// own start (its worker taken after default's on a loaded machine).
	for _, tc := range []*tls.Config{billing, shop} {
		for _, gen := range []string{"default", "orders"} {
			for start := time.Now(); grpcCallGen(t, n.node.GRPCAddr(), tc, gen) != nil; time.Sleep(50 * time.Millisecond) {
				if time.Since(start) > 15*time.Second {
					t.Fatalf("%s not serving within 15 s", gen)
				}
			}
		}
	}
	conn := dialGRPC(t, n.node.GRPCAddr(), tlsCreds(shop))
	defer conn.Close()
	asShop := firnv1.NewIDServiceClient(conn)
	defs := n.coord.(coordinator.Definitions)
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "orders", Definition: "snowflake",
		Allow: []string{"billing"}, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var err error
	for start := time.Now(); time.Since(start) < 7*time.Second; time.Sleep(50 * time.Millisecond) {
		if _, err = asShop.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "orders"}); err != nil {
			break
		}
	}
	wantInfo(t, "shop after the allow list was stored", err, "PERMISSION_DENIED", map[string]string{"generator": "orders"})

	// The record is lost (the coordinator restored from a snapshot taken
	// before the create). Another generator defined after that is started
	// by a later read of the definitions, which saw orders' record gone.
	cli := etcdClient(t, e.Endpoints)
	if _, err := cli.Delete(context.Background(), n.coord.(*etcd.Coordinator).Root()+"orders/definition"); err != nil {
		t.Fatal(err)
	}
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "later", Definition: "snowflake", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); !listed(t, asShop, "later"); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("generator later not started within 10 s")
		}
	}
	_, err = asShop.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "orders"})
	wantInfo(t, "shop after orders' stored record was lost", err, "PERMISSION_DENIED", map[string]string{"generator": "orders"})
}
