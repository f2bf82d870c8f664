package main

import (
	"path/filepath"
	"testing"

	"github.com/firnid/firn/datadir"
)

// The default node name is the hostname plus a hash of the data dir: two
// nodes on one machine, each on its own data dir, get two names, also
// when both take the default --data-dir (firn-data, relative) from two
// working directories — the README's second local node joining the first
// one's embedded etcd. With one name the coordinator refuses the second
// ("node name ... is held by instance ...") and it never serves.
func TestDefaultNodeNamePerDataDir(t *testing.T) {
	name := func(dir string) string {
		t.Chdir(dir)
		dd, err := datadir.Open("firn-data")
		if err != nil {
			t.Fatal(err)
		}
		return defaultNodeName(dd.Dir())
	}
	a, b := t.TempDir(), t.TempDir()
	na, nb := name(a), name(b)
	if na == nb {
		t.Fatalf("data dirs %s and %s (each --data-dir firn-data from its parent) both get the default node name %q",
			filepath.Join(a, "firn-data"), filepath.Join(b, "firn-data"), na)
	}
	// One data dir keeps its name whichever way it is named.
	t.Chdir(a)
	if abs := defaultNodeName(filepath.Join(a, "firn-data", "coordinator")); abs != na {
		t.Fatalf("data dir %s: default node name %q by its absolute path, %q by a relative one", filepath.Join(a, "firn-data"), abs, na)
	}
}
