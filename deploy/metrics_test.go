package deploy

import (
	"strings"
	"testing"
	"time"
)

// prometheusWritten are series Prometheus itself writes for every target.
var prometheusWritten = map[string]bool{"up": true}

// TestMetricsExposedByRealNode starts a node, scrapes it while it serves
// and while it has failed closed after a clock rollback, checks that every
// metric name the rules and the dashboard use is exposed by the serving
// node (a series that appears only on failure would restart every for:
// and leave panels empty until the first one), that the failing node
// reports the cause, and that promtool accepts both scrapes.
func TestMetricsExposedByRealNode(t *testing.T) {
	// A segment and a sequence generator beside the default: their panels' series too.
	n := startNode(t, true, "--generator", "default=snowflake", "--generator", "orders=segment", "--generator", "chats=seq")
	n.waitReady(t, 200, 30*time.Second)
	n.issue(t, 100)
	serving := n.scrape(t)

	// A rollback beyond max-lead right after an ID was issued: the
	// generator fails closed and the not-serving series appear.
	n.issue(t, 1)
	n.setOffset(t, -30*time.Second)
	n.waitReady(t, 503, 5*time.Second)
	notServing := n.scrape(t)
	if !strings.Contains(notServing, `firn_not_serving{cause="CLOCK_ROLLBACK",generator="default"} 1`) {
		t.Errorf("firn_not_serving{cause=CLOCK_ROLLBACK} is not 1 while not serving after a rollback:\n%s", grepLines(notServing, "firn_not_serving"))
	}
	if !strings.Contains(serving, `firn_not_serving{cause="CLOCK_ROLLBACK",generator="default"} 0`) {
		t.Errorf("firn_not_serving{cause=CLOCK_ROLLBACK} is not exported as 0 while serving:\n%s", grepLines(serving, "firn_not_serving"))
	}
	n.setOffset(t, 0)
	n.waitReady(t, 200, 10*time.Second)

	for name, text := range map[string]string{"serving": serving, "not serving": notServing} {
		if out, code := promtool(t, text, "check", "metrics"); code != 0 {
			t.Errorf("promtool check metrics on the %s scrape: exit %d\n%s", name, code, out)
		}
	}

	exposed := sampleNames(serving)
	used, recorded := usedMetrics(t)
	if len(used) < 20 {
		t.Fatalf("only %d metric names found in the rules and the dashboard: %v", len(used), sortedKeys(used))
	}
	for _, name := range sortedKeys(used) {
		if exposed[name] || recorded[name] || prometheusWritten[name] {
			continue
		}
		t.Errorf("metric %s is used by %v but a serving node does not expose it", name, used[name])
	}
	// The recording rules' outputs must not shadow a real metric name.
	for name := range recorded {
		if exposed[name] {
			t.Errorf("recording rule %s has the name of an exposed metric", name)
		}
	}
}

// TestProbesAnswer checks the endpoints the manifests, the Dockerfile and
// the compose file probe, on a real node: /healthz answers 200 while the
// node is not serving (liveness must not restart a node that failed
// closed), /readyz follows serving, and the image's health check binary
// agrees.
func TestProbesAnswer(t *testing.T) {
	n := startNode(t, true)
	n.waitReady(t, 200, 30*time.Second)
	base := "http://" + n.httpAddr
	if code := runHealthz(t, base+"/healthz"); code != 0 {
		t.Errorf("firn-healthz on a serving node: exit %d", code)
	}
	n.issue(t, 1)
	n.setOffset(t, -30*time.Second)
	n.waitReady(t, 503, 5*time.Second)
	if code, body, err := httpGet(base + "/healthz"); err != nil || code != 200 {
		t.Errorf("/healthz while not serving: %d %s %v (liveness would restart a node that failed closed)", code, body, err)
	}
	if code := runHealthz(t, base+"/healthz"); code != 0 {
		t.Errorf("firn-healthz on a node that failed closed: exit %d, want 0", code)
	}
	// The health check fails on what is not a healthy firn endpoint.
	if code := runHealthz(t, base+"/readyz"); code == 0 {
		t.Error("firn-healthz passed on /readyz answering 503")
	}
	if code := runHealthz(t, "http://"+closedAddr(t)+"/healthz"); code == 0 {
		t.Error("firn-healthz passed with nothing listening")
	}
	n.setOffset(t, 0)
	n.waitReady(t, 200, 10*time.Second)
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
