package deploy

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsyaml "sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite generated files (kubernetes/base/prometheusrule.yaml)")

const (
	k8sDir             = "kubernetes"
	prometheusRuleFile = "kubernetes/base/prometheusrule.yaml"
)

// kustomization is the part of kustomize's Kustomization these files use;
// decoded strictly like the API objects.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources,omitempty"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
	} `json:"labels,omitempty"`
	Patches []struct {
		Path string `json:"path"`
	} `json:"patches,omitempty"`
}

// newObject returns the typed object for apiVersion and kind.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "monitoring.coreos.com/v1 PodMonitor":
		return &monitoringv1.PodMonitor{}, nil
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &monitoringv1.PrometheusRule{}, nil
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		return &kustomization{}, nil
	case "cert-manager.io/v1 Certificate":
		return &certmanagerv1.Certificate{}, nil
	case "cert-manager.io/v1 Issuer":
		return &certmanagerv1.Issuer{}, nil
	}
	return nil, fmt.Errorf("no type for apiVersion %q kind %q", apiVersion, kind)
}

// splitDocs splits a multi-document YAML file.
func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), b...), []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// decodeStrict decodes one document into its API type, refusing unknown
// and duplicate fields.
func decodeStrict(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := sigsyaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	obj, err := newObject(tm.APIVersion, tm.Kind)
	if err != nil {
		return nil, err
	}
	if err := sigsyaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", tm.APIVersion, tm.Kind, err)
	}
	return obj, nil
}

