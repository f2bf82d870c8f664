package server_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/firnid/firn/internal/testing/etcdtest"
)

// POST /v1/seq's key is a JSON string: one that JSON cannot carry exactly
// (a lone UTF-16 surrogate, bytes that are not UTF-8) must be refused
// naming key, not read as U+FFFD — else two different keys of the
// caller's share one sequence, the second key starting where the first
// left off instead of at 1.
func TestHTTPSeqKeyNotReplaced(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), seqGen("chats", "seq,sections=1"))
	waitServing(t, n.ids, "chats", 10*time.Second)
	post := func(key string) (int, map[string]any) {
		t.Helper()
		resp, err := n.httpc.Post(n.base+"/v1/seq", "application/json", strings.NewReader(`{"generator":"chats","key":`+key+`}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	for _, key := range []string{`"\ud800"`, `"\udbff"`, `"a\udc00b"`, "\"\xff\"", "\"\xfe\""} {
		code, body := post(key)
		if code != 400 {
			t.Errorf("key %s: %d %v; want 400 naming key (it is not the key the caller sent)", key, code, body)
			continue
		}
		if e, _ := body["error"].(map[string]any); e == nil || e["metadata"].(map[string]any)["field"] != "key" {
			t.Errorf("key %s: %v; want a refusal naming field key", key, body)
		}
	}
	// A key with U+FFFD itself, a surrogate pair and other escapes is
	// served.
	for _, key := range []string{`"\ufffd"`, "\"\xef\xbf\xbd\"", `"\ud83d\ude00"`, `"a\"b\\c\/d\n"`} {
		if code, body := post(key); code != 200 {
			t.Errorf("key %s: %d %v; want 200", key, code, body)
		}
	}
}
