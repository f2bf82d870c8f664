package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestPromtoolChecksRules(t *testing.T) {
	out, code := promtool(t, "", "check", "rules", rulesFile)
	if code != 0 {
		t.Fatalf("promtool check rules: exit %d\n%s", code, out)
	}
	out, code = promtool(t, "", "test", "rules", ruleTestsFile)
	if code != 0 {
		t.Fatalf("promtool test rules: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules printed no SUCCESS:\n%s", out)
	}
}

// TestPromtoolCatchesABrokenRule keeps the check above honest: a rule that
// does not parse fails promtool.
func TestPromtoolCatchesABrokenRule(t *testing.T) {
	p := filepath.Join(t.TempDir(), "broken.yml")
	os.WriteFile(p, []byte("groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: sum(rate(firn_ids_issued_total[5m])\n"), 0o644)
	if out, code := promtool(t, "", "check", "rules", p); code == 0 {
		t.Fatalf("promtool check rules passed a broken rule:\n%s", out)
	}
}

var severities = map[string]bool{"critical": true, "warning": true, "info": true}

// ruleTests is the part of a promtool unit test file read here.
type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestEveryAlertDocumentedAndTested: each alert has a severity, a summary
// and a description, and at least one unit test in which it fires.
func TestEveryAlertDocumentedAndTested(t *testing.T) {
	b, err := os.ReadFile(ruleTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rt ruleTests
	if err := yaml.Unmarshal(b, &rt); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	alerts := 0
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if !severities[r.Labels["severity"]] {
				t.Errorf("alert %s: severity %q, want one of critical, warning, info", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s has no %s", r.Alert, a)
				}
			}
			if !fires[r.Alert] {
				t.Errorf("alert %s has no promtool unit test that fires it", r.Alert)
			}
		}
	}
	if alerts < 10 {
		t.Errorf("only %d alerts", alerts)
	}
}

// TestLayoutAlertFiresUnderTwoYears runs a promtool unit test written
// here: a layout one day short of two years alerts after the rule's hold,
// one a day past two years does not.
func TestLayoutAlertFiresUnderTwoYears(t *testing.T) {
	const twoYears = 2 * 365 * 86400
	abs, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	unit := fmt.Sprintf(`rule_files: [%q]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'firn_layout_seconds_remaining{job="firn", instance="a:7301", generator="short"}'
        values: '%d-60x180'
      - series: 'firn_layout_seconds_remaining{job="firn", instance="a:7301", generator="long"}'
        values: '%d-60x180'
    alert_rule_test:
      - eval_time: 2h
        alertname: FirnLayoutRunningOut
        exp_alerts:
          - exp_labels: {severity: warning, job: firn, instance: "a:7301", generator: short}
            exp_annotations:
              summary: "Layout of short runs out in 729d 0h 0m 0s"
              description: %q
              runbook_url: %q
`, abs, twoYears-86400+7200, twoYears+86400+7200, layoutDescription(t), runbookURL+"firnlayoutrunningout")
	p := filepath.Join(t.TempDir(), "layout.test.yml")
	if err := os.WriteFile(p, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := promtool(t, "", "test", "rules", p); code != 0 {
		t.Fatalf("promtool test rules (layout under two years): exit %d\n%s", code, out)
	}
}

func layoutDescription(t *testing.T) string {
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "FirnLayoutRunningOut" {
				return strings.ReplaceAll(r.Annotations["description"], "{{ $labels.generator }}", "short")
			}
		}
	}
	t.Fatal("no FirnLayoutRunningOut alert")
	return ""
}