// manifests decodes every YAML file under dir, keyed by file.
func manifests(t *testing.T, dir string) map[string][]any {
	t.Helper()
	out := map[string][]any{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, doc := range splitDocs(b) {
			obj, err := decodeStrict(doc)
			if err != nil {
				t.Errorf("%s document %d: %v", p, i+1, err)
				continue
			}
			out[p] = append(out[p], obj)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// base holds the decoded objects of kubernetes/base.
type base struct {
	sts       *appsv1.StatefulSet
	services  map[string]*corev1.Service
	config    *corev1.ConfigMap
	pdb       *policyv1.PodDisruptionBudget
	podMon    *monitoringv1.PodMonitor
	rule      *monitoringv1.PrometheusRule
	sa        *corev1.ServiceAccount
	kustomize *kustomization
}

func loadBase(t *testing.T) base {
	t.Helper()
	b := base{services: map[string]*corev1.Service{}}
	for file, objs := range manifests(t, filepath.Join(k8sDir, "base")) {
		for _, o := range objs {
			switch o := o.(type) {
			case *appsv1.StatefulSet:
				b.sts = o
			case *corev1.Service:
				b.services[o.Name] = o
			case *corev1.ConfigMap:
				b.config = o
			case *policyv1.PodDisruptionBudget:
				b.pdb = o
			case *monitoringv1.PodMonitor:
				b.podMon = o
			case *monitoringv1.PrometheusRule:
				b.rule = o
			case *corev1.ServiceAccount:
				b.sa = o
			case *kustomization:
				b.kustomize = o
			default:
				t.Errorf("%s: unexpected %T", file, o)
			}
		}
	}
	if b.sts == nil || b.config == nil || b.pdb == nil || b.podMon == nil || b.rule == nil || b.sa == nil || b.kustomize == nil || len(b.services) != 3 {
		t.Fatalf("kubernetes/base is missing objects: %+v", b)
	}
	return b
}

func TestKubernetesDecodeStrictly(t *testing.T) {
	all := manifests(t, k8sDir)
	if len(all) < 8 {
		t.Errorf("only %d manifest files under %s", len(all), k8sDir)
	}
	// Every file a kustomization names exists and is itself decoded above.
	for file, objs := range all {
		for _, o := range objs {
			k, ok := o.(*kustomization)
			if !ok {
				continue
			}
			for _, r := range append(append([]string{}, k.Resources...), patchPaths(k)...) {
				p := filepath.Join(filepath.Dir(file), r)
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s: %v", file, err)
				}
			}
		}
	}
}

func patchPaths(k *kustomization) []string {
	var out []string
	for _, p := range k.Patches {
		out = append(out, p.Path)
	}
	return out
}

// TestStrictDecodingRefusesUnknownFields keeps the decoding above honest.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(k8sDir, "base", "statefulset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(b, []byte("  replicas: 3\n"), []byte("  replicas: 3\n  replica: 3\n"), 1)
	if bytes.Equal(bad, b) {
		t.Fatal("statefulset.yaml has no `replicas: 3` line to corrupt")
	}
	if _, err := decodeStrict(bad); err == nil {
		t.Error("a StatefulSet with an unknown field decoded")
	}
	pm := []byte("apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata: {name: x}\nspec:\n  podMetricsEndpoint: []\n")
	if _, err := decodeStrict(pm); err == nil {
		t.Error("a PodMonitor with an unknown field decoded")
	}
}

// firnConfig parses the YAML config held by a ConfigMap and checks that
// every key is a serve flag.
func firnConfig(t *testing.T, cm *corev1.ConfigMap) map[string]any {
	t.Helper()
	text, ok := cm.Data["firn.yaml"]
	if !ok {
		t.Fatalf("ConfigMap %s has no firn.yaml", cm.Name)
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(text), &m); err != nil {
		t.Fatalf("ConfigMap %s firn.yaml: %v", cm.Name, err)
	}
	for k := range m {
		if !serveFlags[k] || k == "config" {
			t.Errorf("ConfigMap %s firn.yaml: key %q is not a `firn serve` flag", cm.Name, k)
		}
	}
	return m
}

func portOf(t *testing.T, addr any) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(fmt.Sprint(addr))
	if err != nil {
		t.Fatalf("address %v: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return int32(n)
}

func firnContainer(t *testing.T, sts *appsv1.StatefulSet) corev1.Container {
	t.Helper()
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == "firn" {
			return c
		}
	}
	t.Fatal("StatefulSet has no container named firn")
	return corev1.Container{}
}

func TestKubernetesStatefulSet(t *testing.T) {
	b := loadBase(t)
	sts, spec := b.sts, b.sts.Spec.Template.Spec
	c := firnContainer(t, sts)
	cfg := firnConfig(t, b.config)

	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", sts.Spec.Replicas)
	}
	podLabels := sts.Spec.Template.Labels
	matches := func(what string, sel map[string]string) {
		if len(sel) == 0 {
			t.Errorf("%s: empty selector", what)
		}
		for k, v := range sel {
			if podLabels[k] != v {
				t.Errorf("%s: selector %s=%s does not match the pod labels %v", what, k, v, podLabels)
			}
		}
	}
	matches("StatefulSet", sts.Spec.Selector.MatchLabels)
	matches("PodDisruptionBudget", b.pdb.Spec.Selector.MatchLabels)
	matches("PodMonitor", b.podMon.Spec.Selector.MatchLabels)
	for name, s := range b.services {
		matches("Service "+name, s.Spec.Selector)
	}
	headless := b.services[sts.Spec.ServiceName]
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("serviceName %q must be a headless Service publishing not-ready pods", sts.Spec.ServiceName)
	}
	// The clients' address: headless (every ready pod an endpoint of the
	// Go client's), ready pods only, with the gRPC port.
	clients := b.services["firn-clients"]
	if clients == nil || clients.Spec.ClusterIP != corev1.ClusterIPNone || clients.Spec.PublishNotReadyAddresses {
		t.Errorf("firn-clients must be a headless Service of ready pods only (the Go client's dns:/// address): %+v", clients)
	} else if len(clients.Spec.Ports) != 1 || clients.Spec.Ports[0].Port != 7300 {
		t.Errorf("firn-clients ports %+v, want gRPC 7300 only", clients.Spec.Ports)
	}
	if b.pdb.Spec.MaxUnavailable == nil || b.pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", b.pdb.Spec.MaxUnavailable)
	}

	// Flags: the args, and FIRN_* environment variables.
	checkArgs(t, "StatefulSet args", append(append([]string{}, c.Command...), c.Args...))
	nodeNameFromPod, advertisePodIP := false, false
	used := map[string]bool{} // $(NAME) references in FIRN_* values
	for _, e := range c.Env {
		for _, m := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(e.Value, -1) {
			used[m[1]] = true
		}
	}
	for _, e := range c.Env {
		f, ok := flagOfEnv(e.Name)
		if !ok && !used[e.Name] {
			t.Errorf("env %s is not FIRN_<FLAG> of a serve flag, nor used by one", e.Name)
		}
		if !ok && (e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "status.podIP") {
			t.Errorf("env %s (used by a FIRN_* value) should be the pod's IP", e.Name)
		}
		if f == "advertise-addr" && e.Value == "$(POD_IP):7300" {
			advertisePodIP = true
		}
		if f == "node-name" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			nodeNameFromPod = true
		}
	}
	if !advertisePodIP {
		t.Error("FIRN_ADVERTISE_ADDR must be $(POD_IP):7300: sequence generators name section owners by it, and the listener is a wildcard")
	}
	if !nodeNameFromPod {
		t.Error("FIRN_NODE_NAME does not come from the pod name (downward API metadata.name)")
	}

	// --config points at the ConfigMap's firn.yaml through a mount.
	cfgPath := argValue(c.Args, "config")
	if cfgPath == "" {
		t.Fatal("container args do not pass --config")
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == b.config.Name && cfgPath == filepath.Join(m.MountPath, "firn.yaml") {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("--config %s is not firn.yaml of ConfigMap %s mounted in the container", cfgPath, b.config.Name)
	}
	// The data dir is on the pod's persistent volume.
	onPVC := false
	for _, m := range c.VolumeMounts {
		for _, vct := range sts.Spec.VolumeClaimTemplates {
			if vct.Name == m.Name && m.MountPath == cfg["data-dir"] {
				onPVC = true
			}
		}
	}
	if !onPVC {
		t.Errorf("data-dir %v is not a volumeClaimTemplate mount", cfg["data-dir"])
	}

	// Ports and probes.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["grpc"] != portOf(t, cfg["grpc-addr"]) || ports["http"] != portOf(t, cfg["http-addr"]) {
		t.Errorf("container ports %v do not match grpc-addr %v / http-addr %v", ports, cfg["grpc-addr"], cfg["http-addr"])
	}
	for _, p := range b.podMon.Spec.PodMetricsEndpoints {
		if p.Port == nil || ports[*p.Port] == 0 || p.Path != "/metrics" {
			t.Errorf("PodMonitor endpoint %v %q: want a container port and /metrics", p.Port, p.Path)
		}
	}
	for name, s := range b.services {
		for _, p := range s.Spec.Ports {
			if p.TargetPort.Type != intstr.String || ports[p.TargetPort.StrVal] != p.Port {
				t.Errorf("Service %s port %s: targetPort %v, want a named container port of the same number", name, p.Name, p.TargetPort.String())
			}
		}
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"readiness", c.ReadinessProbe, "/readyz"},
		{"liveness", c.LivenessProbe, "/healthz"},
		{"startup", c.StartupProbe, "/healthz"},
	} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTP GET of %s", pr.name, pr.path)
			continue
		}
		g := pr.probe.HTTPGet
		if g.Path != pr.path || g.Port.Type != intstr.String || ports[g.Port.StrVal] != portOf(t, cfg["http-addr"]) {
			t.Errorf("%s probe: GET %s on port %s, want %s on the HTTP port", pr.name, g.Path, g.Port.String(), pr.path)
		}
	}

	// Drain: longer than the node's own shutdown timeout.
	shutdown, err := time.ParseDuration(fmt.Sprint(cfg["shutdown-timeout"]))
	if err != nil {
		t.Fatalf("shutdown-timeout: %v", err)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < shutdown+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v, want at least shutdown-timeout %v + 10s", g, shutdown)
	}
	// One firn node per Kubernetes node.
	aa := spec.Affinity
	if aa == nil || aa.PodAntiAffinity == nil || len(aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 ||
		aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "kubernetes.io/hostname" {
		t.Error("want required pod anti-affinity on kubernetes.io/hostname")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Error("want CPU and memory requests")
	}
	// Non-root, as the image's USER.
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Error("want runAsNonRoot and a non-zero runAsUser")
	} else if uid := dockerfileUID(t); *psc.RunAsUser != uid {
		t.Errorf("runAsUser %d, Dockerfile USER %d", *psc.RunAsUser, uid)
	}
}

