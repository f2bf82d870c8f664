package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const composeDir = "compose"

// composeFile is the part of the Compose specification compose.yaml uses;
// anything else is refused, except top-level x- extension fields.
type composeFile struct {
	Name       string                    `yaml:"name"`
	Services   map[string]composeService `yaml:"services"`
	Volumes    map[string]*struct{}      `yaml:"volumes"`
	Extensions map[string]any            `yaml:",inline"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Restart         string            `yaml:"restart"`
	Command         []string          `yaml:"command"`
	Environment     map[string]string `yaml:"environment"`
	Ports           []string          `yaml:"ports"`
	Volumes         []string          `yaml:"volumes"`
	DependsOn       []string          `yaml:"depends_on"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
}

// loadCompose resolves anchors and merge keys, then decodes the result
// strictly.
func loadCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(composeDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := yaml.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	resolved, err := yaml.Marshal(generic)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(resolved))
	dec.KnownFields(true)
	var c composeFile
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for k := range c.Extensions {
		if !strings.HasPrefix(k, "x-") {
			t.Errorf("compose.yaml: unknown top-level key %q", k)
		}
	}
	return c
}

// mount splits "src:dst[:ro]".
func mount(v string) (src, dst string) {
	parts := strings.Split(v, ":")
	return parts[0], parts[1]
}

func TestCompose(t *testing.T) {
	c := loadCompose(t)
	want := []string{"etcd-1", "etcd-2", "etcd-3", "firn-1", "firn-2", "firn-3", "grafana", "prometheus"}
	if got := sortedKeys(c.Services); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("services %v, want %v", got, want)
	}
	nodeNames := map[string]bool{}
	for name, s := range c.Services {
		// Images other than firn's are pinned by digest.
		if s.Build == nil && !digestRef.MatchString(s.Image) {
			t.Errorf("service %s: image %q is not pinned by digest", name, s.Image)
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("service %s: port %s is not published on 127.0.0.1 only", name, p)
			}
		}
		for _, v := range s.Volumes {
			src, _ := mount(v)
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join(composeDir, src)); err != nil {
					t.Errorf("service %s: bind mount %s: %v", name, src, err)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("service %s: volume %s is not declared", name, src)
			}
		}
		for _, d := range s.DependsOn {
			if _, ok := c.Services[d]; !ok {
				t.Errorf("service %s depends on unknown %s", name, d)
			}
		}
		if !strings.HasPrefix(name, "firn-") {
			continue
		}
		// firn nodes: built from deploy/Dockerfile, real serve flags,
		// every etcd member, distinct names, data on a volume.
		if s.Build == nil || filepath.Clean(filepath.Join(composeDir, s.Build.Context)) != filepath.Clean(repoRoot) || s.Build.Dockerfile != "deploy/Dockerfile" {
			t.Errorf("service %s: want build from the repository root with deploy/Dockerfile, got %+v", name, s.Build)
		}
		checkArgs(t, "service "+name, s.Command)
		for k := range s.Environment {
			if _, ok := flagOfEnv(k); !ok {
				t.Errorf("service %s: environment %s is not FIRN_<FLAG>", name, k)
			}
		}
		nodeNames[argValue(s.Command, "node-name")] = true
		etcd := strings.Split(argValue(s.Command, "etcd"), ",")
		sort.Strings(etcd)
		if strings.Join(etcd, ",") != "http://etcd-1:2379,http://etcd-2:2379,http://etcd-3:2379" {
			t.Errorf("service %s: --etcd %v, want all three members", name, etcd)
		}
		onVolume := false
		for _, v := range s.Volumes {
			if _, dst := mount(v); dst == "/var/lib/firn" {
				onVolume = true
			}
		}
		if !onVolume {
			t.Errorf("service %s: the data dir /var/lib/firn is not on a volume", name)
		}
	}
	if len(nodeNames) != 3 || nodeNames[""] {
		t.Errorf("firn node names %v, want three distinct --node-name values", sortedKeys(nodeNames))
	}
	for i := 1; i <= 3; i++ {
		cmd := c.Services["etcd-"+string(rune('0'+i))].Command
		if !strings.Contains(argValue(cmd, "initial-cluster"), "etcd-1=http://etcd-1:2380,etcd-2=http://etcd-2:2380,etcd-3=http://etcd-3:2380") {
			t.Errorf("etcd-%d: --initial-cluster does not list the three members", i)
		}
	}
}

