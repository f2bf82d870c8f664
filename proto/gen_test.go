package proto

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedCodeUpToDate regenerates the Go code into a temporary
// directory and compares it with the committed files.
func TestGeneratedCodeUpToDate(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Fatalf("protoc not found (test/run.sh installs protobuf-compiler and libprotobuf-dev): %v", err)
	}
	plugin := func(name string) string {
		out, err := exec.Command("go", "tool", "-n", name).Output()
		if err != nil {
			t.Fatalf("go tool -n %s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}
	dir := t.TempDir()
	cmd := exec.Command("protoc", "-I", ".", "-I", "/usr/include",
		"--plugin=protoc-gen-go="+plugin("protoc-gen-go"),
		"--plugin=protoc-gen-go-grpc="+plugin("protoc-gen-go-grpc"),
		"--go_out="+dir, "--go_opt=module=github.com/firnid/firn",
		"--go-grpc_out="+dir, "--go-grpc_opt=module=github.com/firnid/firn",
		"firn/v1/firn.proto")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, out)
	}
	for _, f := range []string{"client/firnv1/firn.pb.go", "client/firnv1/firn_grpc.pb.go"} {
		want, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is out of date: run `go generate ./proto/` and commit", f)
		}
	}
}

// clientGens are the other clients' generators: each gen.sh writes into
// the directory it is given, and by default into the committed one.
var clientGens = []struct{ script, committed string }{
	{"clients/python/gen.sh", "clients/python/firn_client/_proto"},
	{"clients/ts/gen.sh", "clients/ts/proto/firn/v1"},
	{"clients/java/gen.sh", "clients/java/src/main/generated"},
}

// TestClientCodeUpToDate runs each client's gen.sh into a temporary
// directory and compares every file with the committed directory.
func TestClientCodeUpToDate(t *testing.T) {
	for _, g := range clientGens {
		t.Run(g.script, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command("bash", filepath.Join("..", g.script), dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", g.script, err, out)
			}
			want := readTree(t, dir)
			got := readTree(t, filepath.Join("..", g.committed))
			for name, b := range want {
				if !bytes.Equal(got[name], b) {
					t.Errorf("%s/%s is out of date: run `go generate ./proto/` and commit", g.committed, name)
				}
			}
			for name := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("%s/%s is not generated any more: remove it", g.committed, name)
				}
			}
			if len(want) == 0 {
				t.Errorf("%s generated nothing", g.script)
			}
		})
	}
}

// readTree reads every regular file under dir, by its path below dir.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".pyc") || strings.Contains(p, "__pycache__") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
