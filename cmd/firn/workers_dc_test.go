package main

import (
	"strings"
	"testing"
)

// TestWorkersReleaseRefusesDatacenterOutsideLayout: `firn workers release
// W --datacenter DC` checks W against the pinned layout's worker IDs and
// must check DC against its datacenter values the same way, naming the
// flag and the bound (usage, exit 2), not send a release of a worker that
// cannot exist and report the coordinator's "not held".
func TestWorkersReleaseRefusesDatacenterOutsideLayout(t *testing.T) {
	a := newAdminEtcd(t)
	a.holder("ids", "snowflake", 5) // 5 datacenter bits: 0..31
	_, errOut, code := cli(t, nil, "workers", "release", "0", "--datacenter", "40", "--etcd", a.ep, "--generator", "ids")
	if code != exitUsage || !strings.Contains(errOut, "--datacenter") || !strings.Contains(errOut, "[0, 32)") {
		t.Fatalf("workers release 0 --datacenter 40 of a snowflake generator: exit %d, stderr %q; want exit %d naming --datacenter and [0, 32)",
			code, strings.TrimSpace(errOut), exitUsage)
	}
}
