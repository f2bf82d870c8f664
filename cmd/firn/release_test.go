package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersion: `firn version` of a build with no version stamped and no
// VCS stamping (the test binary) says "dev" and the Go version.
func TestVersion(t *testing.T) {
	out, errOut, code := cli(t, nil, "version")
	if code != 0 || out != "firn dev "+runtime.Version()+"\n" {
		t.Fatalf("firn version: exit %d, stdout %q, stderr %q; want firn dev %s", code, out, errOut, runtime.Version())
	}
}

// TestReleaseScript: deploy/release.sh builds a static binary with the
// version stamped in and its checksum, and refuses a version that is not
// one. The image and the CHANGELOG cut are left out here (IMAGE=0,
// CUT_CHANGELOG=0): deploy/image_test.go builds and runs the image and
// checks the cut on a copy.
func TestReleaseScript(t *testing.T) {
	rev := gitHead(t)
	dir := t.TempDir()
	cmd := exec.Command("bash", "../../deploy/release.sh", "v0.0.0-test", dir)
	cmd.Env = append(os.Environ(), "ARCHS=amd64", "IMAGE=0", "CUT_CHANGELOG=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/release.sh: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "firn-v0.0.0-test-linux-amd64")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		t.Fatalf("%s: machine %v, want x86-64", bin, f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s asks for a dynamic loader: not static", bin)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("%s needs shared libraries %v", bin, libs)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "firn v0.0.0-test (revision "+rev) {
		t.Fatalf("%s version: %q, %v; want firn v0.0.0-test (revision %s…", bin, out, err, rev)
	}
	sum, err := os.ReadFile(bin + ".sha256")
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(sum)), "firn-v0.0.0-test-linux-amd64") {
		t.Fatalf("checksum file: %q, %v", sum, err)
	}

	// Without podman the script refuses to start unless told to leave the
	// image out: a release without its image is not a release.
	path := t.TempDir()
	dirname, err := exec.LookPath("dirname")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dirname, filepath.Join(path, "dirname")); err != nil {
		t.Fatal(err)
	}
	noPodman := exec.Command("bash", "../../deploy/release.sh", "v0.0.0-test", dir)
	noPodman.Env = append(os.Environ(), "PATH="+path, "CUT_CHANGELOG=0")
	if out, err := noPodman.CombinedOutput(); err == nil || !strings.Contains(string(out), "the image needs podman") {
		t.Fatalf("deploy/release.sh without podman: %v\n%s; want a refusal naming podman", err, out)
	}

	bad := exec.Command("bash", "../../deploy/release.sh", "latest", dir)
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "must look like v1.2.3") {
		t.Fatalf("deploy/release.sh latest: %v\n%s; want a refusal naming the form", err, out)
	}
}

func gitHead(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestBinaryImportsNoHarness: the shipped binary links no test harness —
// nothing under internal/testing/ or test/ (docs/design.md, Layout of
// the code) — for every build tag a release uses (none).
func TestBinaryImportsNoHarness(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const module = "github.com/firnid/firn/"
	seen := 0
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasPrefix(p, module) {
			continue
		}
		seen++
		rel := strings.TrimPrefix(p, module)
		if strings.HasPrefix(rel, "internal/testing/") || strings.HasPrefix(rel, "test/") {
			t.Errorf("the binary imports the harness %s", p)
		}
	}
	if seen < 5 {
		t.Fatalf("go list -deps named %d of firn's packages; want the binary's (output %q)", seen, out)
	}
}
