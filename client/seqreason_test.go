package client

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	firnv1 "github.com/firnid/firn/client/firnv1"
)

// movingThenHungService owns every section of a sequence generator: its
// first NextSeq is refused SECTION_MOVING with a short RetryInfo, and the
// next hangs until the caller's deadline ends it.
type movingThenHungService struct {
	firnv1.UnimplementedIDServiceServer
	addr  string
	calls atomic.Int32
}

func (s *movingThenHungService) Info(context.Context, *firnv1.InfoRequest) (*firnv1.InfoResponse, error) {
	g := &firnv1.GeneratorInfo{Name: "chats", Kind: "seq", Sections: 1, Serving: true,
		SectionOwners: []*firnv1.SectionOwner{{Section: 0, Address: s.addr, Serving: true}}}
	return &firnv1.InfoResponse{NodeName: "seq", Generators: []*firnv1.GeneratorInfo{g}}, nil
}

func (s *movingThenHungService) NextSeq(ctx context.Context, _ *firnv1.NextSeqRequest) (*firnv1.NextSeqResponse, error) {
	if s.calls.Add(1) == 1 {
		st := status.New(codes.Unavailable, "section 0 moves")
		st, _ = st.WithDetails(
			&errdetails.ErrorInfo{Reason: firnv1.ErrorReason_SECTION_MOVING.String(), Domain: "firn.v1.IDService"},
			&errdetails.RetryInfo{RetryDelay: durationpb.New(20 * time.Millisecond)})
		return nil, st.Err()
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSeqDeadlineKeepsLastRefusal: NextSeq's owner said SECTION_MOVING,
// then did not answer before the caller's deadline. The caller is told
// the owner's last refusal (as NextSeqs' items and the Java client's
// sequence calls are), not a bare deadline: every refusal says why.
func TestSeqDeadlineKeepsLastRefusal(t *testing.T) {
	s := &movingThenHungService{}
	s.addr = serveIDs(t, s, nil)
	c := newClient(t, []string{s.addr}, WithoutHealthCheck(), WithGenerator("chats"), WithCallTimeout(5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := c.NextSeq(ctx, []byte("chat:42"), 1)
	if err == nil {
		t.Fatal("NextSeq served by an owner that never answered")
	}
	if s.calls.Load() < 2 {
		t.Fatalf("owner asked %d times, want the refusal retried", s.calls.Load())
	}
	if !errors.Is(err, context.DeadlineExceeded) && status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("NextSeq: %v; want the caller's deadline", err)
	}
	if r := Reason(err); r != firnv1.ErrorReason_SECTION_MOVING {
		t.Fatalf("NextSeq: %v (reason %v); want the owner's last refusal, SECTION_MOVING, in the error", err, r)
	}
}

func (s *movingThenHungService) NextSeqs(ctx context.Context, req *firnv1.NextSeqsRequest) (*firnv1.NextSeqsResponse, error) {
	if s.calls.Add(1) == 1 {
		resp := &firnv1.NextSeqsResponse{}
		for range req.GetItems() {
			resp.Results = append(resp.Results, &firnv1.SeqResult{Reason: "SECTION_MOVING", Error: "section 0 moves",
				RetryAfter: durationpb.New(20 * time.Millisecond)})
		}
		return resp, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSeqsDeadlineKeepsLastRefusal: as TestSeqDeadlineKeepsLastRefusal,
// for NextSeqs ("An item not served by the deadline carries the last
// refusal"): the attempt the deadline cut says nothing new, and does not
// replace the owner's SECTION_MOVING.
func TestSeqsDeadlineKeepsLastRefusal(t *testing.T) {
	s := &movingThenHungService{}
	s.addr = serveIDs(t, s, nil)
	c := newClient(t, []string{s.addr}, WithoutHealthCheck(), WithGenerator("chats"), WithCallTimeout(5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	res, err := c.NextSeqs(ctx, []SeqItem{{Key: []byte("chat:42"), Count: 1}})
	if err != nil {
		t.Fatalf("NextSeqs: %v; want the item to carry its refusal", err)
	}
	if s.calls.Load() < 2 {
		t.Fatalf("owner asked %d times, want the refusal retried", s.calls.Load())
	}
	if res[0].Err == nil {
		t.Fatal("the item served by an owner that never answered")
	}
	if r := Reason(res[0].Err); r != firnv1.ErrorReason_SECTION_MOVING {
		t.Fatalf("the item: %v (reason %v); want the owner's last refusal, SECTION_MOVING, in the error", res[0].Err, r)
	}
}
