package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

const (
	runbookFile = "../docs/runbook.md"
	protoFile   = "../proto/firn/v1/firn.proto"
	runbookURL  = "https://github.com/firnid/firn/blob/main/docs/runbook.md#"
)

// runbookAnchors are the anchors of the runbook's headings, as a Markdown
// renderer makes them: lower case, spaces to hyphens, punctuation dropped
// (underscores and hyphens kept).
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		anchors[strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")] = true
	}
	return anchors
}

// errorReasons are the names of the proto's ErrorReason enum but its zero
// value: the causes a node reports.
func errorReasons(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(protoFile)
	if err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile(`(?s)enum ErrorReason \{(.*?)\n\}`).FindSubmatch(b)
	if body == nil {
		t.Fatalf("%s has no ErrorReason enum", protoFile)
	}
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^\s+([A-Z_]+) = (\d+);`).FindAllSubmatch(body[1], -1) {
		if string(m[2]) != "0" {
			out = append(out, string(m[1]))
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d ErrorReason values found in %s: %v", len(out), protoFile, out)
	}
	return out
}

// Every alert links a section of docs/runbook.md that exists; the link of
// FirnNodeNotServing, templated on the cause, has a section for every
// cause a node can report.
func TestEveryAlertLinksItsRunbookSection(t *testing.T) {
	anchors := runbookAnchors(t)
	causes := errorReasons(t)
	alerts := 0
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			u := r.Annotations["runbook_url"]
			frag, ok := strings.CutPrefix(u, runbookURL)
			if !ok {
				t.Errorf("alert %s: runbook_url %q does not point into %s", r.Alert, u, runbookURL)
				continue
			}
			targets := []string{frag}
			if strings.Contains(frag, "{{") {
				if frag != "{{ $labels.cause | toLower }}" {
					t.Errorf("alert %s: runbook_url fragment %q: the only template allowed is the cause", r.Alert, frag)
					continue
				}
				targets = nil
				for _, c := range causes {
					targets = append(targets, strings.ToLower(c))
				}
			}
			for _, a := range targets {
				if !anchors[a] {
					t.Errorf("alert %s links %s#%s, which has no section", r.Alert, runbookFile, a)
				}
			}
		}
	}
	if alerts < 10 {
		t.Fatalf("only %d alerts found", alerts)
	}
	// Every cause has its section even if no alert linked it.
	for _, c := range causes {
		if !anchors[strings.ToLower(c)] {
			t.Errorf("cause %s has no section in %s", c, runbookFile)
		}
	}
}
