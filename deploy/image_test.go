package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The image's settings, as deploy/release.sh builds it and as the
// Kubernetes manifests run it. TestImage checks the built image has them,
// runs it with them, and checks the manifests say the same.
const (
	imageUID      = 65532
	imageDataDir  = "/var/lib/firn"
	imageGRPCPort = 7300
	imageHTTPPort = 7301
	imageBinary   = "/usr/local/bin/firn"
)

// releaseImage is the image the manifests name: the next release's,
// clients/VERSION with a v (the version every part of the repository is
// released at).
func releaseImage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "clients", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return "firn:v" + strings.TrimSpace(string(b))
}

// TestManifestsNameReleasedImage: the StatefulSet runs the released image
// by its version, never a moving tag.
func TestManifestsNameReleasedImage(t *testing.T) {
	c := firnContainer(t, loadBase(t).sts)
	if want := releaseImage(t); c.Image != want {
		t.Errorf("kubernetes/base/statefulset.yaml: image %q, want %q (the next release, clients/VERSION)", c.Image, want)
	}
}

// TestManifestsRunImageAsTested: the StatefulSet runs the image the way
// TestImage ran it: its user, a read-only root with the data dir a
// volume, the two ports, and the probes TestImage asked.
func TestManifestsRunImageAsTested(t *testing.T) {
	sts := loadBase(t).sts
	c := firnContainer(t, sts)
	psc := sts.Spec.Template.Spec.SecurityContext
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != imageUID || psc.RunAsGroup == nil || *psc.RunAsGroup != imageUID ||
		psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("pod securityContext %+v, want runAsNonRoot, runAsUser and runAsGroup %d (the image's USER)", psc, imageUID)
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("container securityContext: want readOnlyRootFilesystem, as the image test runs it")
	}
	dataMounted := false
	for _, m := range c.VolumeMounts {
		dataMounted = dataMounted || (m.MountPath == imageDataDir && !m.ReadOnly)
	}
	if !dataMounted {
		t.Errorf("no writable volume at %s, the image's data dir (the root is read-only)", imageDataDir)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["grpc"] != imageGRPCPort || ports["http"] != imageHTTPPort || len(ports) != 2 {
		t.Errorf("container ports %v, want grpc %d and http %d (the image's EXPOSE and FIRN_*_ADDR)", ports, imageGRPCPort, imageHTTPPort)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"readinessProbe", c.ReadinessProbe, "/readyz"},
		{"livenessProbe", c.LivenessProbe, "/healthz"},
		{"startupProbe", c.StartupProbe, "/healthz"},
	} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
			t.Errorf("%s: want an HTTP GET of %s on the http port (%d)", p.name, p.path, imageHTTPPort)
		}
	}
}

// podman runs podman with the runc runtime and a containers.conf that
// asks for no ulimits (the sandboxes these tests run in may not raise
// them; crun does not run here).
type podman struct {
	t    *testing.T
	conf string
}

