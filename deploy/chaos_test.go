package deploy

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sigsyaml "sigs.k8s.io/yaml"
)

// timeChaos is the subset of Chaos Mesh's TimeChaos the examples use,
// decoded strictly.
type timeChaos struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Mode     string `json:"mode"`
		Selector struct {
			Namespaces     []string          `json:"namespaces"`
			LabelSelectors map[string]string `json:"labelSelectors"`
		} `json:"selector"`
		ContainerNames []string `json:"containerNames"`
		ClockIDs       []string `json:"clockIds"`
		TimeOffset     string   `json:"timeOffset"`
		Duration       string   `json:"duration"`
	} `json:"spec"`
}

// The chaos suite's short and long steps: absorbed, and failed closed.
const (
	shortSkew = -300 * time.Millisecond
	longSkew  = -5 * time.Second
)

func TestTimeChaosExamples(t *testing.T) {
	b := loadBase(t)
	podLabels := b.sts.Spec.Template.Labels
	cfg := firnConfig(t, b.config)
	maxLead, err := time.ParseDuration(cfg["max-lead"].(string))
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]time.Duration{
		"chaos/timechaos-short.yaml": shortSkew,
		"chaos/timechaos-long.yaml":  longSkew,
	} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var tc timeChaos
		if err := sigsyaml.UnmarshalStrict(raw, &tc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if tc.APIVersion != "chaos-mesh.org/v1alpha1" || tc.Kind != "TimeChaos" {
			t.Errorf("%s: %s %s, want chaos-mesh.org/v1alpha1 TimeChaos", file, tc.APIVersion, tc.Kind)
		}
		off, err := time.ParseDuration(tc.Spec.TimeOffset)
		if err != nil || off != want {
			t.Errorf("%s: timeOffset %q, want %v", file, tc.Spec.TimeOffset, want)
		}
		if d, err := time.ParseDuration(tc.Spec.Duration); err != nil || d <= 0 {
			t.Errorf("%s: duration %q", file, tc.Spec.Duration)
		}
		for k, v := range tc.Spec.Selector.LabelSelectors {
			if podLabels[k] != v {
				t.Errorf("%s: selector %s=%s does not select firn pods", file, k, v)
			}
		}
		if len(tc.Spec.Selector.LabelSelectors) == 0 || strings.Join(tc.Spec.ContainerNames, ",") != "firn" || strings.Join(tc.Spec.ClockIDs, ",") != "CLOCK_REALTIME" {
			t.Errorf("%s: want firn pods' firn container and CLOCK_REALTIME only", file)
		}
		// The two game days sit on either side of max-lead.
		if absorbed := -off <= maxLead; absorbed != (want == shortSkew) {
			t.Errorf("%s: a %v step against max-lead %v: absorbed=%v", file, off, maxLead, absorbed)
		}
	}
}

// TestChronyConf: steps only at boot, slews after, leap seconds slewed.
func TestChronyConf(t *testing.T) {
	f, err := os.Open("chrony/chrony.conf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	directives := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "!") {
			continue
		}
		fields := strings.Fields(line)
		directives[fields[0]] = append(directives[fields[0]], strings.Join(fields[1:], " "))
	}
	ms := directives["makestep"]
	if len(ms) != 1 {
		t.Fatalf("want exactly one makestep, got %v", ms)
	}
	p := strings.Fields(ms[0])
	if len(p) != 2 {
		t.Fatalf("makestep %q: want threshold and limit", ms[0])
	}
	if limit, err := strconv.Atoi(p[1]); err != nil || limit <= 0 || limit > 10 {
		t.Errorf("makestep limit %q: want a small positive count (steps at boot only; -1 steps forever)", p[1])
	}
	if got := directives["leapsecmode"]; len(got) != 1 || got[0] != "slew" {
		t.Errorf("leapsecmode %v, want slew", got)
	}
	if n := len(directives["server"]) + len(directives["pool"]); n < 3 {
		t.Errorf("%d time sources, want at least 3", n)
	}
}