// TestComposePrometheus lays out Prometheus's /etc/prometheus as the
// compose mounts make it, and has promtool check the configuration and
// the rules it loads from there.
func TestComposePrometheus(t *testing.T) {
	c := loadCompose(t)
	root := t.TempDir()
	var configPath string
	for _, v := range c.Services["prometheus"].Volumes {
		src, dst := mount(v)
		if !strings.HasPrefix(src, ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(composeDir, src))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, dst)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if dst == "/etc/prometheus/prometheus.yml" {
			configPath = p
		}
	}
	if configPath == "" || argValue(c.Services["prometheus"].Command, "config.file") != "/etc/prometheus/prometheus.yml" {
		t.Fatal("prometheus: /etc/prometheus/prometheus.yml is not mounted and used")
	}
	out, code := promtool(t, "", "check", "config", configPath)
	if code != 0 {
		t.Fatalf("promtool check config: exit %d\n%s", code, out)
	}
	rules := 0
	for _, g := range loadRules(t).Groups {
		rules += len(g.Rules)
	}
	if !strings.Contains(out, "SUCCESS: "+strconv.Itoa(rules)+" rules found") {
		t.Errorf("Prometheus in compose does not load firn's %d rules:\n%s", rules, out)
	}
	// It scrapes every firn node on its HTTP port.
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	b, _ := os.ReadFile(configPath)
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				targets[tg] = true
			}
		}
	}
	for name := range c.Services {
		if strings.HasPrefix(name, "firn-") && !targets[name+":7301"] {
			t.Errorf("Prometheus does not scrape %s:7301", name)
		}
	}
}

var dockerfileHTTPAddr = regexp.MustCompile(`FIRN_HTTP_ADDR=0\.0\.0\.0:7301`)

// TestComposeGrafana: the datasource points at the compose Prometheus and
// the dashboard provider reads the directory where firn.json is mounted.
func TestComposeGrafana(t *testing.T) {
	c := loadCompose(t)
	g := c.Services["grafana"]
	var dashDir, provDir string
	for _, v := range g.Volumes {
		src, dst := mount(v)
		switch {
		case filepath.Clean(filepath.Join(composeDir, src)) == filepath.Clean(dashboardFile):
			dashDir = filepath.Dir(dst)
		case dst == "/etc/grafana/provisioning":
			provDir = filepath.Join(composeDir, src)
		}
	}
	if dashDir == "" || provDir == "" {
		t.Fatalf("grafana: want ../grafana/firn.json and the provisioning directory mounted (got %v)", g.Volumes)
	}
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name, UID, Type, Access, URL string
			IsDefault                    bool `yaml:"isDefault"`
			Editable                     bool `yaml:"editable"`
		} `yaml:"datasources"`
	}
	strictYAML(t, filepath.Join(provDir, "datasources", "prometheus.yml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" || !ds.Datasources[0].IsDefault {
		t.Errorf("datasource %+v: want the default prometheus at http://prometheus:9090", ds.Datasources)
	}
	var dp struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name, Folder, Type    string
			DisableDeletion       bool `yaml:"disableDeletion"`
			AllowUIUpdates        bool `yaml:"allowUiUpdates"`
			UpdateIntervalSeconds int  `yaml:"updateIntervalSeconds"`
			Options               struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	strictYAML(t, filepath.Join(provDir, "dashboards", "firn.yml"), &dp)
	if len(dp.Providers) != 1 || dp.Providers[0].Type != "file" || dp.Providers[0].Options.Path != dashDir {
		t.Errorf("dashboard provider %+v: want a file provider reading %s", dp.Providers, dashDir)
	}
	if home := g.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" && filepath.Dir(home) != dashDir {
		t.Errorf("home dashboard %s is not the mounted firn.json", home)
	}
	b, _ := os.ReadFile(dockerfile)
	if !dockerfileHTTPAddr.Match(b) {
		t.Error("the image no longer listens for HTTP on 0.0.0.0:7301, which compose and Prometheus expect")
	}
}

// strictYAML decodes a YAML file refusing unknown fields (keys match
// field names case-insensitively unless tagged).
func strictYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
