package server_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server/core"
)

// TestDefinitionNodeCannotRunNamesWhy: a generator the coordinator
// defines (`firn generator create events sonyflake`, as migrate.md shows)
// that a node cannot run — its --datacenter 5 does not fit sonyflake's
// 0 datacenter bits — is left alone there, and logged. A call for it on
// that node must say why it is not served there, not answer that the
// caller asked for a generator nobody defined (NOT_FOUND "unknown
// generator", which the runbook calls the caller's mistake).
func TestDefinitionNodeCannotRunNamesWhy(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	admin := startNamedNode(t, "admin", e.Endpoints, t.TempDir())
	defs := admin.coord.(coordinator.Definitions)
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "events", Definition: "sonyflake", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// Started after the create: its start's read of the definitions
	// meets the definition, before Start returns.
	n := startNamedNode(t, "dc5", e.Endpoints, t.TempDir(), func(c *core.Config) { c.Datacenter = 5 })
	_, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "events"})
	wantCode(t, "NextID of a defined generator this node cannot run", err, codes.NotFound, `"events"`, "cannot run", "datacenter")
}
