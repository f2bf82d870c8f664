package install

import (
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

const (
	repoRoot     = "../.."
	nodeModule   = "github.com/firnid/firn"
	clientModule = "github.com/firnid/firn/client"
	// testVersion is the version the test tags the node's module at in
	// its proxy; the client module is tagged at the version go.mod
	// requires.
	testVersion = "v0.1.0-installtest"
)

// requiredClient reads the version of the client module the node's go.mod
// requires, and fails on a replace directive there: `go install
// …@version` refuses a module whose go.mod has one.
func requiredClient(t *testing.T) string {
	t.Helper()
	path := filepath.Join(repoRoot, "go.mod")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse(path, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range f.Replace {
		t.Errorf("go.mod: replace %s => %s: `go install %s/cmd/firn@VERSION` refuses a module with a replace directive; put it in go.work",
			r.Old.Path, r.New.Path, nodeModule)
	}
	for _, r := range f.Require {
		if r.Mod.Path == clientModule {
			return r.Mod.Version
		}
	}
	t.Fatalf("go.mod does not require %s", clientModule)
	return ""
}

// TestGoWorkReplacesRequiredClient: in a clone the workspace builds the
// node against client/, at the very version go.mod requires (a workspace
// module does not stand in for a version required of it; before the
// client is tagged, a build would ask the module proxy for it and fail).
func TestGoWorkReplacesRequiredClient(t *testing.T) {
	want := requiredClient(t)
	path := filepath.Join(repoRoot, "go.work")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := modfile.ParseWork(path, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	uses := map[string]bool{}
	var paths []string
	for _, u := range w.Use {
		uses[filepath.Clean(u.Path)] = true
		paths = append(paths, u.Path)
	}
	if !uses["."] || !uses["client"] || len(uses) != 2 {
		t.Errorf("go.work uses %q, want . and ./client (deploy/ stands alone)", paths)
	}
	found := false
	for _, r := range w.Replace {
		if r.Old.Path != clientModule {
			continue
		}
		found = true
		if r.Old.Version != want || filepath.Clean(r.New.Path) != "client" {
			t.Errorf("go.work: replace %s %s => %s, want %s %s => ./client (the version go.mod requires)",
				r.Old.Path, r.Old.Version, r.New.Path, clientModule, want)
		}
	}
	if !found {
		t.Errorf("go.work does not replace %s %s with ./client", clientModule, want)
	}
}

// TestGoInstallFromProxy installs the node the way a user does, `go
// install github.com/firnid/firn/cmd/firn@VERSION` from a directory outside
// any module, against a module proxy this test writes: the node's module
// (this working tree) tagged at testVersion and the client module (client/)
// at the version go.mod requires. Third-party modules come from the
// machine's module cache, read as a proxy, then from GOPROXY; a fresh
// module cache keeps the tagged test modules out of the real one, and
// -trimpath keeps the build cache's entries for the dependencies valid
// there.
func TestGoInstallFromProxy(t *testing.T) {
	clientVersion := requiredClient(t)
	proxy := t.TempDir()
	writeModule(t, proxy, clientModule, clientVersion, filepath.Join(repoRoot, "client"))
	writeModule(t, proxy, nodeModule, testVersion, repoRoot)

	cache := goEnv(t, "GOMODCACHE")
	proxies := "file://" + proxy + ",file://" + filepath.Join(cache, "cache", "download")
	if p := goEnv(t, "GOPROXY"); p != "" && p != "off" {
		proxies += "," + p
	}
	tmp := t.TempDir()
	outside := filepath.Join(tmp, "outside")
	gobin := filepath.Join(tmp, "bin")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "install", "-trimpath", nodeModule+"/cmd/firn@"+testVersion)
	cmd.Dir = outside
	cmd.Env = append(os.Environ(),
		"GOWORK=off",
		"GOBIN="+gobin,
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOPROXY="+proxies,
		// The tagged test modules are in no checksum database.
		"GONOSUMDB=github.com/firnid",
		// A module cache the test's cleanup can remove.
		"GOFLAGS=-modcacherw",
		"CGO_ENABLED=0",
	)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s/cmd/firn@%s: %v\n%s", nodeModule, testVersion, err, out)
	}
	out, err := exec.Command(filepath.Join(gobin, "firn"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "firn "+testVersion+" ") {
		t.Fatalf("installed firn version: %q, %v; want firn %s …", out, err, testVersion)
	}
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// writeModule puts module path at version into the file-based proxy
// (GOPROXY=file://dir): @v/list, .info, .mod and the .zip of the files in
// dir that git tracks or would (untracked and not ignored). The zip leaves
// out nested modules, as a tag's zip does.
func writeModule(t *testing.T, proxy, path, version, dir string) {
	t.Helper()
	esc, err := module.EscapePath(path)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := module.EscapeVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	vdir := filepath.Join(proxy, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]string{"Version": version, "Time": "2026-01-01T00:00:00Z"})
	for name, b := range map[string][]byte{
		"list":       []byte(version + "\n"),
		ev + ".info": info,
		ev + ".mod":  gomod,
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	ls := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = dir
	out, err := ls.Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v", dir, err)
	}
	var files []modzip.File
	for _, p := range strings.Split(string(out), "\x00") {
		if p == "" {
			continue
		}
		full := filepath.Join(dir, filepath.FromSlash(p))
		if fi, err := os.Lstat(full); err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or a link
		}
		files = append(files, file{rel: p, full: full})
	}
	var zip bytes.Buffer
	if err := modzip.Create(&zip, module.Version{Path: path, Version: version}, files); err != nil {
		t.Fatalf("zip of %s@%s: %v", path, version, err)
	}
	if err := os.WriteFile(filepath.Join(vdir, ev+".zip"), zip.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// file is one file of a module zip (modzip.File).
type file struct{ rel, full string }

func (f file) Path() string                 { return f.rel }
func (f file) Lstat() (fs.FileInfo, error)  { return os.Lstat(f.full) }
func (f file) Open() (io.ReadCloser, error) { return os.Open(f.full) }
