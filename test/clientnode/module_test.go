package clientnode

import (
	"os/exec"
	"strings"
	"testing"
)

// The client module stays light: its module graph never gains the
// coordinators, the browser driver or the server, and its packages import
// only gRPC, protobuf and the standard library (with what gRPC itself
// imports).
func TestClientModuleGraph(t *testing.T) {
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = "../../client"
		// stdout only: on a fresh module cache go reports its downloads
		// ("go: downloading …") on stderr, which is not the answer.
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s in client/: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return string(out)
	}
	if mod := strings.TrimSpace(run("list", "-m")); mod != "github.com/firnid/firn/client" {
		t.Fatalf("client/ is module %q, want its own module github.com/firnid/firn/client", mod)
	}
	for _, m := range strings.Split(strings.TrimSpace(run("list", "-m", "all")), "\n") {
		path := strings.Fields(m)[0]
		for _, banned := range []string{"go.etcd.io/", "github.com/go-zookeeper/", "github.com/chromedp/", "github.com/prometheus/"} {
			if strings.HasPrefix(path, banned) {
				t.Errorf("the client module's graph holds %s", m)
			}
		}
		if path == "github.com/firnid/firn" {
			t.Errorf("the client module's graph holds the server module: %s", m)
		}
	}
	allowed := []string{"github.com/firnid/firn/client", "google.golang.org/grpc", "google.golang.org/protobuf",
		"google.golang.org/genproto/googleapis/rpc", "golang.org/x/net", "golang.org/x/sys", "golang.org/x/text"}
	deps := run("list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...")
	for _, p := range strings.Fields(deps) {
		ok := false
		for _, a := range allowed {
			if p == a || strings.HasPrefix(p, a+"/") {
				ok = true
			}
		}
		if !ok {
			t.Errorf("a client package depends on %s (allowed: gRPC, protobuf and what they import)", p)
		}
	}
	// The lowest Go the dependencies allow, not the server's.
	if gov := strings.TrimSpace(run("list", "-m", "-f", "{{.GoVersion}}")); gov >= "1.26" {
		t.Errorf("the client module asks for go %s: importers would need the server's Go", gov)
	}
}
