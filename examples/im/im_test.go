package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/freeport"
)

func freePort(t *testing.T) string {
	t.Helper()
	return strconv.Itoa(freeport.Port(t))
}

// startFirn builds cmd/firn and runs `firn serve --generator msg=snowflake
// --generator user=compact --generator chats=seq` on loopback until the test ends; it returns the
// gRPC address once /readyz says 200.
func startFirn(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "firn")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/firnid/firn/cmd/firn").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/firn: %v\n%s", err, out)
	}
	grpcAddr, httpAddr := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	var log bytes.Buffer
	cmd := exec.Command(bin, "serve", "--data-dir", filepath.Join(dir, "data"),
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--embedded-client-addr", "127.0.0.1:"+freePort(t), "--embedded-peer-addr", "127.0.0.1:"+freePort(t),
		"--generator", "msg=snowflake", "--generator", "user=compact", "--generator", "chats=seq")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("firn log:\n%s", log.String())
		}
	})
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 60*time.Second {
			t.Fatal("firn not ready within 60 s")
		}
		select {
		case <-done:
			t.Fatalf("firn exited:\n%s", log.String())
		default:
		}
		if resp, err := http.Get("http://" + httpAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return grpcAddr
			}
		}
	}
}

// The example against a real node: users from the compact generator, a
// message stored once despite a lost acknowledgement, the chat keyed the
// same from both sides, and pages in message-ID order.
func TestIMAgainstFirn(t *testing.T) {
	addr := startFirn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var out bytes.Buffer
	if err := run(ctx, []string{addr}, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("output:\n%s", out.String())
	for _, want := range []string{"(the same from either side: true)", "after 2 attempts (the first ack was lost), stored once: true",
		`page 1: "message 4" "message 3" "message 2"`, `page 2: "message 1" "hello bob"`,
		"chat seqs: 1 2 3 4 5", `sync after seq 3: "message 3" "message 4"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}

	// The server's own promises, checked directly.
	srv, err := NewServer([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	compact, _ := generator.Preset("compact")
	snowflake, _ := generator.Preset("snowflake")
	u1, err := srv.Register(ctx, "u1")
	if err != nil {
		t.Fatal(err)
	}
	u2, _ := srv.Register(ctx, "u2")
	if u1.ID>>42 != 0 || u2.ID>>42 != 0 {
		t.Fatalf("user IDs %d, %d do not fit 42 bits", u1.ID, u2.ID)
	}
	if _, err := compact.Decode(u1.ID); err != nil {
		t.Fatalf("user ID %d is not a compact ID: %v", u1.ID, err)
	}
	id := newUUID()
	m1, dup1, err := srv.Send(ctx, u1.ID, u2.ID, id, "x")
	if err != nil || dup1 {
		t.Fatalf("first send: dup=%v err=%v", dup1, err)
	}
	m2, dup2, err := srv.Send(ctx, u1.ID, u2.ID, id, "x")
	if err != nil || !dup2 || m2.ID != m1.ID {
		t.Fatalf("retry with the same clientMsgId: %+v dup=%v err=%v, want the stored message %d", m2, dup2, err, m1.ID)
	}
	p, err := snowflake.Decode(m1.ID)
	if err != nil {
		t.Fatalf("message ID %d is not a snowflake ID: %v", m1.ID, err)
	}
	if d := time.Since(p.Time); d < -time.Second || d > time.Minute {
		t.Fatalf("message ID %d carries time %v, not now", m1.ID, p.Time)
	}
	if _, _, err := srv.Send(ctx, u1.ID, 12345, newUUID(), "y"); err != ErrUnknownUser {
		t.Fatalf("send to nobody: %v", err)
	}
	var ids []uint64
	for i := 0; i < 50; i++ {
		m, _, err := srv.Send(ctx, u2.ID, u1.ID, newUUID(), strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	chat := ChatID(u2.ID, u1.ID)
	var paged []Message
	for before := uint64(0); ; {
		page := srv.Page(chat, before, 7)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		before = page[len(page)-1].ID
	}
	// The chat's seqs: one per message, strictly increasing in the order
	// the sends were made (they were made one after another), the retry
	// keeping its seq.
	synced := srv.After(chat, 0)
	if len(synced) != 51 || synced[0].Seq != m1.Seq {
		t.Fatalf("after 0: %d messages, first seq %d; want 51, %d", len(synced), synced[0].Seq, m1.Seq)
	}
	for i := 1; i < len(synced); i++ {
		if synced[i].Seq <= synced[i-1].Seq || synced[i].Text != strconv.Itoa(i-1) {
			t.Fatalf("seq order: %d (%q) after %d", synced[i].Seq, synced[i].Text, synced[i-1].Seq)
		}
	}
	if got := srv.After(chat, synced[40].Seq); len(got) != 10 || got[0].Text != "40" {
		t.Fatalf("after seq %d: %d messages starting %q; want the last 10 from \"40\"", synced[40].Seq, len(got), got[0].Text)
	}
	if len(paged) != 51 {
		t.Fatalf("paged %d messages, want 51", len(paged))
	}
	for i := 1; i < len(paged); i++ {
		if paged[i].ID >= paged[i-1].ID {
			t.Fatalf("page order: %d after %d", paged[i].ID, paged[i-1].ID)
		}
	}
	if a, b := newUUID(), newUUID(); a == b || len(a) != 36 || a[14] != '4' {
		t.Fatalf("UUIDs %s, %s", a, b)
	}
}
