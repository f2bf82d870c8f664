package main

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A data dir admits one process (docs/design.md, Per-key sequences: the
// private coordinator takes its own instance's sections back at once on
// that ground). A second `firn serve` on the data dir of a running node —
// the README's second local node joining the first one's embedded etcd,
// started where the first one was, on the default --data-dir — is
// refused, naming the data dir, rather than run as the same instance
// beside it (one instance ID, one node name, one journal written by two
// processes).
func TestSecondProcessOnDataDirRefused(t *testing.T) {
	dir := t.TempDir()
	a := freeAddrs(t)
	p := serve(t, dir, a, nil)
	p.waitReady(30 * time.Second)

	b := freeAddrs(t)
	q := serve(t, dir, b, nil, "--etcd", "http://"+a.eclient, "--unchecked-clock-ok")
	c := &http.Client{Timeout: time.Second}
	// Whichever comes first: the second process exits, or it serves.
	for start := time.Now(); !q.exited(); time.Sleep(50 * time.Millisecond) {
		if resp, err := c.Get("http://" + b.http + "/readyz"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Fatalf("a second process on the data dir of a running node serves, instance %s beside the first one's %s: %s",
					q.info().GetInstanceId(), p.info().GetInstanceId(), body)
			}
		}
		if time.Since(start) > 60*time.Second {
			t.Fatal("a second process on the data dir of a running node neither refused nor served within 60s")
		}
	}
	msg := lastLine(strings.TrimSpace(q.stderr.String()))
	if code := q.cmd.ProcessState.ExitCode(); code != exitFailure || !strings.Contains(msg, "in use") || !strings.Contains(msg, dir) {
		t.Fatalf("second process on the data dir: exit %d, stderr %q; want a refusal naming the data dir in use", code, msg)
	}
	if p.exited() {
		t.Fatal("the first node exited")
	}
	if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("first node: exit code %d after SIGTERM", code)
	}
}
