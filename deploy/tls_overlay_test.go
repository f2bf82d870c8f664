package deploy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// tlsOverlay holds the decoded objects of kubernetes/tls, its CA
// (tls/ca) and its caller certificate (tls/caller).
type tlsOverlay struct {
	kustomize *kustomization
	config    *corev1.ConfigMap
	sts       *appsv1.StatefulSet
	certs     map[string]*certmanagerv1.Certificate
	ca        tlsDir
	caller    tlsDir
}

type tlsDir struct {
	kustomize *kustomization
	certs     map[string]*certmanagerv1.Certificate
	issuers   map[string]*certmanagerv1.ClusterIssuer
}

func loadTLSOverlay(t *testing.T) tlsOverlay {
	t.Helper()
	dir := filepath.Join(k8sDir, "tls")
	o := tlsOverlay{certs: map[string]*certmanagerv1.Certificate{}}
	sub := map[string]*tlsDir{filepath.Join(dir, "ca"): &o.ca, filepath.Join(dir, "caller"): &o.caller}
	for _, d := range sub {
		d.certs, d.issuers = map[string]*certmanagerv1.Certificate{}, map[string]*certmanagerv1.ClusterIssuer{}
	}
	for file, objs := range manifests(t, dir) {
		for _, obj := range objs {
			if d := sub[filepath.Dir(file)]; d != nil {
				switch x := obj.(type) {
				case *kustomization:
					d.kustomize = x
				case *certmanagerv1.Certificate:
					d.certs[x.Name] = x
				case *certmanagerv1.ClusterIssuer:
					d.issuers[x.Name] = x
				default:
					t.Errorf("%s: unexpected %T", file, obj)
				}
				continue
			}
			switch x := obj.(type) {
			case *kustomization:
				o.kustomize = x
			case *corev1.ConfigMap:
				o.config = x
			case *appsv1.StatefulSet:
				o.sts = x
			case *certmanagerv1.Certificate:
				o.certs[x.Name] = x
			default:
				t.Errorf("%s: unexpected %T", file, obj)
			}
		}
	}
	if o.kustomize == nil || o.config == nil || o.sts == nil || len(o.certs) == 0 ||
		o.ca.kustomize == nil || len(o.ca.issuers) == 0 || o.caller.kustomize == nil || len(o.caller.certs) != 1 {
		t.Fatalf("kubernetes/tls is missing objects: %+v", o)
	}
	return o
}

// The TLS overlay, decoded strictly: every patch names a base object;
// every Certificate's issuer is firn's CA, a ClusterIssuer (or the
// cluster's etcd issuer); the secrets the StatefulSet mounts are the ones
// the Certificates write; the config's file paths lie in those mounts; the
// node certificate covers every Service a client may use; the admin name
// is a certificate's; the probes speak HTTPS.
func TestKubernetesTLSOverlay(t *testing.T) {
	o := loadTLSOverlay(t)
	b := loadBase(t)
	if !reflect.DeepEqual(o.kustomize.Resources, []string{"../base", "certificates.yaml"}) {
		t.Errorf("overlay resources %v", o.kustomize.Resources)
	}
	if o.config.Name != b.config.Name || o.sts.Name != b.sts.Name {
		t.Errorf("patches name ConfigMap %s and StatefulSet %s; the base has %s and %s", o.config.Name, o.sts.Name, b.config.Name, b.sts.Name)
	}
	secrets := map[string]*certmanagerv1.Certificate{}
	for name, c := range o.certs {
		secrets[c.Spec.SecretName] = c
		ref := c.Spec.IssuerRef
		switch {
		case ref.Kind == "ClusterIssuer" && o.ca.issuers[ref.Name] != nil:
		case ref.Kind == "ClusterIssuer" && name == "firn-etcd-client":
			// The etcd cluster's own CA: provided by the cluster.
		default:
			t.Errorf("Certificate %s: issuer %s %q is not firn's CA (kubernetes/tls/ca)", name, ref.Kind, ref.Name)
		}
	}

	// Mounts: secret volumes of Certificates, mounted in the firn container.
	c := firnContainer(t, o.sts)
	mountOf := map[string]string{} // secret name → mount path
	for _, v := range o.sts.Spec.Template.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		if secrets[v.Secret.SecretName] == nil {
			t.Errorf("volume %s mounts secret %s, which no Certificate writes", v.Name, v.Secret.SecretName)
		}
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				mountOf[v.Secret.SecretName] = m.MountPath
			}
		}
	}
	cfg := firnConfig(t, o.config)
	inMount := func(key, secret string) {
		p, _ := cfg[key].(string)
		if dir := mountOf[secret]; dir == "" || !strings.HasPrefix(p, dir+"/") {
			t.Errorf("config %s = %q is not in the mount of secret %s (%q)", key, p, secret, dir)
		}
	}
	for _, k := range []string{"tls-cert", "tls-key", "tls-client-ca"} {
		inMount(k, "firn-node-tls")
	}
	for _, k := range []string{"etcd-ca", "etcd-cert", "etcd-key"} {
		inMount(k, "firn-etcd-client-tls")
	}
	admins, _ := cfg["admin-names"].([]any)
	if op := o.certs["firn-operator"]; op == nil || len(admins) == 0 || fmt.Sprint(admins[0]) != op.Spec.CommonName {
		t.Errorf("admin-names %v must name the firn-operator certificate", admins)
	}
	node := o.certs["firn-node"]
	if node == nil {
		t.Fatal("no Certificate firn-node")
	}
	for name := range b.services {
		if name == b.sts.Spec.ServiceName {
			name = "*." + name // each pod's name
		}
		for _, want := range []string{name, name + "." + namespacePlaceholder + ".svc"} {
			if !slices.Contains(node.Spec.DNSNames, want) {
				t.Errorf("the node certificate does not cover %s", want)
			}
		}
	}
	checkNamespaceReplacements(t, o.kustomize, node)
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("probe %+v does not speak HTTPS", p)
		}
	}
	// Every other key of the base config is kept.
	for k := range firnConfig(t, b.config) {
		if _, ok := cfg[k]; !ok {
			t.Errorf("the overlay's config drops %s", k)
		}
	}
}