func newPodman(t *testing.T) *podman {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("podman is not installed: test/run.sh installs it (apt-get install podman runc)")
	}
	conf := filepath.Join(t.TempDir(), "containers.conf")
	if err := os.WriteFile(conf, []byte("[containers]\ndefault_ulimits = []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &podman{t: t, conf: conf}
}

func (p *podman) env() []string { return append(os.Environ(), "CONTAINERS_CONF="+p.conf) }

// run returns podman's stdout, and its stderr with the error.
func (p *podman) run(args ...string) (string, error) {
	cmd := exec.Command("podman", append([]string{"--runtime", "runc"}, args...)...)
	cmd.Env = p.env()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

func (p *podman) must(args ...string) string {
	p.t.Helper()
	out, err := p.run(args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

// imageConfig is the part of `podman image inspect` the test reads.
type imageConfig struct {
	Architecture string
	Config       struct {
		User         string
		ExposedPorts map[string]struct{}
		Env          []string
		Entrypoint   []string
		Cmd          []string
		WorkingDir   string
		Volumes      map[string]struct{}
		StopSignal   string
		Labels       map[string]string
	}
}

// TestImage builds the image with deploy/release.sh (on a copy of
// CHANGELOG.md, whose cut it checks), loads it from the OCI archive the
// script wrote, and runs it under podman the way the Kubernetes manifests
// run it: as its own non-root user, the root file system read-only, the
// data dir a volume, no capabilities. The node reports the version, serves
// IDs on the host network, answers the probes, and stops cleanly on
// SIGTERM.
func TestImage(t *testing.T) {
	pm := newPodman(t)
	version := fmt.Sprintf("v0.0.0-imagetest.%d", os.Getpid())
	ref := "localhost/firn:" + version
	out := t.TempDir()
	changelog := filepath.Join(t.TempDir(), "CHANGELOG.md")
	orig, err := os.ReadFile(filepath.Join(repoRoot, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(changelog, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pm.run("rmi", "-f", ref) })

	rel := exec.Command("bash", "release.sh", version, out)
	rel.Env = append(pm.env(), "ARCHS="+runtime.GOARCH, "IMAGE_ARCH="+runtime.GOARCH, "CHANGELOG_FILE="+changelog)
	if b, err := rel.CombinedOutput(); err != nil {
		t.Fatalf("deploy/release.sh %s: %v\n%s", version, err, b)
	}

	// The CHANGELOG cut: Unreleased became the version's section, dated.
	cut, err := os.ReadFile(changelog)
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(version) + ` — \d{4}-\d{2}-\d{2}$`)
	if !heading.Match(cut) || strings.Contains(string(cut), "\n## Unreleased\n") ||
		strings.Replace(string(cut), heading.FindString(string(cut)), "## Unreleased", 1) != string(orig) {
		t.Errorf("release.sh did not rename `## Unreleased` to `## %s — DATE` and nothing else", version)
	}

	// The archive and its checksum; the image is the archive's, loaded.
	archive := filepath.Join(out, "firn-"+version+"-image-linux-"+runtime.GOARCH+".oci.tar")
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	sumFile, err := os.ReadFile(archive + ".sha256")
	if err != nil || string(sumFile) != hex.EncodeToString(sum[:])+"  "+filepath.Base(archive)+"\n" {
		t.Errorf("%s.sha256: %q, %v; want the archive's SHA-256", filepath.Base(archive), sumFile, err)
	}
	pm.must("rmi", "-f", ref)
	if loaded := pm.must("load", "-q", "-i", archive); !strings.Contains(loaded, ref) {
		t.Fatalf("podman load -i %s: %q, want %s", archive, loaded, ref)
	}

	var imgs []imageConfig
	if err := json.Unmarshal([]byte(pm.must("image", "inspect", ref)), &imgs); err != nil || len(imgs) != 1 {
		t.Fatalf("podman image inspect %s: %v (%d images)", ref, err, len(imgs))
	}
	img := imgs[0]
	cfg := img.Config
	want := fmt.Sprintf("%d:%d", imageUID, imageUID)
	if cfg.User != want {
		t.Errorf("image USER %q, want %q", cfg.User, want)
	}
	if !slices.Equal(cfg.Entrypoint, []string{imageBinary, "serve"}) || len(cfg.Cmd) != 0 {
		t.Errorf("image ENTRYPOINT %q CMD %q, want [%s serve] and no CMD (the manifests' args are serve's flags)", cfg.Entrypoint, cfg.Cmd, imageBinary)
	}
	ports := slices.Sorted(func(yield func(string) bool) {
		for p := range cfg.ExposedPorts {
			if !yield(p) {
				return
			}
		}
	})
	if !slices.Equal(ports, []string{strconv.Itoa(imageGRPCPort) + "/tcp", strconv.Itoa(imageHTTPPort) + "/tcp"}) {
		t.Errorf("image EXPOSE %v, want %d/tcp and %d/tcp", ports, imageGRPCPort, imageHTTPPort)
	}
	for _, e := range []string{"FIRN_DATA_DIR=" + imageDataDir,
		fmt.Sprintf("FIRN_GRPC_ADDR=0.0.0.0:%d", imageGRPCPort), fmt.Sprintf("FIRN_HTTP_ADDR=0.0.0.0:%d", imageHTTPPort)} {
		if !slices.Contains(cfg.Env, e) {
			t.Errorf("image ENV %q lacks %s", cfg.Env, e)
		}
	}
	if _, ok := cfg.Volumes[imageDataDir]; !ok || cfg.WorkingDir != imageDataDir {
		t.Errorf("image VOLUME %v WORKDIR %q, want %s for both", cfg.Volumes, cfg.WorkingDir, imageDataDir)
	}
	if cfg.StopSignal != "15" && cfg.StopSignal != "SIGTERM" {
		t.Errorf("image STOPSIGNAL %q, want SIGTERM", cfg.StopSignal)
	}
	if img.Architecture != runtime.GOARCH || cfg.Labels["org.opencontainers.image.version"] != version {
		t.Errorf("image architecture %q version label %q, want %s and %s", img.Architecture, cfg.Labels["org.opencontainers.image.version"], runtime.GOARCH, version)
	}

	checkDockerfileAgrees(t, img)

	// `firn version` in the container.
	v := pm.must("run", "--rm", "--network=none", "--entrypoint", imageBinary, ref, "version")
	if !strings.HasPrefix(v, "firn "+version+" ") {
		t.Errorf("firn version in the image: %q, want firn %s …", v, version)
	}

	// `firn serve` as the manifests run it, on the host network; the
	// listeners on free loopback ports (the image's 7300 and 7301 may be
	// taken on a shared machine), the coordinator the embedded etcd.
	name := "firn-imagetest-" + strconv.Itoa(os.Getpid())
	vol := name + "-data"
	t.Cleanup(func() {
		pm.run("rm", "-f", "-t", "0", name)
		pm.run("volume", "rm", "-f", vol)
	})
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	pm.must("run", "-d", "--name", name, "--network=host",
		"--read-only", "--read-only-tmpfs=false", "-v", vol+":"+imageDataDir,
		"--cap-drop=ALL", "--security-opt=no-new-privileges",
		ref,
		"--grpc-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--http-addr", httpAddr,
		"--embedded-client-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--embedded-peer-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	// The node logs to stderr, which `podman logs` gives on its own.
	logs := func() string {
		cmd := exec.Command("podman", "logs", name)
		cmd.Env = pm.env()
		l, _ := cmd.CombinedOutput()
		return string(l)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, _, err := httpGet("http://" + httpAddr + "/readyz")
		if err == nil && code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz of the container: %d, %v after 60 s\n%s", code, err, logs())
		}
		if st, _ := pm.run("inspect", "--format", "{{.State.Status}}", name); strings.TrimSpace(st) == "exited" {
			t.Fatalf("the container exited before it was ready:\n%s", logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, _, err := httpGet("http://" + httpAddr + "/healthz"); err != nil || code != 200 {
		t.Errorf("/healthz: %d, %v; want 200", code, err)
	}
	// The health command the image carries for runtimes that take one.
	if _, err := pm.run("exec", name, "/usr/local/bin/firn-healthz", "http://"+httpAddr+"/healthz"); err != nil {
		t.Errorf("firn-healthz in the container: %v", err)
	}
	code, body, err := httpGet("http://" + httpAddr + "/v1/ids?count=3")
	var ids struct{ IDs []string }
	if err != nil || code != 200 || json.Unmarshal([]byte(body), &ids) != nil || len(ids.IDs) != 3 {
		t.Fatalf("/v1/ids?count=3: %d %q %v; want three IDs", code, body, err)
	}
	for _, id := range ids.IDs {
		if n, err := strconv.ParseUint(id, 10, 64); err != nil || n == 0 {
			t.Errorf("/v1/ids: %q is not an ID", id)
		}
	}
	if ids.IDs[0] == ids.IDs[1] || ids.IDs[1] == ids.IDs[2] || ids.IDs[0] == ids.IDs[2] {
		t.Errorf("/v1/ids: %v repeats an ID", ids.IDs)
	}

	// The node's process, seen from the host: its user and its root.
	pid := strings.TrimSpace(pm.must("inspect", "--format", "{{.State.Pid}}", name))
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"Uid:", "Gid:"} {
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) == 5 && f[0] == field {
				for _, id := range f[1:] {
					if id != strconv.Itoa(imageUID) {
						t.Errorf("the node runs with %s, want %d throughout (never root)", line, imageUID)
						break
					}
				}
			}
		}
	}
	mounts, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	rootRO, dataRW := false, false
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		opts := strings.Split(f[5], ",")
		switch f[4] {
		case "/":
			rootRO = slices.Contains(opts, "ro")
		case imageDataDir:
			dataRW = slices.Contains(opts, "rw")
		}
	}
	if !rootRO || !dataRW {
		t.Errorf("the node's root read-only %v, %s writable %v; want both", rootRO, imageDataDir, dataRW)
	}

	// SIGTERM (the image's STOPSIGNAL): the node drains and exits 0, well
	// before podman would kill it.
	start := time.Now()
	pm.must("stop", "-t", "30", name)
	took := time.Since(start)
	exit := strings.TrimSpace(pm.must("inspect", "--format", "{{.State.ExitCode}}", name))
	l := logs()
	if exit != "0" || took >= 30*time.Second {
		t.Errorf("podman stop: exit code %s after %v; want 0, before the 30 s kill\n%s", exit, took, l)
	}
	for _, line := range []string{"signal received: draining", "lease released", "firn node stopped"} {
		if !strings.Contains(l, line) {
			t.Errorf("the node's log after SIGTERM lacks %q:\n%s", line, l)
		}
	}
}

// checkDockerfileAgrees: deploy/Dockerfile (the image built with Docker
// from source, for compose) runs the node as the released image does.
func checkDockerfileAgrees(t *testing.T, img imageConfig) {
	t.Helper()
	_, stages := parseDockerfile(t)
	final := stages[len(stages)-1]
	if u := final.last(t, "USER"); u != img.Config.User {
		t.Errorf("Dockerfile USER %q, released image %q", u, img.Config.User)
	}
	var entry []string
	if err := json.Unmarshal([]byte(final.last(t, "ENTRYPOINT")), &entry); err != nil || !slices.Equal(entry, img.Config.Entrypoint) {
		t.Errorf("Dockerfile ENTRYPOINT %q, released image %q", final.last(t, "ENTRYPOINT"), img.Config.Entrypoint)
	}
	if w := final.last(t, "WORKDIR"); w != img.Config.WorkingDir {
		t.Errorf("Dockerfile WORKDIR %q, released image %q", w, img.Config.WorkingDir)
	}
	for _, p := range strings.Fields(final.last(t, "EXPOSE")) {
		if !strings.Contains(p, "/") {
			p += "/tcp"
		}
		if _, ok := img.Config.ExposedPorts[p]; !ok || len(img.Config.ExposedPorts) != len(strings.Fields(final.last(t, "EXPOSE"))) {
			t.Errorf("Dockerfile EXPOSE %q, released image %v", final.last(t, "EXPOSE"), img.Config.ExposedPorts)
			break
		}
	}
	env := strings.Fields(final.last(t, "ENV"))
	if !slices.Equal(slices.Sorted(slices.Values(env)), slices.Sorted(slices.Values(img.Config.Env))) {
		t.Errorf("Dockerfile ENV %q, released image %q", env, img.Config.Env)
	}
}
