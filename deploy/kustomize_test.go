package deploy

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomizeBuild runs `kustomize build dir` with kustomize's own library
// and decodes every object it gives strictly.
func kustomizeBuild(t *testing.T, dir string) []any {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(k8sDir, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	var objs []any
	for i, d := range splitDocs(out) {
		o, err := decodeStrict(d)
		if err != nil {
			t.Fatalf("kustomize build %s, document %d: %v", dir, i+1, err)
		}
		objs = append(objs, o)
	}
	return objs
}

// Every kustomization builds, and what it builds decodes strictly: the
// patches apply to base objects, the overlays' environment and the names
// the TLS overlay writes its namespace into come out as the files say.
func TestKustomizeBuilds(t *testing.T) {
	for dir, want := range map[string]int{"base": 7, "zookeeper": 7, "tls": 10, "monitoring": 2, "tls/ca": 3, "tls/caller": 1} {
		if got := len(kustomizeBuild(t, dir)); got != want {
			t.Errorf("kustomize build %s: %d objects, want %d", dir, got, want)
		}
	}
	for _, o := range kustomizeBuild(t, "zookeeper") {
		if sts, ok := o.(*appsv1.StatefulSet); ok {
			env := map[string]bool{} // name → optional
			for _, e := range firnContainer(t, sts).Env {
				if r := e.ValueFrom; r != nil && r.ConfigMapKeyRef != nil {
					env[e.Name] = r.ConfigMapKeyRef.Optional != nil && *r.ConfigMapKeyRef.Optional
				}
			}
			if opt, ok := env["FIRN_ZOOKEEPER"]; !ok || opt || !env["FIRN_ETCD"] || env["FIRN_NTP"] {
				t.Errorf("the zookeeper overlay's env from firn-site (name → optional): %v", env)
			}
		}
	}
	k := loadTLSOverlay(t).kustomize
	for _, o := range kustomizeBuild(t, "tls") {
		c, ok := o.(*certmanagerv1.Certificate)
		if !ok || c.Name != "firn-node" {
			continue
		}
		for _, n := range c.Spec.DNSNames {
			if strings.Contains(n, namespacePlaceholder) {
				t.Errorf("built node certificate name %q still holds the placeholder", n)
			}
		}
		if !slices.Contains(c.Spec.DNSNames, "firn-clients."+k.Namespace+".svc") || !slices.Contains(c.Spec.DNSNames, "*.firn-headless."+k.Namespace+".svc.cluster.local") {
			t.Errorf("built node certificate names %v: want the overlay's namespace %s", c.Spec.DNSNames, k.Namespace)
		}
	}
}