// namespacePlaceholder stands for the namespace in the node certificate's
// names until the overlay's replacements write it in.
const namespacePlaceholder = "NAMESPACE"

// checkNamespaceReplacements: the node certificate's names carry no
// namespace of their own. Each qualified name (service.NAMESPACE.svc…) has
// the placeholder where the namespace goes, and the overlay's
// replacements write the overlay's namespace (the StatefulSet's, after
// kustomize's namespace transformer) into exactly those places.
func checkNamespaceReplacements(t *testing.T, k *kustomization, node *certmanagerv1.Certificate) {
	t.Helper()
	if k.Namespace == "" {
		t.Error("the overlay sets no namespace: the node certificate's names need one")
	}
	want := map[string]int{} // fieldPath → index of the namespace label
	for i, n := range node.Spec.DNSNames {
		labels := strings.Split(n, ".")
		at := 1
		if labels[0] == "*" {
			at = 2
		}
		if len(labels) <= at {
			continue // a short name: the caller's own namespace
		}
		if labels[at] != namespacePlaceholder {
			t.Errorf("node certificate name %q: label %d is %q, want %s (no namespace written into names)", n, at, labels[at], namespacePlaceholder)
		}
		want[fmt.Sprintf("spec.dnsNames.%d", i)] = at
	}
	got := map[string]int{}
	for _, r := range k.Replacements {
		if r.Source.FieldPath != "metadata.namespace" || r.Source.Kind != "StatefulSet" {
			continue
		}
		for _, tg := range r.Targets {
			if tg.Select.Kind != "Certificate" || tg.Select.Name != node.Name || tg.Options.Delimiter != "." {
				continue
			}
			for _, fp := range tg.FieldPaths {
				got[fp] = tg.Options.Index
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("replacements of the namespace into the node certificate: %v, want %v (field path → label)", got, want)
	}
}

// firn's CA is a ClusterIssuer whose Secret lies in cert-manager's
// namespace, so that a caller in any namespace gets a certificate from it
// (an Issuer signs in its own namespace only); the caller's certificate
// names no namespace (kubectl -n picks the caller's).
func TestKubernetesTLSCallersInOtherNamespaces(t *testing.T) {
	o := loadTLSOverlay(t)
	var caCert *certmanagerv1.Certificate
	for _, c := range o.ca.certs {
		if c.Spec.IsCA {
			caCert = c
		}
	}
	ca := o.ca.issuers["firn-ca"]
	if ca == nil || ca.Spec.CA == nil || caCert == nil || ca.Spec.CA.SecretName != caCert.Spec.SecretName {
		t.Fatal("ClusterIssuer firn-ca must sign with the CA certificate of kubernetes/tls/ca")
	}
	if caCert.Namespace != "cert-manager" || o.ca.kustomize.Namespace != "" {
		t.Errorf("the CA certificate's namespace %q (kustomization %q): want cert-manager, where a ClusterIssuer reads its Secret", caCert.Namespace, o.ca.kustomize.Namespace)
	}
	if ref := caCert.Spec.IssuerRef; ref.Kind != "ClusterIssuer" || o.ca.issuers[ref.Name] == nil || o.ca.issuers[ref.Name].Spec.SelfSigned == nil {
		t.Errorf("the CA certificate's issuer %+v: want the self-signed ClusterIssuer of kubernetes/tls/ca", ref)
	}
	for _, c := range o.caller.certs {
		if ref := c.Spec.IssuerRef; ref.Kind != "ClusterIssuer" || ref.Name != "firn-ca" {
			t.Errorf("caller certificate %s: issuer %s %q, want ClusterIssuer firn-ca", c.Name, ref.Kind, ref.Name)
		}
		if c.Namespace != "" || o.caller.kustomize.Namespace != "" {
			t.Errorf("caller certificate %s names namespace %q: it is made in the caller's", c.Name, c.Namespace+o.caller.kustomize.Namespace)
		}
		if !reflect.DeepEqual(c.Spec.Usages, []certmanagerv1.KeyUsage{certmanagerv1.UsageClientAuth}) || c.Spec.CommonName == "" {
			t.Errorf("caller certificate %s: usages %v, name %q; want client auth and a name", c.Name, c.Spec.Usages, c.Spec.CommonName)
		}
	}
	for name, c := range o.certs {
		if c.Spec.IssuerRef.Kind == "Issuer" {
			t.Errorf("Certificate %s: a namespaced Issuer cannot sign for callers elsewhere", name)
		}
	}
}

// callerName is the commonName of the caller certificate of tls/caller.
func callerName(t *testing.T, o tlsOverlay) string {
	for _, c := range o.caller.certs {
		return c.Spec.CommonName
	}
	t.Fatal("no caller certificate")
	return ""
}

// The overlay's configuration runs: a node started with it (the mounted
// files replaced by certificates of a throw-away CA with the same names,
// the coordinator by a local one) serves over mTLS, answers the probes
// over HTTPS without a client certificate, refuses IDs without one, and
// lets the operator's certificate — not a caller's — resume.
func TestKubernetesTLSConfigRunsOnRealNode(t *testing.T) {
	o := loadTLSOverlay(t)
	dir := t.TempDir()
	caller := callerName(t, o)
	pki := writePKI(t, dir, "firn-operator", caller)
	text := strings.ReplaceAll(o.config.Data["firn.yaml"], "/etc/firn-tls/node/", dir+"/")
	cfgFile := filepath.Join(dir, "firn.yaml")
	if err := os.WriteFile(cfgFile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	coord := startNode(t, true)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(firnBin, "serve", "--config", cfgFile, "--data-dir", t.TempDir(),
		"--grpc-addr", "127.0.0.1:0", "--http-addr", httpAddr, "--ntp=", "--unchecked-clock-ok", "--node-name", "firn-0",
		"--etcd", coord.clientAddr, "--etcd-ca=", "--etcd-cert=", "--etcd-key=")
	out := newLockedBuffer()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("node output:\n%s", out)
		}
	})
	client := func(cn string) *http.Client {
		tc := &tls.Config{RootCAs: pki.roots, MinVersion: tls.VersionTLS12}
		if cn != "" {
			tc.Certificates = []tls.Certificate{pki.clients[cn]}
		}
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	}
	get := func(c *http.Client, path string) int {
		resp, err := c.Get("https://" + httpAddr + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	anon := client("")
	for start := time.Now(); get(anon, "/readyz") != 200; time.Sleep(100 * time.Millisecond) {
		select {
		case <-done:
			t.Fatalf("the node exited:\n%s", out)
		default:
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("/readyz over HTTPS not 200 within 30 s")
		}
	}
	for path, want := range map[string]int{"/healthz": 200, "/metrics": 200, "/v1/ids": 403} {
		if code := get(anon, path); code != want {
			t.Errorf("GET %s without a client certificate: %d, want %d", path, code, want)
		}
	}
	if code := get(client(caller), "/v1/ids"); code != 200 {
		t.Errorf("GET /v1/ids with a caller's certificate: %d", code)
	}
	post := func(c *http.Client) int {
		resp, err := c.Post("https://"+httpAddr+"/admin/resume", "text/plain", nil)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(client(caller)); code != 403 {
		t.Errorf("POST /admin/resume as a caller: %d, want 403", code)
	}
	if code := post(client("firn-operator")); code != 200 {
		t.Errorf("POST /admin/resume as the operator: %d, want 200", code)
	}
}

// pki is a throw-away CA with a server certificate for 127.0.0.1 written
// as cert-manager names them (tls.crt, tls.key, ca.crt) and client pairs.
type pki struct {
	roots   *x509.CertPool
	clients map[string]tls.Certificate
}

func writePKI(t *testing.T, dir string, clientCNs ...string) pki {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<33, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage) ([]byte, []byte) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<33, 0), ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(k)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	}
	crt, k := issue(2, "firn", x509.ExtKeyUsageServerAuth)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": k, "ca.crt": caPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := pki{roots: x509.NewCertPool(), clients: map[string]tls.Certificate{}}
	p.roots.AddCert(ca)
	for i, cn := range clientCNs {
		c, k := issue(int64(10+i), cn, x509.ExtKeyUsageClientAuth)
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		p.clients[cn] = pair
	}
	return p
}
