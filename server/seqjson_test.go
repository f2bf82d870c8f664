package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/firnid/firn/internal/testing/etcdtest"
)

// A POST /v1/seq body whose count is a JSON number outside its type — a
// negative count, a fraction, one past 2^64, a string — is refused naming
// the field "count" and its bound, as a count over 10000 is (and as gRPC
// names it): not as a malformed "body" with the whole object's shape.
func TestHTTPSeqBadCountNamesField(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), seqGen("chats", "seq,sections=2"))
	waitServing(t, n.ids, "chats", 10*time.Second)
	for _, count := range []string{`-1`, `1.5`, `1e3`, `18446744073709551616`, `"5"`, `20000`} {
		body := `{"generator":"chats","key":"k","count":` + count + `}`
		resp, err := n.httpc.Post(n.base+"/v1/seq", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var eb struct {
			Error struct {
				Code, Reason string
				Metadata     map[string]string
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest || eb.Error.Reason != "BAD_REQUEST" ||
			eb.Error.Metadata["field"] != "count" || eb.Error.Metadata["limit"] != "1..10000" {
			t.Errorf("count %s: %d %+v %v; want 400 BAD_REQUEST naming field count, limit 1..10000", count, resp.StatusCode, eb.Error, err)
		}
	}
}

// POST /v1/seq takes application/json alone (any case, with a charset):
// a type that only begins so is refused naming Content-Type, and nothing
// is drawn from the sequence for it.
func TestHTTPSeqContentTypeExact(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), seqGen("chats", "seq,sections=2"))
	waitServing(t, n.ids, "chats", 10*time.Second)
	post := func(ct string) (int, string) {
		t.Helper()
		resp, err := n.httpc.Post(n.base+"/v1/seq", ct, strings.NewReader(`{"generator":"chats","key":"k"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	want := 1
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON"} {
		code, body := post(ct)
		if w := fmt.Sprintf(`"last":"%d"`, want); code != 200 || !strings.Contains(body, w) {
			t.Fatalf("Content-Type %q: %d %s, want 200 with %s", ct, code, body, w)
		}
		want++
	}
	for _, ct := range []string{"application/jsonp", "application/json-seq", "application/json5; charset=utf-8", "text/plain"} {
		code, body := post(ct)
		if code != http.StatusBadRequest || !strings.Contains(body, `"field":"Content-Type"`) {
			t.Errorf("Content-Type %q: %d %s, want 400 naming Content-Type", ct, code, body)
		}
	}
	if code, body := post("application/json"); code != 200 || !strings.Contains(body, fmt.Sprintf(`"last":"%d"`, want)) {
		t.Fatalf("after the refusals: %d %s, want last %d (a refused call draws nothing)", code, body, want)
	}
}
