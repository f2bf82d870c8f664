package client

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	firnv1 "github.com/firnid/firn/client/firnv1"
)

// The key hash must be the nodes' (seq.Hash in the server module, which
// this module cannot import): the vectors below are seq.Hash's values,
// the first three also FNV-1a's published ones, and every key agrees
// with the standard library's FNV-1a.
func TestSeqHashVectors(t *testing.T) {
	for _, v := range []struct {
		key       string
		hash      uint64
		mod64, m7 uint64
	}{
		{"", 0xcbf29ce484222325, 37, 2},
		{"a", 0xaf63dc4c8601ec8c, 12, 5},
		{"foobar", 0x85944171f73967e8, 40, 6},
		{"chat:42", 0x7f9eba466480a665, 37, 3},
		{"\x00\xff", 0x831c907b4ea2b60, 32, 6},
		{strings.Repeat("x", 256), 0x295fa478294e7725, 37, 6},
	} {
		h := seqHash([]byte(v.key))
		if h != v.hash {
			t.Errorf("seqHash(%q) = %#x, want %#x", v.key, h, v.hash)
		}
		std := fnv.New64a()
		std.Write([]byte(v.key))
		if s := std.Sum64(); s != h {
			t.Errorf("seqHash(%q) = %#x, hash/fnv says %#x", v.key, h, s)
		}
		if h%64 != v.mod64 || h%7 != v.m7 {
			t.Errorf("sections of %q: %d of 64, %d of 7; want %d, %d", v.key, h%64, h%7, v.mod64, v.m7)
		}
	}
	for i := range 1000 {
		k := []byte(fmt.Sprintf("key-%d", i))
		std := fnv.New64a()
		std.Write(k)
		if seqHash(k) != std.Sum64() {
			t.Fatalf("seqHash(%q) disagrees with hash/fnv", k)
		}
	}
}

func TestSeqMapOf(t *testing.T) {
	info := &firnv1.InfoResponse{Generators: []*firnv1.GeneratorInfo{
		{Name: "ids", IsDefault: true, Kind: "snowflake"},
		{Name: "chats", Kind: "seq", Sections: 4, SectionOwners: []*firnv1.SectionOwner{
			{Section: 3, Address: "10.0.0.3:7300"},
			{Section: 0, Address: "10.0.0.1:7300"},
			{Section: 1, Address: ""},              // no owner now
			{Section: 2, Address: "0.0.0.0:7300"},  // a wildcard: not dialable
			{Section: 9, Address: "10.0.0.9:7300"}, // out of range: ignored
		}},
	}}
	m := seqMapOf(info, "chats")
	if m.sections != 4 || strings.Join(m.owners, ",") != "10.0.0.1:7300,,,10.0.0.3:7300" {
		t.Fatalf("map %d %q", m.sections, m.owners)
	}
	// "chat:42" hashes to section 1 of 4 (0x…a665 % 4).
	if s, a := m.owner([]byte("chat:42")); s != int(seqHash([]byte("chat:42"))%4) || a != m.owners[s] {
		t.Fatalf("owner of chat:42: section %d %q", s, a)
	}
	for _, gen := range []string{"", "ids", "nope"} {
		if m := seqMapOf(info, gen); m.sections != 0 {
			t.Errorf("generator %q: a map of %d sections, want none (not a sequence generator)", gen, m.sections)
		}
		if s, a := seqMapOf(info, gen).owner([]byte("k")); s != -1 || a != "" {
			t.Errorf("generator %q: owner %d %q without a map", gen, s, a)
		}
	}
	var none *seqMap
	if s, a := none.owner([]byte("k")); s != -1 || a != "" {
		t.Fatalf("nil map: owner %d %q", s, a)
	}
	h := m.withOwner(1, "10.0.0.2:7300")
	if h.owners[1] != "10.0.0.2:7300" || m.owners[1] != "" {
		t.Fatalf("withOwner changed the old map or not the new: %q %q", m.owners, h.owners)
	}
	for addr, want := range map[string]bool{"10.0.0.1:7300": true, "node-a:7300": true, "[::1]:7300": true,
		"0.0.0.0:7300": false, "[::]:7300": false, ":7300": false, "": false, "host": false} {
		if dialable(addr) != want {
			t.Errorf("dialable(%q) = %v, want %v", addr, !want, want)
		}
	}
}

