package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

const chartDir = "helm/firn"

// renderChart renders the chart as `helm install firn helm/firn -n
// namespace` does with the given values: Helm's own loader, value
// coalescing and template engine. It returns every rendered document.
func renderChart(namespace string, vals map[string]any) ([][]byte, error) {
	ch, err := loadChart()
	if err != nil {
		return nil, err
	}
	top, err := chartutil.ToRenderValues(ch, vals, common.ReleaseOptions{Name: "firn", Namespace: namespace, IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	out, err := engine.Engine{}.RenderWithContext(context.Background(), ch, top)
	if err != nil {
		return nil, err
	}
	files := make([]string, 0, len(out))
	for f := range out {
		if strings.HasSuffix(f, ".yaml") {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	var docs [][]byte
	for _, f := range files {
		docs = append(docs, splitDocs([]byte(out[f]))...)
	}
	return docs, nil
}

// loadChart loads the chart once: rendering does not change it.
var loadChart = sync.OnceValues(func() (chart.Charter, error) { return loader.Load(chartDir) })

// helmRelease holds a rendered chart's objects, each decoded strictly.
type helmRelease struct {
	nodes
	podMon *monitoringv1.PodMonitor
	rule   *monitoringv1.PrometheusRule
	certs  map[string]*certmanagerv1.Certificate
}

func renderRelease(t *testing.T, namespace string, vals map[string]any) helmRelease {
	t.Helper()
	docs, err := renderChart(namespace, vals)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	r := helmRelease{nodes: nodes{services: map[string]*corev1.Service{}}, certs: map[string]*certmanagerv1.Certificate{}}
	for i, d := range docs {
		o, err := decodeStrict(d)
		if err != nil {
			t.Fatalf("rendered document %d: %v\n%s", i+1, err, d)
		}
		switch o := o.(type) {
		case *monitoringv1.PodMonitor:
			r.podMon = o
		case *monitoringv1.PrometheusRule:
			r.rule = o
		case *certmanagerv1.Certificate:
			r.certs[o.Namespace+"/"+o.Name] = o
		default:
			if !r.add(o) {
				t.Errorf("rendered document %d: unexpected %T", i+1, o)
			}
		}
	}
	if !r.complete() {
		t.Fatalf("the rendered chart lacks objects: %+v", r)
	}
	return r
}

// values builds a values tree from dotted paths and values, as --set does.
func values(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		path := strings.Split(kv[i].(string), ".")
		at := m
		for _, p := range path[:len(path)-1] {
			next, ok := at[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				at[p] = next
			}
			at = next
		}
		at[path[len(path)-1]] = kv[i+1]
	}
	return m
}

// minimal are the values an install needs: the coordinator and NTP.
var minimal = []any{
	"coordinator.etcd.endpoints", []any{"https://etcd-a:2379", "https://etcd-b:2379", "https://etcd-c:2379"},
	"ntp.servers", []any{"ntp-a", "ntp-b"},
}

func with(kv ...any) map[string]any { return values(append(append([]any{}, minimal...), kv...)...) }

// The chart with only its required values renders the objects of the
// kustomize base, passing the same checks, with the same names and
// configuration keys, and no object of an optional CRD.
func TestHelmChartLikeBase(t *testing.T) {
	r := renderRelease(t, "apps", with())
	checkNodes(t, r.nodes, nil)
	if r.podMon != nil || r.rule != nil || len(r.certs) != 0 {
		t.Errorf("the defaults render objects of optional CRDs: %v %v %v", r.podMon, r.rule, r.certs)
	}
	b := loadBase(t)
	if r.sts.Name != b.sts.Name || r.config.Name != b.config.Name || !reflect.DeepEqual(sortedKeys(r.services), sortedKeys(b.services)) {
		t.Errorf("release firn names %s, %s, %v; the base %s, %s, %v", r.sts.Name, r.config.Name, sortedKeys(r.services), b.sts.Name, b.config.Name, sortedKeys(b.services))
	}
	cfg, base := firnConfig(t, r.config), firnConfig(t, b.config)
	for k := range base {
		if _, ok := cfg[k]; !ok {
			t.Errorf("the chart's config lacks %s, which the base sets", k)
		}
	}
	if fmt.Sprint(cfg["etcd"]) != "[https://etcd-a:2379 https://etcd-b:2379 https://etcd-c:2379]" || fmt.Sprint(cfg["ntp"]) != "[ntp-a ntp-b]" {
		t.Errorf("etcd %v ntp %v: want the values", cfg["etcd"], cfg["ntp"])
	}
	c, bc := firnContainer(t, r.sts), firnContainer(t, b.sts)
	if !reflect.DeepEqual(c.SecurityContext, bc.SecurityContext) || !reflect.DeepEqual(r.sts.Spec.Template.Spec.SecurityContext, b.sts.Spec.Template.Spec.SecurityContext) ||
		!reflect.DeepEqual(c.Resources, bc.Resources) || !reflect.DeepEqual(c.LivenessProbe, bc.LivenessProbe) ||
		!reflect.DeepEqual(c.ReadinessProbe, bc.ReadinessProbe) || !reflect.DeepEqual(c.StartupProbe, bc.StartupProbe) {
		t.Error("the chart's container differs from the base's in security context, resources or probes")
	}
	if want := "firn:" + chartAppVersion(t); c.Image != want {
		t.Errorf("image %q, want %q (the chart's appVersion)", c.Image, want)
	}
	if got := r.sts.Spec.Template.Spec.Containers[0].Args; !reflect.DeepEqual(got, bc.Args) {
		t.Errorf("args %v, the base's %v", got, bc.Args)
	}
	// A ZooKeeper ensemble instead of etcd.
	zk := firnConfig(t, renderRelease(t, "apps", values("coordinator.zookeeper.servers", []any{"zk-a:2181"}, "ntp.disabled", true)).config)
	if fmt.Sprint(zk["zookeeper"]) != "[zk-a:2181]" || zk["zookeeper-prefix"] == nil || zk["etcd"] != nil || zk["ntp"] != nil {
		t.Errorf("zookeeper values give config %v", zk)
	}
}

// chartAppVersion reads the chart's appVersion.
func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := sigsyaml.Unmarshal(b, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion %q: %v", c.AppVersion, err)
	}
	return c.AppVersion
}

// The chart runs the release the kustomize base runs: its appVersion is
// the tag of the base's image.
func TestHelmAppVersionIsTheBaseImageTag(t *testing.T) {
	c := firnContainer(t, loadBase(t).sts)
	_, tag, _ := strings.Cut(c.Image, ":")
	if v := chartAppVersion(t); tag != v {
		t.Errorf("Chart.yaml appVersion %q, kubernetes/base image %q: the same release, please", v, c.Image)
	}
}

// A value the chart cannot default, left unset or contradicted, fails
// the render with a message naming it.
func TestHelmRequiredValues(t *testing.T) {
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{values(), "coordinator.etcd.endpoints or coordinator.zookeeper.servers is required"},
		{values("ntp.servers", []any{"ntp-a"}), "coordinator.etcd.endpoints or coordinator.zookeeper.servers is required"},
		{values("coordinator.etcd.endpoints", []any{"https://etcd-a:2379"}), "ntp.servers is required"},
		{with("coordinator.zookeeper.servers", []any{"zk-a:2181"}), "coordinator.etcd.endpoints and coordinator.zookeeper.servers are both set"},
		{with("ntp.disabled", true), "ntp.servers is set and ntp.disabled is true"},
		{with("tls.enabled", true), "tls.issuerRef.name is required"},
		{with("readiness.generator", "msg"), `readiness.generator "msg" is not one of the generators [default]`},
		{with("generators", []any{}), "generators must name at least one generator"},
		{with("generators", []any{"snowflake"}), `generators: "snowflake" is not name=layout`},
		{with("tls.enabled", true, "tls.issuerRef.name", "ca", "tls.issuerRef.kind", "Issuer",
			"tls.callers", []any{map[string]any{"name": "orders-firn", "namespace": "orders", "commonName": "orders"}}),
			`tls.callers[0].namespace "orders": a caller in another namespace needs tls.issuerRef.kind ClusterIssuer`},
		{with("tls.enabled", true, "tls.issuerRef.name", "ca", "tls.callers", []any{map[string]any{"name": "orders-firn"}}),
			"tls.callers[0]: name and commonName are required"},
	} {
		_, err := renderChart("apps", tc.vals)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %v: error %v, want one saying %q", tc.vals, err, tc.want)
		}
	}
}

