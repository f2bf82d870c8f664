package proto

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestClientVersions: the Java, TypeScript and Python clients are
// versioned with the node: each manifest names clients/VERSION (the next
// release) in its ecosystem's pre-release form until that release is
// tagged, when the manifests and the file change together.
func TestClientVersions(t *testing.T) {
	b, err := os.ReadFile("../clients/VERSION")
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(v) {
		t.Fatalf("clients/VERSION %q is not MAJOR.MINOR.PATCH", v)
	}
	for _, m := range []struct{ file, pattern string }{
		{"../clients/java/pom.xml", `<artifactId>firn-client</artifactId>\s*<version>([^<]+)</version>`},
		{"../clients/ts/package.json", `"version":\s*"([^"]+)"`},
		{"../clients/python/pyproject.toml", `(?m)^version\s*=\s*"([^"]+)"`},
	} {
		b, err := os.ReadFile(m.file)
		if err != nil {
			t.Fatal(err)
		}
		got := regexp.MustCompile(m.pattern).FindSubmatch(b)
		if got == nil {
			t.Errorf("%s: no version found", m.file)
			continue
		}
		s := string(got[1])
		ok := s == v || s == v+"-SNAPSHOT" || s == v+"-dev.0" || s == v+".dev0"
		if !ok {
			t.Errorf("%s: version %s, want %s or its pre-release form (clients/VERSION)", m.file, s, v)
		}
	}
}
