package deploy

import (
	"strings"
	"testing"
)

// TestDashboardLayout: the rows an on-call engineer expects, templated on
// cluster and node, and every panel query filtered by both.
func TestDashboardLayout(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard needs a uid and a title")
	}
	var rows []string
	ids := map[int]bool{}
	for _, p := range d.allPanels() {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			rows = append(rows, p.Title)
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource must be the ${datasource} variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `cluster=~"$cluster"`) || !strings.Contains(tg.Expr, `node=~"$node"`) {
				t.Errorf("panel %q: query %q is not filtered by $cluster and $node", p.Title, tg.Expr)
			}
		}
	}
	if got, want := strings.Join(rows, ","), "Overview,Clocks,Coordinator,Ring buffer,gRPC,Segment generators,Sequence generators"; got != want {
		t.Errorf("rows %q, want %q", got, want)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	for _, v := range []string{"datasource", "cluster", "node"} {
		if vars[v] == "" {
			t.Errorf("no template variable %s", v)
		}
	}
	q := d.queries(t)
	if !strings.Contains(q["variable cluster"], "firn_build_info") || !strings.Contains(q["variable node"], "firn_build_info") {
		t.Errorf("cluster and node variables must come from firn_build_info: %q %q", q["variable cluster"], q["variable node"])
	}
}