// The Prometheus Operator objects are off by default and on by value; the
// rules are those of prometheus/firn-rules.yml.
func TestHelmMonitoring(t *testing.T) {
	r := renderRelease(t, "apps", with("monitoring.podMonitor.enabled", true, "monitoring.prometheusRule.enabled", true,
		"monitoring.labels", map[string]any{"release": "kube-prometheus"}))
	if r.podMon == nil || r.rule == nil {
		t.Fatalf("monitoring on: PodMonitor %v, PrometheusRule %v", r.podMon, r.rule)
	}
	checkNodes(t, r.nodes, r.podMon)
	if want := wantPrometheusRule(t); !reflect.DeepEqual(r.rule.Spec, want.Spec) {
		t.Errorf("the chart's PrometheusRule differs from %s", rulesFile)
	}
	if r.podMon.Labels["release"] != "kube-prometheus" || r.rule.Labels["release"] != "kube-prometheus" {
		t.Error("monitoring.labels are not on the PodMonitor and the PrometheusRule")
	}
	only := renderRelease(t, "apps", with("monitoring.prometheusRule.enabled", true))
	if only.podMon != nil || only.rule == nil {
		t.Error("monitoring.prometheusRule.enabled alone must give the rule and no PodMonitor")
	}
}

// With TLS, in a namespace of the release's choosing: the node certificate
// names that namespace and no other; callers elsewhere get certificates
// from the same ClusterIssuer in their own namespaces; the mounts, paths
// and probes fit as in the kustomize overlay.
func TestHelmTLS(t *testing.T) {
	r := renderRelease(t, "apps", with("tls.enabled", true, "tls.issuerRef.name", "firn-ca", "tls.etcdIssuerRef.name", "etcd-ca",
		"tls.callers", []any{
			map[string]any{"name": "orders-firn", "namespace": "orders", "commonName": "orders-service"},
			map[string]any{"name": "local-firn", "commonName": "local-service"},
		},
		"monitoring.podMonitor.enabled", true))
	checkNodes(t, r.nodes, r.podMon)
	node := r.certs["/firn-node"]
	if node == nil {
		t.Fatalf("no node certificate among %v", sortedKeys(r.certs))
	}
	for _, n := range node.Spec.DNSNames {
		labels := strings.Split(strings.TrimPrefix(n, "*."), ".")
		if len(labels) > 1 && labels[1] != "apps" {
			t.Errorf("node certificate name %q: not in the release's namespace apps", n)
		}
	}
	for name := range r.services {
		if name == r.sts.Spec.ServiceName {
			name = "*." + name
		}
		for _, want := range []string{name, name + ".apps.svc", name + ".apps.svc.cluster.local"} {
			if !slices.Contains(node.Spec.DNSNames, want) {
				t.Errorf("the node certificate does not cover %s", want)
			}
		}
	}
	orders, local := r.certs["orders/orders-firn"], r.certs["apps/local-firn"]
	if orders == nil || local == nil || orders.Spec.CommonName != "orders-service" || orders.Spec.SecretName != "orders-firn-tls" {
		t.Fatalf("caller certificates: %v", sortedKeys(r.certs))
	}
	for key, c := range r.certs {
		ref := c.Spec.IssuerRef
		want := "firn-ca"
		if key == "/firn-etcd-client" {
			want = "etcd-ca"
		}
		if ref.Name != want || ref.Kind != "ClusterIssuer" {
			t.Errorf("Certificate %s: issuer %s %q, want ClusterIssuer %s", key, ref.Kind, ref.Name, want)
		}
	}
	// Mounts: every secret volume is a Certificate's, and the config's
	// files lie in them.
	c := firnContainer(t, r.sts)
	mountOf := map[string]string{}
	for _, v := range r.sts.Spec.Template.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		if r.certs["/"+strings.TrimSuffix(v.Secret.SecretName, "-tls")] == nil {
			t.Errorf("volume %s mounts secret %s, which no Certificate of the release writes", v.Name, v.Secret.SecretName)
		}
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				mountOf[v.Secret.SecretName] = m.MountPath
			}
		}
	}
	cfg := firnConfig(t, r.config)
	for key, secret := range map[string]string{"tls-cert": "firn-node-tls", "tls-key": "firn-node-tls", "tls-client-ca": "firn-node-tls",
		"etcd-ca": "firn-etcd-client-tls", "etcd-cert": "firn-etcd-client-tls", "etcd-key": "firn-etcd-client-tls"} {
		if p, _ := cfg[key].(string); mountOf[secret] == "" || !strings.HasPrefix(p, mountOf[secret]+"/") {
			t.Errorf("config %s = %q is not in the mount of secret %s", key, p, secret)
		}
	}
	if op := r.certs["/firn-operator"]; op == nil || fmt.Sprint(cfg["admin-names"]) != "["+op.Spec.CommonName+"]" {
		t.Errorf("admin-names %v must name the operator certificate", cfg["admin-names"])
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
		if p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("probe of %s does not speak HTTPS", p.HTTPGet.Path)
		}
	}
	if ep := r.podMon.Spec.PodMetricsEndpoints[0]; ep.Scheme == nil || strings.ToLower(string(*ep.Scheme)) != "https" || ep.TLSConfig == nil || ep.TLSConfig.CA.Secret == nil ||
		ep.TLSConfig.CA.Secret.Name != "firn-node-tls" || ep.TLSConfig.ServerName == nil || !slices.Contains(node.Spec.DNSNames, *ep.TLSConfig.ServerName) {
		t.Errorf("the PodMonitor must scrape over https, checking the nodes' CA and a name of their certificate: %+v", ep)
	}
	// Another namespace, another set of names: none is written in.
	other := renderRelease(t, "ids", with("tls.enabled", true, "tls.issuerRef.name", "firn-ca")).certs["/firn-node"]
	if other == nil || !slices.Contains(other.Spec.DNSNames, "firn-clients.ids.svc") || slices.Contains(other.Spec.DNSNames, "firn-clients.apps.svc") {
		t.Errorf("in namespace ids the node certificate names %v", other)
	}
}

