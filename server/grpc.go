package server

import (
	"context"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	firnv1 "github.com/firnid/firn/client/firnv1"
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
	for _, rt := range n.gens {
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