func argValue(args []string, flagName string) string {
	for i, a := range args {
		n := strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(n, flagName+"="); ok {
			return v
		}
		if n == flagName && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// TestKubernetesConfigRunsOnRealNode runs `firn serve --config` with the
// ConfigMap's file, overriding only what cannot work here (the coordinator
// becomes a real local etcd, the addresses loopback, no NTP, and so, one
// node, --unchecked-clock-ok), and checks the node serves and answers the
// probes the StatefulSet uses.
func TestKubernetesConfigRunsOnRealNode(t *testing.T) {
	b := loadBase(t)
	c := firnContainer(t, b.sts)
	cfgFile := filepath.Join(t.TempDir(), "firn.yaml")
	if err := os.WriteFile(cfgFile, []byte(b.config.Data["firn.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	coord := startNode(t, true) // its embedded etcd is the coordinator
	n := startNode(t, false, "--config", cfgFile, "--etcd", coord.clientAddr, "--ntp=", "--unchecked-clock-ok", "--node-name", "firn-0")
	n.waitReady(t, 200, 30*time.Second)
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
		if code, body, err := httpGet("http://" + n.httpAddr + p.HTTPGet.Path); err != nil || code != 200 {
			t.Errorf("GET %s on a node running the ConfigMap's config: %d %s %v", p.HTTPGet.Path, code, body, err)
		}
	}
	if _, body, _ := httpGet("http://" + n.httpAddr + "/metrics"); !strings.Contains(grepLines(body, "firn_build_info{"), `cluster="prod"`) ||
		!strings.Contains(grepLines(body, "firn_build_info{"), `node="firn-0"`) {
		t.Errorf("the node did not take cluster and node name from the config and flags:\n%s", grepLines(body, "firn_build_info"))
	}
}

func TestKubernetesZooKeeperOverlay(t *testing.T) {
	objs := manifests(t, filepath.Join(k8sDir, "zookeeper"))
	var cm *corev1.ConfigMap
	var k *kustomization
	for _, os := range objs {
		for _, o := range os {
			switch o := o.(type) {
			case *corev1.ConfigMap:
				cm = o
			case *kustomization:
				k = o
			}
		}
	}
	if cm == nil || k == nil {
		t.Fatal("the zookeeper overlay needs a kustomization and a ConfigMap patch")
	}
	if !reflect.DeepEqual(k.Resources, []string{"../base"}) {
		t.Errorf("overlay resources %v, want [../base]", k.Resources)
	}
	b := loadBase(t)
	if cm.Name != b.config.Name {
		t.Errorf("overlay patches ConfigMap %s, base has %s", cm.Name, b.config.Name)
	}
	zk, et := firnConfig(t, cm), firnConfig(t, b.config)
	if zk["zookeeper"] == nil || zk["etcd"] != nil {
		t.Error("the overlay's config must name zookeeper and not etcd")
	}
	if et["etcd"] == nil || et["zookeeper"] != nil {
		t.Error("the base config must name etcd and not zookeeper")
	}
	for k, v := range et {
		if k == "etcd" || k == "etcd-prefix" {
			continue
		}
		if _, ok := zk[k]; !ok {
			t.Errorf("the overlay's config drops %s: %v", k, v)
		}
	}
}

// TestKubernetesPrometheusRule: the PrometheusRule holds exactly the rules
// of prometheus/firn-rules.yml (go test -run PrometheusRule -update
// rewrites it).
func TestKubernetesPrometheusRule(t *testing.T) {
	want := monitoringv1.PrometheusRule{
		TypeMeta:   metav1.TypeMeta{APIVersion: "monitoring.coreos.com/v1", Kind: "PrometheusRule"},
		ObjectMeta: metav1.ObjectMeta{Name: "firn", Labels: map[string]string{"app.kubernetes.io/name": "firn"}},
	}
	for _, g := range loadRules(t).Groups {
		og := monitoringv1.RuleGroup{Name: g.Name}
		for _, r := range g.Rules {
			or := monitoringv1.Rule{Record: r.Record, Alert: r.Alert, Expr: intstr.FromString(r.Expr), Labels: r.Labels, Annotations: r.Annotations}
			if r.For != 0 {
				d := monitoringv1.Duration(r.For.String())
				or.For = &d
			}
			og.Rules = append(og.Rules, or)
		}
		want.Spec.Groups = append(want.Spec.Groups, og)
	}
	if *update {
		out, err := sigsyaml.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		head := "# Generated from deploy/prometheus/firn-rules.yml by\n#   (cd deploy && go test -run TestKubernetesPrometheusRule -update)\n# Do not edit: edit the rules file and regenerate.\n"
		if err := os.WriteFile(prometheusRuleFile, append([]byte(head), out...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := loadBase(t).rule
	if !reflect.DeepEqual(got.Spec, want.Spec) {
		t.Errorf("%s differs from %s: run (cd deploy && go test -run TestKubernetesPrometheusRule -update)", prometheusRuleFile, rulesFile)
	}
}