// Two generators, the pods ready on the second: the probe asks for it,
// and a real node running the rendered configuration answers that probe.
func TestHelmGeneratorsAndReadiness(t *testing.T) {
	r := renderRelease(t, "apps", with("generators", []any{"default=snowflake", "dense=segment"}, "readiness.generator", "dense"))
	c := firnContainer(t, r.sts)
	if c.ReadinessProbe.HTTPGet.Path != "/readyz?generator=dense" {
		t.Errorf("readiness probe path %q, want /readyz?generator=dense", c.ReadinessProbe.HTTPGet.Path)
	}
	cfg := firnConfig(t, r.config)
	if fmt.Sprint(cfg["generator"]) != "[default=snowflake dense=segment]" {
		t.Errorf("generator %v", cfg["generator"])
	}
	if d := renderRelease(t, "apps", with()); firnContainer(t, d.sts).ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Error("by default the readiness probe is /readyz (the default generator)")
	}

	cfgFile := filepath.Join(t.TempDir(), "firn.yaml")
	if err := os.WriteFile(cfgFile, []byte(r.config.Data["firn.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	coord := startNode(t, true)
	n := startNodeEnv(t, podEnv(t, c, "firn-0", nil), false, "--config", cfgFile, "--etcd", coord.clientAddr, "--ntp=", "--unchecked-clock-ok")
	// The probe's own generator serves within seconds (the default one
	// may still wait out a previous holder's reservation: not this pod's
	// readiness).
	probe := "http://" + n.httpAddr + c.ReadinessProbe.HTTPGet.Path
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if code, _, _ := httpGet(probe); code == 200 {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("GET %s not 200 within 30 s:\n%s", probe, n.out)
		}
	}
	for path, want := range map[string]int{c.LivenessProbe.HTTPGet.Path: 200, "/readyz?generator=nope": 404} {
		if code, body, err := httpGet("http://" + n.httpAddr + path); err != nil || code != want {
			t.Errorf("GET %s on a node running the chart's config: %d %s %v, want %d", path, code, body, err, want)
		}
	}
	if _, body, _ := httpGet("http://" + n.httpAddr + "/metrics"); !regexp.MustCompile(`firn_serving\{[^}]*generator="dense"[^}]*\} 1`).MatchString(body) {
		t.Errorf("generator dense does not serve:\n%s", grepLines(body, "firn_serving"))
	}
}
