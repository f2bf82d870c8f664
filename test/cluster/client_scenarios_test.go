package cluster

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/firnid/firn/client"
	firnv1 "github.com/firnid/firn/client/firnv1"
)

// clientScenarios: what clients do to a node — bad input from a fuzzing
// client — and what the Go client does for its caller when a node stops
// serving (it fails over).
var clientScenarios = []scenario{
	{name: "bad input from a fuzzing client", beside: true, run: func(e *env) {
		n := e.newNode("n1")
		e.startAll(n)
		load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2})
		rng := rand.New(rand.NewPCG(1, 2))
		ctx := context.Background()
		codesSeen := map[codes.Code]int{}
		for i := 0; i < 300; i++ {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			var err error
			switch i % 5 {
			case 0:
				_, err = n.ID.NextIDs(cctx, &firnv1.NextIDsRequest{Count: []uint32{0, 100_001, 1 << 31, rng.Uint32()}[rng.IntN(4)]})
			case 1:
				_, err = n.ID.NextID(cctx, &firnv1.NextIDRequest{Generator: fmt.Sprintf("nope-%d", rng.IntN(1000))})
			case 2:
				_, err = n.ID.Decode(cctx, &firnv1.DecodeRequest{Id: rng.Uint64() | 1<<63})
			case 3:
				_, err = n.ID.NextID(cctx, &firnv1.NextIDRequest{Generator: strings.Repeat("x", 70<<10)})
			case 4:
				// Random bytes at the gRPC port, and odd HTTP.
				if c, derr := net.DialTimeout("tcp", n.GRPCAddr, time.Second); derr == nil {
					junk := make([]byte, 1+rng.IntN(4096))
					for j := range junk {
						junk[j] = byte(rng.Uint32())
					}
					c.SetDeadline(time.Now().Add(200 * time.Millisecond))
					c.Write(junk)
					c.Read(make([]byte, 64))
					c.Close()
				}
				hc := http.Client{Timeout: time.Second}
				for _, path := range []string{"/v1/ids?count=-1", "/v1/ids?count=abc", "/v1/ids?count=99999999999", "/v1/decode/18446744073709551615",
					"/v1/decode/xyz", "/v1/ids?generator=%00", "/../../etc/passwd"} {
					if resp, herr := hc.Get("http://" + n.HTTPAddr + path); herr == nil {
						if resp.StatusCode == 200 && !strings.HasPrefix(path, "/v1/decode/1844") {
							e.t.Errorf("GET %s answered 200", path)
						}
						resp.Body.Close()
					}
				}
				if resp, herr := hc.Post("http://"+n.HTTPAddr+"/admin/resume", "text/plain", bytes.NewReader(junkBytes(rng))); herr == nil {
					// Without mTLS the admin endpoint answers only on a
					// loopback listener (these nodes'): a local caller is
					// the operator. The body may name a generator (a form);
					// junk there is refused naming it, and resumes nothing.
					if resp.StatusCode != 200 && resp.StatusCode != 400 && resp.StatusCode != 403 {
						e.t.Errorf("POST /admin/resume with a junk body: %d", resp.StatusCode)
					}
					resp.Body.Close()
				}
			}
			cancel()
			if err != nil {
				codesSeen[status.Code(err)]++
			} else if i%5 != 4 {
				e.t.Errorf("bad request %d accepted", i)
			}
		}
		for c := range codesSeen {
			if c != codes.InvalidArgument && c != codes.NotFound && c != codes.ResourceExhausted {
				e.t.Errorf("bad input answered %s (%d times)", c, codesSeen[c])
			}
		}
		if code, body := n.Ready(); code != 200 {
			e.t.Errorf("not serving after the fuzzing: %s", body)
		}
		load.Stop()
		countFailures(e, e.rec.Failures(), none)
		e.check(Bounds{})
	}},
	{name: "clock back 2s and 30s: the Go client fails over", run: func(e *env) {
		n1, n2, n3 := e.newNode("n1"), e.newNode("n2"), e.newNode("n3")
		e.startAll(n1, n2, n3)
		c, err := client.New([]string{n1.GRPCAddr, n2.GRPCAddr, n3.GRPCAddr},
			client.WithMaxAge(200*time.Millisecond), client.WithCallTimeout(time.Second))
		if err != nil {
			e.t.Fatal(err)
		}
		defer c.Close()
		load := StartClientLoad(e.rec, c, 4, 3*time.Second, 0)
		for _, step := range []time.Duration{2 * time.Second, 30 * time.Second} {
			time.Sleep(700 * time.Millisecond)
			n1.SetOffset(-step) // one node of three: the others hold the peer median
			if _, _, err := n1.WaitNotReady(3 * time.Second); err != nil {
				e.t.Fatal(err)
			}
			time.Sleep(1500 * time.Millisecond)
			n1.SetOffset(0)
			if _, err := n1.WaitReady(5 * time.Second); err != nil {
				e.t.Fatal(err)
			}
		}
		time.Sleep(500 * time.Millisecond)
		load.Stop()
		countFailures(e, e.rec.Failures(), none)
		// n1 fails closed on both steps (beyond max-lead): no ID carries
		// its stepped clock.
		e.check(Bounds{Prefetch: 200 * time.Millisecond})
	}},
}

func junkBytes(r *rand.Rand) []byte {
	b := make([]byte, r.IntN(512))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
