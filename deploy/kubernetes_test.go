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

var update = flag.Bool("update", false, "rewrite generated files (kubernetes/monitoring/prometheusrule.yaml)")

const (
	k8sDir             = "kubernetes"
	prometheusRuleFile = "kubernetes/monitoring/prometheusrule.yaml"
)

// kustomization is the part of kustomize's Kustomization these files use;
// decoded strictly like the API objects.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources,omitempty"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
	} `json:"labels,omitempty"`
	Patches []struct {
		Path string `json:"path"`
	} `json:"patches,omitempty"`
	Replacements []replacement `json:"replacements,omitempty"`
}

// replacement is kustomize's: copy one field into fields of others.
type replacement struct {
	Source struct {
		Kind      string `json:"kind"`
		Name      string `json:"name"`
		FieldPath string `json:"fieldPath"`
	} `json:"source"`
	Targets []struct {
		Select struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"select"`
		FieldPaths []string `json:"fieldPaths"`
		Options    struct {
			Delimiter string `json:"delimiter"`
			Index     int    `json:"index"`
		} `json:"options"`
	} `json:"targets"`
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
	case "cert-manager.io/v1 ClusterIssuer":
		return &certmanagerv1.ClusterIssuer{}, nil
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

// nodes are the objects that run firn nodes, from the kustomize base or
// the rendered Helm chart: the same checks hold for both.
type nodes struct {
	sts      *appsv1.StatefulSet
	services map[string]*corev1.Service
	config   *corev1.ConfigMap
	pdb      *policyv1.PodDisruptionBudget
	sa       *corev1.ServiceAccount
}

// add takes o if it is one of the nodes' objects.
func (n *nodes) add(o any) bool {
	switch o := o.(type) {
	case *appsv1.StatefulSet:
		n.sts = o
	case *corev1.Service:
		n.services[o.Name] = o
	case *corev1.ConfigMap:
		n.config = o
	case *policyv1.PodDisruptionBudget:
		n.pdb = o
	case *corev1.ServiceAccount:
		n.sa = o
	default:
		return false
	}
	return true
}

func (n nodes) complete() bool {
	return n.sts != nil && n.config != nil && n.pdb != nil && n.sa != nil && len(n.services) == 3
}

// base holds the decoded objects of kubernetes/base.
type base struct {
	nodes
	kustomize *kustomization
}

func loadBase(t *testing.T) base {
	t.Helper()
	b := base{nodes: nodes{services: map[string]*corev1.Service{}}}
	for file, objs := range manifests(t, filepath.Join(k8sDir, "base")) {
		for _, o := range objs {
			if k, ok := o.(*kustomization); ok {
				b.kustomize = k
			} else if !b.add(o) {
				t.Errorf("%s: unexpected %T", file, o)
			}
		}
	}
	if !b.complete() || b.kustomize == nil {
		t.Fatalf("kubernetes/base is missing objects: %+v", b)
	}
	return b
}

// monitoring holds the decoded objects of kubernetes/monitoring.
type monitoring struct {
	podMon    *monitoringv1.PodMonitor
	rule      *monitoringv1.PrometheusRule
	kustomize *kustomization
}

func loadMonitoring(t *testing.T) monitoring {
	t.Helper()
	var m monitoring
	for file, objs := range manifests(t, filepath.Join(k8sDir, "monitoring")) {
		for _, o := range objs {
			switch o := o.(type) {
			case *monitoringv1.PodMonitor:
				m.podMon = o
			case *monitoringv1.PrometheusRule:
				m.rule = o
			case *kustomization:
				m.kustomize = o
			default:
				t.Errorf("%s: unexpected %T", file, o)
			}
		}
	}
	if m.podMon == nil || m.rule == nil || m.kustomize == nil {
		t.Fatalf("kubernetes/monitoring is missing objects: %+v", m)
	}
	return m
}

// The base applies on a cluster without the Prometheus Operator: no
// object of its API group is in it (or in the overlays built on it); the
// monitoring kustomization has them all.
func TestKubernetesBaseNeedsNoPrometheusOperator(t *testing.T) {
	for _, dir := range []string{"base", "zookeeper", "tls"} {
		for file, objs := range manifests(t, filepath.Join(k8sDir, dir)) {
			for _, o := range objs {
				switch o.(type) {
				case *monitoringv1.PodMonitor, *monitoringv1.PrometheusRule:
					t.Errorf("%s: a %T needs the Prometheus Operator's CRDs; it belongs in kubernetes/monitoring", file, o)
				}
			}
		}
	}
	for _, k := range []*kustomization{loadBase(t).kustomize} {
		for _, r := range k.Resources {
			if strings.Contains(r, "monitoring") || strings.Contains(r, "podmonitor") || strings.Contains(r, "prometheusrule") {
				t.Errorf("kubernetes/base lists %s: the base must apply without the Prometheus Operator", r)
			}
		}
	}
	m := loadMonitoring(t)
	if !reflect.DeepEqual(m.kustomize.Resources, []string{"podmonitor.yaml", "prometheusrule.yaml"}) {
		t.Errorf("kubernetes/monitoring resources %v, want the PodMonitor and the PrometheusRule only (no ../base)", m.kustomize.Resources)
	}
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
	checkNodes(t, loadBase(t).nodes, loadMonitoring(t).podMon)
}

// checkNodes checks what the base promises of the nodes' objects; podMon
// may be nil.
func checkNodes(t *testing.T, b nodes, podMon *monitoringv1.PodMonitor) {
	t.Helper()
	sts, spec := b.sts, b.sts.Spec.Template.Spec
	c := firnContainer(t, sts)
	cfg := firnConfig(t, b.config)
	if spec.ServiceAccountName != b.sa.Name || b.sa.AutomountServiceAccountToken == nil || *b.sa.AutomountServiceAccountToken ||
		spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("serviceAccountName %q (ServiceAccount %q): want it, with no token mounted", spec.ServiceAccountName, b.sa.Name)
	}

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
	if podMon != nil {
		matches("PodMonitor", podMon.Spec.Selector.MatchLabels)
	}
	for name, s := range b.services {
		matches("Service "+name, s.Spec.Selector)
	}
	headless := b.services[sts.Spec.ServiceName]
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("serviceName %q must be a headless Service publishing not-ready pods", sts.Spec.ServiceName)
	}
	// The clients' address: headless (every ready pod an endpoint of the
	// Go client's), ready pods only, with the gRPC port.
	clients := b.services[sts.Name+"-clients"]
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
	for _, p := range podMonEndpoints(podMon) {
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
		if path, _, _ := strings.Cut(g.Path, "?"); path != pr.path || g.Port.Type != intstr.String || ports[g.Port.StrVal] != portOf(t, cfg["http-addr"]) {
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
	csc := c.SecurityContext
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Error("want a read-only root filesystem and no privilege escalation")
	}
}

func podMonEndpoints(pm *monitoringv1.PodMonitor) []monitoringv1.PodMetricsEndpoint {
	if pm == nil {
		return nil
	}
	return pm.Spec.PodMetricsEndpoints
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
// ConfigMap's file and the container's environment (firn-site naming a
// real local etcd and no NTP), overriding only what cannot work here (the
// addresses loopback and, one node without NTP, --unchecked-clock-ok), and
// checks the node serves and answers the probes the StatefulSet uses.
func TestKubernetesConfigRunsOnRealNode(t *testing.T) {
	b := loadBase(t)
	c := firnContainer(t, b.sts)
	cfgFile := filepath.Join(t.TempDir(), "firn.yaml")
	if err := os.WriteFile(cfgFile, []byte(b.config.Data["firn.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	coord := startNode(t, true) // its embedded etcd is the coordinator
	// The container's environment as the kubelet makes it, the ConfigMap
	// firn-site naming this coordinator and no NTP server.
	env := podEnv(t, c, "firn-0", map[string]string{"etcd": coord.clientAddr, "ntp": ""})
	n := startNodeEnv(t, env, false, "--config", cfgFile, "--unchecked-clock-ok")
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

// podEnv is the environment the kubelet gives container c of pod podName
// (IP 127.0.0.1), with site as the data of the ConfigMap firn-site. A
// required key missing from site fails t: such a pod does not start.
func podEnv(t *testing.T, c corev1.Container, podName string, site map[string]string) []string {
	t.Helper()
	vals := map[string]string{}
	var env []string
	for _, e := range c.Env {
		v := e.Value
		switch from := e.ValueFrom; {
		case from == nil:
			v = regexp.MustCompile(`\$\(([A-Z_]+)\)`).ReplaceAllStringFunc(v, func(ref string) string { return vals[ref[2:len(ref)-1]] })
		case from.FieldRef != nil && from.FieldRef.FieldPath == "metadata.name":
			v = podName
		case from.FieldRef != nil && from.FieldRef.FieldPath == "status.podIP":
			v = "127.0.0.1"
		case from.ConfigMapKeyRef != nil && from.ConfigMapKeyRef.Name == "firn-site":
			sv, ok := site[from.ConfigMapKeyRef.Key]
			if !ok {
				if from.ConfigMapKeyRef.Optional != nil && *from.ConfigMapKeyRef.Optional {
					continue
				}
				t.Fatalf("env %s: the pod does not start without key %s of ConfigMap firn-site", e.Name, from.ConfigMapKeyRef.Key)
			}
			v = sv
		default:
			t.Fatalf("env %s: no value for %+v here", e.Name, from)
		}
		vals[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	return env
}

// The site's settings (the coordinator, NTP servers) are no example hosts
// written into the manifests but required keys of the ConfigMap firn-site
// the operator creates: a pod without them does not start, where an
// example host would start it against nothing (and an absent coordinator
// would give each pod its own embedded one, a separate ID space).
func TestKubernetesSiteSettingsRequired(t *testing.T) {
	// No example or guessed host anywhere in what is shipped.
	guessed := regexp.MustCompile(`(?i)example\.(org|com|net)|\.svc\.cluster\.local:\d+|ntp\d\.`)
	for _, dir := range []string{k8sDir, chartDir} {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".tpl")) {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range strings.Split(string(b), "\n") {
				if text := string(stripComments([]byte(l))); guessed.MatchString(text) {
					t.Errorf("%s:%d: a placeholder host in a shipped manifest: %s", p, i+1, strings.TrimSpace(l))
				}
			}
			return nil
		})
	}
	for _, v := range []struct {
		dir      string
		required []string // firn-site keys a pod cannot start without
		optional []string
	}{
		{"base", []string{"etcd", "ntp"}, nil},
		{"zookeeper", []string{"zookeeper", "ntp"}, []string{"etcd"}},
	} {
		b := loadBase(t)
		cfgs := []*corev1.ConfigMap{b.config}
		c := firnContainer(t, b.sts)
		if v.dir != "base" {
			for _, objs := range manifests(t, filepath.Join(k8sDir, v.dir)) {
				for _, o := range objs {
					switch o := o.(type) {
					case *corev1.ConfigMap:
						cfgs = append(cfgs, o)
					case *appsv1.StatefulSet:
						c = mergeEnv(c, firnContainer(t, o))
					}
				}
			}
		}
		for _, cm := range cfgs {
			for _, k := range []string{"etcd", "zookeeper", "ntp"} {
				if _, ok := firnConfig(t, cm)[k]; ok {
					t.Errorf("%s: ConfigMap %s sets %s: the site's value belongs in firn-site", v.dir, cm.Name, k)
				}
			}
		}
		refs := map[string]bool{} // firn-site key → optional
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil && e.ValueFrom.ConfigMapKeyRef.Name == "firn-site" {
				r := e.ValueFrom.ConfigMapKeyRef
				if f, _ := flagOfEnv(e.Name); f != r.Key {
					t.Errorf("%s: env %s from firn-site key %s: want the key named as the flag", v.dir, e.Name, r.Key)
				}
				refs[r.Key] = r.Optional != nil && *r.Optional
			}
		}
		for _, k := range v.required {
			if opt, ok := refs[k]; !ok || opt {
				t.Errorf("%s: key %s of firn-site must be a required (not optional) env source", v.dir, k)
			}
		}
		for _, k := range v.optional {
			if opt, ok := refs[k]; !ok || !opt {
				t.Errorf("%s: key %s of firn-site must be optional", v.dir, k)
			}
		}
		if len(refs) != len(v.required)+len(v.optional) {
			t.Errorf("%s: firn-site keys %v", v.dir, refs)
		}
	}
}

// mergeEnv applies a strategic-merge patch's env (merged by name) to c.
func mergeEnv(c, patch corev1.Container) corev1.Container {
	env := append([]corev1.EnvVar{}, c.Env...)
	for _, pe := range patch.Env {
		found := false
		for i := range env {
			if env[i].Name == pe.Name {
				env[i], found = pe, true
			}
		}
		if !found {
			env = append(env, pe)
		}
	}
	c.Env = env
	return c
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
	if !reflect.DeepEqual(k.Resources, []string{"../base"}) || !reflect.DeepEqual(patchPaths(k), []string{"configmap.yaml", "statefulset.yaml"}) {
		t.Errorf("overlay resources %v patches %v, want [../base] patched by configmap.yaml and statefulset.yaml", k.Resources, patchPaths(k))
	}
	b := loadBase(t)
	if cm.Name != b.config.Name {
		t.Errorf("overlay patches ConfigMap %s, base has %s", cm.Name, b.config.Name)
	}
	zk, et := firnConfig(t, cm), firnConfig(t, b.config)
	if zk["zookeeper-prefix"] == nil || zk["etcd-prefix"] != nil {
		t.Error("the overlay's config must set zookeeper-prefix and not etcd-prefix")
	}
	if et["etcd-prefix"] == nil || et["zookeeper-prefix"] != nil {
		t.Error("the base config must set etcd-prefix and not zookeeper-prefix")
	}
	for k, v := range et {
		if k == "etcd-prefix" {
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
	want := wantPrometheusRule(t)
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
	got := loadMonitoring(t).rule
	if !reflect.DeepEqual(got.Spec, want.Spec) {
		t.Errorf("%s differs from %s: run (cd deploy && go test -run TestKubernetesPrometheusRule -update)", prometheusRuleFile, rulesFile)
	}
}

// wantPrometheusRule is the PrometheusRule that holds exactly the rules of
// prometheus/firn-rules.yml.
func wantPrometheusRule(t *testing.T) monitoringv1.PrometheusRule {
	t.Helper()
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
	return want
}
