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
