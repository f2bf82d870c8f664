package deploy

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

const (
	rulesFile     = "prometheus/firn-rules.yml"
	ruleTestsFile = "prometheus/firn-rules.test.yml"
	dashboardFile = "grafana/firn.json"
)

var promqlParser = parser.NewParser(parser.Options{})

// metricNames parses a PromQL expression and returns the metric names its
// selectors name (by name or by a __name__ equality matcher). A selector
// without a fixed name is an error: it could match anything.
func metricNames(expr string) ([]string, error) {
	e, err := promqlParser.ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr, err)
	}
	seen := map[string]bool{}
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			bad = fmt.Errorf("selector %s in %q has no metric name", vs, expr)
		}
		seen[name] = true
		return nil
	})
	if bad != nil {
		return nil, bad
	}
	return sortedKeys(seen), nil
}

// loadRules parses the rules file strictly (unknown fields refused) and
// validates every expression, as Prometheus does at load.
func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	rgs, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promqlParser, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", rulesFile, errs)
	}
	return rgs
}

// grafanaVars are the template variables the dashboard may use in PromQL,
// with what stands in for them when the query is parsed.
var grafanaVars = map[string]string{
	"$__rate_interval": "5m",
	"$__interval":      "1m",
	"$__range":         "1h",
	"$cluster":         ".*",
	"$node":            ".*",
}

var anyVar = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)

// expandGrafana replaces the dashboard's template variables so the query
// parses as PromQL; an unknown variable is an error.
func expandGrafana(q string) (string, error) {
	keys := sortedKeys(grafanaVars)
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		q = strings.ReplaceAll(q, k, grafanaVars[k])
	}
	if v := anyVar.FindString(q); v != "" {
		return "", fmt.Errorf("unknown template variable %s", v)
	}
	return q, nil
}

var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels flattens rows.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// queries returns every PromQL query of the dashboard (panel targets and
// the selectors of label_values variables), expanded, keyed by where it
// is.
func (d dashboard) queries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range d.allPanels() {
		for i, tg := range p.Targets {
			q, err := expandGrafana(tg.Expr)
			if err != nil {
				t.Errorf("panel %q target %d: %v", p.Title, i, err)
				continue
			}
			out[fmt.Sprintf("panel %q target %d", p.Title, i)] = q
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Errorf("variable %s: query is neither an object nor a string", v.Name)
				continue
			}
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q.Query)
			continue
		}
		sel, err := expandGrafana(m[1])
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
			continue
		}
		out["variable "+v.Name] = sel
	}
	return out
}

// usedMetrics returns every metric name the rules and the dashboard use,
// with where each is used, and the names the rules record.
func usedMetrics(t *testing.T) (used map[string][]string, recorded map[string]bool) {
	t.Helper()
	used = map[string][]string{}
	recorded = map[string]bool{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			where := "rule " + r.Record + r.Alert
			if r.Record != "" {
				recorded[r.Record] = true
			}
			names, err := metricNames(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", where, err)
			}
			for _, n := range names {
				used[n] = append(used[n], where)
			}
		}
	}
	for where, q := range loadDashboard(t).queries(t) {
		names, err := metricNames(q)
		if err != nil {
			t.Errorf("dashboard %s: %v", where, err)
		}
		for _, n := range names {
			used[n] = append(used[n], "dashboard "+where)
		}
	}
	return used, recorded
}

func TestMetricNamesParsesPromQL(t *testing.T) {
	for _, c := range []struct {
		expr string
		want string
		err  bool
	}{
		{expr: `firn_serving == 0`, want: "firn_serving"},
		{expr: `sum by (le) (rate(x_bucket{a="b"}[5m])) / on (job) group_left (node) y_info`, want: "x_bucket,y_info"},
		{expr: `{__name__="named_by_matcher", job="j"} offset 1h`, want: "named_by_matcher"},
		{expr: `max_over_time(m[1h:1m]) and absent(n)`, want: "m,n"},
		// A name inside a string or a label is not a metric.
		{expr: `label_replace(up, "dst", "not_a_metric", "src", "(.*)")`, want: "up"},
		{expr: `{job="no name"}`, err: true},
		{expr: `sum(rate(broken[5m]`, err: true},
	} {
		got, err := metricNames(c.expr)
		if (err != nil) != c.err {
			t.Errorf("metricNames(%q) error %v, want error %v", c.expr, err, c.err)
			continue
		}
		if !c.err && strings.Join(got, ",") != c.want {
			t.Errorf("metricNames(%q) = %v, want %s", c.expr, got, c.want)
		}
	}
	if q, err := expandGrafana(`rate(a{node=~"$node"}[$__rate_interval])`); err != nil || q != `rate(a{node=~".*"}[5m])` {
		t.Errorf("expandGrafana: %q %v", q, err)
	}
	if _, err := expandGrafana(`a{x="$unknown"}`); err == nil {
		t.Error("expandGrafana accepted an unknown variable")
	}
}
