package server

import (
	"context"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/server/core"
)

// idService implements firn.v1.IDService over the node's generators.
type idService struct {
	firnv1.UnimplementedIDServiceServer
	node *Node
}

var _ firnv1.IDServiceServer = (*idService)(nil)

func (s *idService) NextID(ctx context.Context, req *firnv1.NextIDRequest) (*firnv1.NextIDResponse, error) {
	id, err := s.node.core.NextID(ctx, req.GetGenerator())
	if err != nil {
		return nil, grpcError(err)
	}
	return &firnv1.NextIDResponse{Id: id}, nil
}

func (s *idService) NextIDs(ctx context.Context, req *firnv1.NextIDsRequest) (*firnv1.NextIDsResponse, error) {
	ids, err := s.node.core.IDs(ctx, req.GetGenerator(), int64(req.GetCount()))
	if err != nil {
		return nil, grpcError(err)
	}
	return &firnv1.NextIDsResponse{Ids: ids}, nil
}

func (s *idService) NextRange(ctx context.Context, req *firnv1.NextRangeRequest) (*firnv1.NextRangeResponse, error) {
	runs, err := s.node.core.NextRange(ctx, req.GetGenerator(), req.GetCount())
	if err != nil {
		return nil, grpcError(err)
	}
	out := make([]firnv1.Run, len(runs))
	resp := &firnv1.NextRangeResponse{Runs: make([]*firnv1.Run, len(runs))}
	for i, r := range runs {
		out[i].First, out[i].Count = r.First, r.Count
		resp.Runs[i] = &out[i]
	}
	return resp, nil
}

func (s *idService) Decode(ctx context.Context, req *firnv1.DecodeRequest) (*firnv1.DecodeResponse, error) {
	if err := s.node.core.Authorize(ctx, req.GetGenerator()); err != nil {
		return nil, grpcError(err)
	}
	rt, err := s.node.core.Lookup(req.GetGenerator())
	if err != nil {
		return nil, grpcError(err)
	}
	p, err := rt.Decode(req.GetId())
	if err != nil {
		return nil, grpcError(err)
	}
	return &firnv1.DecodeResponse{
		Time:       timestamppb.New(p.Time),
		Datacenter: uint32(p.Datacenter),
		Worker:     uint32(p.Worker),
		Sequence:   uint32(p.Sequence),
	}, nil
}

func (s *idService) Info(ctx context.Context, _ *firnv1.InfoRequest) (*firnv1.InfoResponse, error) {
	n := s.node
	resp := &firnv1.InfoResponse{
		NodeName:        n.NodeInfo().Name,
		InstanceId:      n.NodeInfo().InstanceID,
		Version:         n.cfg.Version,
		EmbeddedEtcdUrl: n.embeddedURL,
		Cluster:         n.cfg.Cluster,
		Coordinator:     n.coordName,
	}
	resp.ClockUnchecked, resp.ClockCheck = n.policy.ClockCheck()
	wall, _ := n.clock.Now()
	ntpOffset, ntpOK := n.policy.LastNTPOffset()
	for _, rt := range n.core.Generators() {
		st := rt.Status(wall)
		gi := &firnv1.GeneratorInfo{
			Name:            st.Name,
			Layout:          st.Layout,
			IsDefault:       st.IsDefault,
			Worker:          uint32(st.Worker),
			Datacenter:      uint32(st.Datacenter),
			Serving:         st.Serving,
			State:           st.State,
			Reason:          st.Reason,
			Cause:           string(st.Cause),
			DatacenterFixed: st.DatacenterFixed,
			ClockLead:       durationpb.New(st.ClockLead),
			MaxBatch:        uint32(st.MaxBatch),
			MaxLead:         durationpb.New(st.MaxLead),
			MaxStaleness:    durationpb.New(st.MaxStaleness),
			IdsIssued:       st.Issued,
			NtpChecked:      ntpOK,
			WorkersWanted:   uint32(st.Wide.Wanted),
			MaxRange:        st.MaxRange,
			Kind:            st.Kind,
		}
		if sq := st.Seq; sq != nil {
			gi.Sections, gi.SeqKeys = uint32(len(st.Owners)), uint64(max(sq.Keys, 0))
			for _, o := range st.Owners {
				gi.SectionOwners = append(gi.SectionOwners, &firnv1.SectionOwner{Section: uint32(o.Section),
					Address: o.Node.Address, Node: o.Node.Name, Serving: o.Node.Address != "" && (!o.Mine || o.Serving)})
			}
		}
		if seg := st.Segment; seg != nil {
			gi.CounterNext, gi.SegmentStep, gi.SegmentSkipped = seg.Counter.Next, seg.Step, seg.Counter.Skipped
		}
		for _, w := range st.Wide.Workers {
			gi.Workers = append(gi.Workers, uint32(w))
		}
		if ntpOK {
			gi.NtpOffset = durationpb.New(ntpOffset)
		}
		if !st.ReservedUntil.IsZero() {
			gi.ReservedUntil = timestamppb.New(st.ReservedUntil)
		}
		resp.Generators = append(resp.Generators, gi)
	}
	return resp, nil
}

func (s *idService) NextSeq(ctx context.Context, req *firnv1.NextSeqRequest) (*firnv1.NextSeqResponse, error) {
	n := uint64(max(req.GetCount(), 1))
	first, err := s.node.core.NextSeq(ctx, req.GetGenerator(), req.GetKey(), n)
	if err != nil {
		return nil, grpcError(err)
	}
	return &firnv1.NextSeqResponse{First: first, Count: uint32(n)}, nil
}

func (s *idService) NextSeqs(ctx context.Context, req *firnv1.NextSeqsRequest) (*firnv1.NextSeqsResponse, error) {
	items := make([]core.SeqItem, len(req.GetItems()))
	for i, it := range req.GetItems() {
		items[i] = core.SeqItem{Key: it.GetKey(), Count: uint64(max(it.GetCount(), 1))}
	}
	if err := s.node.core.NextSeqs(ctx, req.GetGenerator(), items); err != nil {
		return nil, grpcError(err)
	}
	out := make([]firnv1.SeqResult, len(items))
	resp := &firnv1.NextSeqsResponse{Results: make([]*firnv1.SeqResult, len(items))}
	for i, it := range items {
		r := &out[i]
		if it.Err != nil {
			r.Error = it.Err.Error()
			if d, ok := describe(it.Err); ok {
				r.Reason, r.Owner = string(d.reason), d.metadata["owner"]
				if d.retry > 0 {
					r.RetryAfter = durationpb.New(d.retry)
				}
			}
		} else {
			r.First, r.Count = it.First, uint32(it.Count)
		}
		resp.Results[i] = r
	}
	return resp, nil
}

func (s *idService) CurrentSeq(ctx context.Context, req *firnv1.CurrentSeqRequest) (*firnv1.CurrentSeqResponse, error) {
	v, err := s.node.core.CurrentSeq(ctx, req.GetGenerator(), req.GetKey())
	if err != nil {
		return nil, grpcError(err)
	}
	return &firnv1.CurrentSeqResponse{Value: v}, nil
}
