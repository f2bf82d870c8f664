package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
)

// seqOwnerService is a sequence generator's node of two sections: Info
// names the owners, NextSeqs serves at once, or, when slow, only when the
// caller's deadline has passed.
type seqOwnerService struct {
	firnv1.UnimplementedIDServiceServer
	owners []string
	slow   chan struct{} // not nil: NextSeqs answers only once it is closed
}

func (s *seqOwnerService) Info(context.Context, *firnv1.InfoRequest) (*firnv1.InfoResponse, error) {
	g := &firnv1.GeneratorInfo{Name: "chats", Kind: "seq", Sections: uint32(len(s.owners)), Serving: true}
	for i, a := range s.owners {
		g.SectionOwners = append(g.SectionOwners, &firnv1.SectionOwner{Section: uint32(i), Address: a, Serving: true})
	}
	return &firnv1.InfoResponse{NodeName: "seq", Generators: []*firnv1.GeneratorInfo{g}}, nil
}

func (s *seqOwnerService) NextSeqs(ctx context.Context, req *firnv1.NextSeqsRequest) (*firnv1.NextSeqsResponse, error) {
	if s.slow != nil {
		<-s.slow // past the caller's deadline: the caller's context ends the call
		return nil, ctx.Err()
	}
	resp := &firnv1.NextSeqsResponse{}
	for _, it := range req.GetItems() {
		resp.Results = append(resp.Results, &firnv1.SeqResult{First: 1, Count: it.GetCount()})
	}
	return resp, nil
}

// TestSeqsDeadlineKeepsServedItems: NextSeqs over keys of two owners, one
// of which answers only after the caller's deadline. The items the other
// owner served are the caller's (their values were handed out); only the
// slow owner's items carry the deadline, as NextSeqs promises ("An item
// not served by the deadline carries the last refusal (or ctx's error)").
func TestSeqsDeadlineKeepsServedItems(t *testing.T) {
	fast, slow := &seqOwnerService{}, &seqOwnerService{slow: make(chan struct{})}
	fastAddr, slowAddr := serveIDs(t, fast, nil), serveIDs(t, slow, nil)
	t.Cleanup(func() { close(slow.slow) }) // before the servers stop
	owners := []string{fastAddr, slowAddr}
	fast.owners, slow.owners = owners, owners
	c := newClient(t, []string{fastAddr}, WithoutHealthCheck(), WithGenerator("chats"), WithCallTimeout(5*time.Second))
	key := func(s uint64) []byte {
		for i := 0; ; i++ {
			if k := fmt.Appendf(nil, "k%d", i); seqHash(k)%2 == s {
				return k
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	res, err := c.NextSeqs(ctx, []SeqItem{{Key: key(0), Count: 3}, {Key: key(1), Count: 1}})
	if err != nil {
		t.Fatalf("NextSeqs: %v; want the fast owner's item served and the slow owner's carrying the deadline", err)
	}
	if res[0].Err != nil || res[0].Count != 3 {
		t.Fatalf("the fast owner's item: %+v", res[0])
	}
	if !errors.Is(res[1].Err, context.DeadlineExceeded) && status.Code(res[1].Err) != codes.DeadlineExceeded {
		t.Fatalf("the slow owner's item: %+v; want the deadline", res[1])
	}
}
