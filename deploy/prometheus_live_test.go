package deploy

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRulesAndDashboardOnRealPrometheus runs Debian's Prometheus server
// against a real node with firn's rules loaded, then asks it every
// dashboard query and every recorded series: each must return data (the
// joins on firn_build_info must match), and the alerts that hold for a
// node started with fault injection and without NTP must be pending.
func TestRulesAndDashboardOnRealPrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus: %v (test/run.sh installs Debian's prometheus package)", err)
	}
	// A segment generator beside the default: the dashboard's segment row.
	n := startNode(t, true, "--generator", "default=snowflake", "--generator", "orders=segment", "--generator", "chats=seq")
	n.waitReady(t, 200, 30*time.Second)
	n.issue(t, 1000)
	if code, body, err := httpGet("http://" + n.httpAddr + "/v1/ids?generator=orders&count=1000"); err != nil || code != 200 {
		t.Fatalf("/v1/ids?generator=orders: %d %s %v", code, body, err)
	}

	dir := t.TempDir()
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: firn
    static_configs:
      - targets: [%q]
`, rules, n.httpAddr)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	out := newLockedBuffer()
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out)
		}
	})
	api := "http://" + addr
	waitUntil(t, 30*time.Second, "Prometheus ready", func() bool {
		code, _, err := httpGet(api + "/-/ready")
		return err == nil && code == 200
	})
	// Enough scrapes and rule evaluations for rates over 15s windows.
	waitUntil(t, 30*time.Second, "firn:node_serving recorded for 8s", func() bool {
		r, err := promQuery(api, "count_over_time(firn:node_serving[1m]) >= 8")
		return err == nil && len(r) > 0
	})

	live := func(q string) string {
		// The causes panel keeps the causes that hold (== 1); while
		// serving every cause is 0, so ask for all of them.
		q = strings.ReplaceAll(q, "(firn_not_serving == 1)", "(firn_not_serving)")
		q = strings.ReplaceAll(q, "$__rate_interval", "15s")
		q = strings.ReplaceAll(q, "$cluster", ".*")
		return strings.ReplaceAll(q, "$node", ".*")
	}
	d := loadDashboard(t)
	for _, p := range d.allPanels() {
		for i, tg := range p.Targets {
			r, err := promQuery(api, live(tg.Expr))
			if err != nil {
				t.Errorf("panel %q target %d: %v", p.Title, i, err)
			} else if len(r) == 0 {
				t.Errorf("panel %q target %d returns nothing from a real node: %s", p.Title, i, tg.Expr)
			}
		}
	}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record == "" {
				continue
			}
			res, err := promQuery(api, r.Record)
			if err != nil || len(res) == 0 {
				t.Errorf("recorded series %s is empty (%v): its expression matches nothing on a real node", r.Record, err)
			}
		}
	}
	for _, a := range []string{"FirnFaultInjectionEnabled", "FirnNTPUnchecked"} {
		res, err := promQuery(api, fmt.Sprintf(`ALERTS{alertname=%q, alertstate="pending"}`, a))
		if err != nil || len(res) == 0 {
			t.Errorf("alert %s is not pending for a node with fault injection and no NTP (%v)", a, err)
		}
	}
	res, err := promQuery(api, `ALERTS{alertname="FirnNodeNotServing"}`)
	if err != nil || len(res) != 0 {
		t.Errorf("FirnNodeNotServing for a serving node: %v %v", res, err)
	}

	// The same node failed closed: the alert is pending with the cause, and
	// the causes panel shows it.
	n.issue(t, 1)
	n.setOffset(t, -30*time.Second)
	n.waitReady(t, 503, 5*time.Second)
	waitUntil(t, 30*time.Second, "FirnNodeNotServing pending with cause CLOCK_ROLLBACK", func() bool {
		r, err := promQuery(api, `ALERTS{alertname="FirnNodeNotServing", alertstate="pending", cause="CLOCK_ROLLBACK"}`)
		return err == nil && len(r) == 1
	})
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, "firn_not_serving == 1") {
				continue
			}
			q := strings.ReplaceAll(strings.ReplaceAll(tg.Expr, "$cluster", ".*"), "$node", ".*")
			r, err := promQuery(api, q)
			if err != nil || len(r) != 1 || r[0]["cause"] != "CLOCK_ROLLBACK" {
				t.Errorf("panel %q on a node failed closed on a rollback: %v %v, want one row with cause CLOCK_ROLLBACK", p.Title, r, err)
			}
		}
	}
	n.setOffset(t, 0)
	n.waitReady(t, 200, 10*time.Second)
}

func waitUntil(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// promQuery runs an instant query and returns the result's series labels.
func promQuery(api, q string) ([]map[string]string, error) {
	code, body, err := httpGet(api + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return nil, fmt.Errorf("%d %s: %w", code, body, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, r.Error)
	}
	out := make([]map[string]string, len(r.Data.Result))
	for i, s := range r.Data.Result {
		out[i] = s.Metric
	}
	return out, nil
}