// splitSeq groups by owner in the order owners first appear, keeps the
// items' order within an owner and cuts at the per-RPC bound; placeSeq
// puts each chunk's answers back at the items' places, so the results
// come out in the caller's order however the items were spread.
func TestSeqSplitAndReassemble(t *testing.T) {
	const n = 4000
	items := make([]SeqItem, n)
	idx := make([]int, n)
	owner := func(i int) string { return []string{"a", "b", "c"}[seqHash(items[i].Key)%3] }
	for i := range items {
		items[i] = SeqItem{Key: []byte(fmt.Sprintf("k%d", i)), Count: 1 + i%5}
		idx[i] = i
	}
	chunks := splitSeq(idx, owner, 1000)
	seen := make([]int, n)
	perOwner := map[string]int{}
	var order []string
	for _, ch := range chunks {
		if len(ch.idx) == 0 || len(ch.idx) > 1000 {
			t.Fatalf("chunk of %d items", len(ch.idx))
		}
		if len(order) == 0 || order[len(order)-1] != ch.addr {
			order = append(order, ch.addr)
		}
		for j, i := range ch.idx {
			seen[i]++
			if owner(i) != ch.addr {
				t.Fatalf("item %d (owner %s) in a chunk for %s", i, owner(i), ch.addr)
			}
			if j > 0 && ch.idx[j-1] >= i {
				t.Fatalf("items out of order within a chunk: %d after %d", i, ch.idx[j-1])
			}
		}
		perOwner[ch.addr] += len(ch.idx)
	}
	if len(order) != 3 || order[0] != owner(0) {
		t.Fatalf("owners in order %v; want each once, %s (item 0's) first", order, owner(0))
	}
	for i, k := range seen {
		if k != 1 {
			t.Fatalf("item %d in %d chunks", i, k)
		}
	}
	if perOwner["a"]+perOwner["b"]+perOwner["c"] != n || perOwner["a"] <= 1000 && perOwner["b"] <= 1000 && perOwner["c"] <= 1000 {
		t.Fatalf("per owner %v: want one owner cut into chunks", perOwner)
	}

	// Each chunk answered by its owner: item i gets first 1000*i; every
	// 7th is refused (moving, with a delay), every 11th WRONG_NODE.
	out := make([]SeqResult, n)
	for _, ch := range chunks {
		res := make([]*firnv1.SeqResult, len(ch.idx))
		for j, i := range ch.idx {
			switch {
			case i%11 == 0:
				res[j] = &firnv1.SeqResult{Reason: "WRONG_NODE", Error: "owned elsewhere", Owner: "z:1"}
			case i%7 == 0:
				res[j] = &firnv1.SeqResult{Reason: "SECTION_MOVING", Error: "moving", RetryAfter: durationpb.New(300 * time.Millisecond)}
			default:
				res[j] = &firnv1.SeqResult{First: uint64(1000 * i), Count: uint32(items[i].Count)}
			}
		}
		if err := placeSeq(out, items, ch, res); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range out {
		switch {
		case i%11 == 0:
			if Reason(r.Err) != firnv1.ErrorReason_WRONG_NODE || seqOwnerOf(r.Err) != "z:1" || status.Code(errors.Unwrap(r.Err)) != codes.FailedPrecondition {
				t.Fatalf("item %d: %v (reason %v, owner %q)", i, r.Err, Reason(r.Err), seqOwnerOf(r.Err))
			}
			var ee *EndpointError
			if !errors.As(r.Err, &ee) || ee.Endpoint != owner(i) {
				t.Fatalf("item %d: error %v does not name the endpoint %s", i, r.Err, owner(i))
			}
			if seqClassify(context.Background(), r.Err) != seqRedirect {
				t.Fatalf("item %d: WRONG_NODE not a redirect", i)
			}
		case i%7 == 0:
			d, ok := RetryAfter(r.Err)
			if Reason(r.Err) != firnv1.ErrorReason_SECTION_MOVING || !ok || d != 300*time.Millisecond {
				t.Fatalf("item %d: %v (reason %v, retry %v %v)", i, r.Err, Reason(r.Err), d, ok)
			}
			if seqClassify(context.Background(), r.Err) != seqRetry {
				t.Fatalf("item %d: SECTION_MOVING not retried", i)
			}
		default:
			if r.Err != nil || r.First != uint64(1000*i) || r.Count != items[i].Count {
				t.Fatalf("item %d: %+v, want first %d count %d", i, r, 1000*i, items[i].Count)
			}
		}
	}

	// An answer that does not hold one result per item, or values not as
	// asked, is the node's fault.
	ch := chunks[0]
	if err := placeSeq(out, items, ch, make([]*firnv1.SeqResult, len(ch.idx)-1)); status.Code(err) != codes.Internal {
		t.Fatalf("short answer: %v", err)
	}
	res := make([]*firnv1.SeqResult, len(ch.idx))
	for j := range res {
		res[j] = &firnv1.SeqResult{First: 1, Count: 0}
	}
	if err := placeSeq(out, items, ch, res); err != nil {
		t.Fatal(err)
	}
	if r := out[ch.idx[0]]; status.Code(errors.Unwrap(r.Err)) != codes.Internal {
		t.Fatalf("an item answered with no values: %+v", r)
	}
}

func TestSeqItemErrorCodes(t *testing.T) {
	for reason, code := range map[string]codes.Code{
		"BAD_REQUEST": codes.InvalidArgument, "NOT_FOUND": codes.NotFound, "WRONG_NODE": codes.FailedPrecondition,
		"OVERLOADED": codes.ResourceExhausted, "SECTION_MOVING": codes.Unavailable, "DRAINING": codes.Unavailable,
		"COORDINATOR_UNAVAILABLE": codes.Unavailable, "": codes.Unknown,
	} {
		err := seqItemError(&firnv1.SeqResult{Reason: reason, Error: "why"})
		if status.Code(err) != code {
			t.Errorf("reason %q: code %v, want %v", reason, status.Code(err), code)
		}
		if reason != "" && Reason(err).String() != reason {
			t.Errorf("reason %q: Reason says %v", reason, Reason(err))
		}
		if _, ok := RetryAfter(err); ok {
			t.Errorf("reason %q: a RetryInfo it was not given", reason)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for err, want := range map[error]seqNext{
		status.Error(codes.Unavailable, "x"):                  seqRetry,
		status.Error(codes.InvalidArgument, "x"):              seqFinal,
		status.Error(codes.FailedPrecondition, "no reason"):   seqFinal,
		status.Error(codes.DeadlineExceeded, "attempt"):       seqRetry,
		status.Error(codes.ResourceExhausted, "too large"):    seqFinal,
		seqItemError(&firnv1.SeqResult{Reason: "OVERLOADED"}): seqRetry,
	} {
		if got := seqClassify(context.Background(), err); got != want {
			t.Errorf("%v: class %v, want %v", err, got, want)
		}
	}
	if got := seqClassify(ctx, status.Error(codes.DeadlineExceeded, "caller")); got != seqFinal {
		t.Errorf("the caller's own deadline: class %v, want final", got)
	}
}

func TestSeqLocalBounds(t *testing.T) {
	c := newClient(t, []string{"127.0.0.1:1"})
	ctx := ctxFor(t, time.Second)
	for _, tc := range []struct {
		key   []byte
		count int
		want  error
		bound string
	}{
		{nil, 1, ErrInvalidKey, "1 to 256 bytes"},
		{make([]byte, 257), 1, ErrInvalidKey, "1 to 256 bytes"},
		{[]byte("k"), 0, ErrInvalidCount, "[1, 10000]"},
		{[]byte("k"), 10001, ErrInvalidCount, "[1, 10000]"},
	} {
		_, err := c.NextSeq(ctx, tc.key, tc.count)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.bound) {
			t.Errorf("NextSeq(%d-byte key, %d): %v; want %v naming %q", len(tc.key), tc.count, err, tc.want, tc.bound)
		}
	}
	if _, err := c.CurrentSeq(ctx, nil); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("CurrentSeq(empty key): %v", err)
	}
	if _, err := c.NextSeqs(ctx, nil); !errors.Is(err, ErrInvalidCount) {
		t.Errorf("NextSeqs(no items): %v", err)
	}
	res, err := c.NextSeqs(ctx, []SeqItem{{Key: nil, Count: 1}, {Key: []byte("k"), Count: 10001}})
	if err != nil || len(res) != 2 || !errors.Is(res[0].Err, ErrInvalidKey) || !errors.Is(res[1].Err, ErrInvalidCount) {
		t.Fatalf("NextSeqs of bad items: %v %+v", err, res)
	}
	if s := c.Stats(); s.SeqCalls != 0 {
		t.Fatalf("calls refused before the network counted: %+v", s)
	}
}

// A node that cannot answer (nothing listens) is retried until the wait
// would pass the deadline; the call then fails at once, well before it.
func TestSeqGivesUpBeforeDeadline(t *testing.T) {
	c := newClient(t, []string{"127.0.0.1:1"}, WithoutHealthCheck(), WithCallTimeout(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.NextSeq(ctx, []byte("k"), 1)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("NextSeq to no node: %v; want the cause, before the deadline", err)
	}
	var ee *EndpointError
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ee) || status.Code(ee.Err) != codes.Unavailable {
		t.Fatalf("NextSeq to no node: %v; want ErrUnavailable wrapping the node's error", err)
	}
	if took := time.Since(start); took > 700*time.Millisecond {
		t.Fatalf("gave up after %v, past the deadline", took)
	}
	if s := c.Stats(); s.SeqCalls != 1 || s.SeqRetries == 0 {
		t.Fatalf("stats %+v; want 1 call, retries", s)
	}
	res, err := c.NextSeqs(ctx, []SeqItem{{Key: []byte("a"), Count: 1}})
	if err != nil || res[0].Err == nil {
		t.Fatalf("NextSeqs to no node: %v %+v", err, res)
	}
	c.Close()
	if _, err := c.NextSeq(context.Background(), []byte("k"), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestSeqMapKeepingKnown: a map read again keeps an owner the client
// learned (from a WRONG_NODE) where the read names none, and takes the
// read's owner wherever it names one; a map of another shape replaces the
// old one whole.
func TestSeqMapKeepingKnown(t *testing.T) {
	old := &seqMap{sections: 3, owners: []string{"a:1", "b:1", ""}}
	read := &seqMap{sections: 3, owners: []string{"", "c:1", ""}}
	got := read.keepingKnown(old)
	if want := []string{"a:1", "c:1", ""}; !slices.Equal(got.owners, want) {
		t.Fatalf("kept %q, want %q", got.owners, want)
	}
	if !slices.Equal(read.owners, []string{"", "c:1", ""}) {
		t.Fatalf("the read map was changed: %q", read.owners)
	}
	other := &seqMap{sections: 2, owners: []string{"", ""}}
	if got := other.keepingKnown(old); got != other {
		t.Fatalf("a map of 2 sections over one of 3: %+v, want the read map", got)
	}
	if got := read.keepingKnown(nil); got != read {
		t.Fatalf("over no map: %+v, want the read map", got)
	}
}
