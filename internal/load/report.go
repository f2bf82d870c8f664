package load

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

func fmtNS(ns int64) string {
	switch {
	case ns < 10_000:
		return time.Duration(ns).String()
	case ns < 10_000_000:
		return fmt.Sprintf("%.1fµs", float64(ns)/1e3)
	}
	return fmt.Sprintf("%.2fms", float64(ns)/1e6)
}

func fmtErrors(m map[string]uint64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func writeResult(w io.Writer, r *Result) {
	mode := r.Mode
	if r.Batch > 0 {
		mode = fmt.Sprintf("%s %d", r.Mode, r.Batch)
	}
	fmt.Fprintf(w, "%s %s  mode %s  callers %d  conns %d  %.1fs\n", r.Label, r.Target, mode, r.Callers, r.Conns, r.Seconds)
	if r.Seq != nil {
		fmt.Fprintf(w, "  rpc/s %.0f  values/s %.0f  calls/s %.0f  (%d calls, %d RPCs, %d values)\n", r.RPCPS, r.IDsPS, r.CallsPS, r.Calls, r.RPCs, r.IDs)
	} else {
		fmt.Fprintf(w, "  rpc/s %.0f  ids/s %.0f  calls/s %.0f  (%d calls, %d RPCs, %d IDs)\n", r.RPCPS, r.IDsPS, r.CallsPS, r.Calls, r.RPCs, r.IDs)
	}
	sampled := ""
	if r.Mode == modePrefetch {
		sampled = fmt.Sprintf(", 1 call in %d timed", prefetchSample)
	}
	fmt.Fprintf(w, "  latency p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (%d samples%s)\n",
		fmtNS(r.Latency.P50), fmtNS(r.Latency.P90), fmtNS(r.Latency.P99), fmtNS(r.Latency.P999), fmtNS(r.Latency.Max), r.Latency.Samples, sampled)
	fmt.Fprintf(w, "  errors %s\n", fmtErrors(r.Errors))
	if l := r.ErrLatency; l != nil {
		fmt.Fprintf(w, "  failed calls' latency p50 %s  p99 %s  max %s\n", fmtNS(l.P50), fmtNS(l.P99), fmtNS(l.Max))
	}
	if q := r.Seq; q != nil {
		writeSeq(w, r, q)
	} else {
		fmt.Fprintf(w, "  duplicates %d  (%d of %d IDs checked)\n", r.Dups, r.Checked, r.IDs)
	}
	if c := r.ServerCPU; c != nil {
		fmt.Fprintf(w, "  server cpu %.2f of a core, %s per call  (pid %d, %.2fs in 10 ms ticks)\n", c.Cores, fmtNS(int64(c.PerCallNS)), c.PID, c.CPUSeconds)
	}
	if cw := r.CounterWrites; cw != nil {
		fmt.Fprintf(w, "  counter writes %.2f/s  (%d claims of generator %q over the window, %d IDs claimed; step now %d)\n",
			cw.PerSecond, cw.Claims, cw.Generator, cw.ClaimedIDs, cw.Step)
	}
	if r.Mode == modeRanges {
		switch {
		case r.Capacity > 0:
			fmt.Fprintf(w, "  capacity %.0f IDs/s (workers %d × the layout's rate), delivered %.3f of it\n", r.Capacity, r.Workers, r.CapacityRatio)
		case r.Kind == kindSegment:
			fmt.Fprintf(w, "  capacity: none from a layout (a segment generator: its counter's claims bound it)\n")
		default:
			fmt.Fprintf(w, "  capacity unknown: Info's layout does not parse (workers %d)\n", r.Workers)
		}
		fmt.Fprintf(w, "  %d intervals held the IDs; malformed responses %d\n", r.Intervals, r.Malformed)
	}
}

func writeText(w io.Writer, rep *Report) {
	if rep.Pin != "" {
		fmt.Fprintln(w, rep.Pin)
	}
	if rep.Run != nil {
		writeResult(w, rep.Run)
	}
	if c := rep.Compare; c != nil {
		for _, p := range c.Pairs {
			writeResult(w, p.Node)
			writeResult(w, p.Noop)
		}
		fmt.Fprintf(w, "%-6s %12s %12s %8s %8s %8s %9s\n", "pair", "rpc ratio", "ids ratio", "p50", "p99", "p99.9", "cpu/call")
		for i, p := range c.Pairs {
			r := p.Ratios
			fmt.Fprintf(w, "%-6d %12.3f %12.3f %8.3f %8.3f %8.3f %9s\n", i+1, r.RPC, r.IDs, r.P50, r.P99, r.P999, fmtRatio(r.CPUPerCall))
		}
		m := c.Median
		fmt.Fprintf(w, "%-6s %12.3f %12.3f %8.3f %8.3f %8.3f %9s   (node / noop, median of %d pairs)\n", "median", m.RPC, m.IDs, m.P50, m.P99, m.P999, fmtRatio(m.CPUPerCall), len(c.Pairs))
		if in := c.Interval; in.Confidence > 0 {
			cpu := ""
			if in.CPUPerCall[1] > 0 {
				cpu = fmt.Sprintf("cpu/call %.3f–%.3f, ", in.CPUPerCall[0], in.CPUPerCall[1])
			}
			fmt.Fprintf(w, "the medians lie within %srpc %.3f–%.3f (%.1f %% confidence, from the spread of the %d pairs)\n",
				cpu, in.RPC[0], in.RPC[1], 100*in.Confidence, len(c.Pairs))
		}
		if c.SelfCheck {
			fmt.Fprintln(w, "self check: the target is a second no-op server, so every ratio is 1 but for the method's own noise on this machine")
		}
		writeCompareMedians(w, c)
		gogc := ""
		if c.NoopGOGC > 0 {
			gogc = fmt.Sprintf(" at GOGC %d", c.NoopGOGC)
		}
		own := ""
		if c.NoopHeapOwn >= 0 && c.NoopHeap > 0 {
			own = fmt.Sprintf(": its own %.1f MB, %.1f MB held", float64(c.NoopHeapOwn)/1e6, float64(max(c.NoopHeap-c.NoopHeapOwn, 0))/1e6)
		}
		fmt.Fprintf(w, "no-op live heap: %.1f MB%s%s (%s)\n", float64(c.NoopHeap)/1e6, gogc, own, c.NoopHeapFrom)
		if len(c.Pairs) > 0 && c.Pairs[0].Node.Capacity > 0 {
			var node, noop []float64
			for _, p := range c.Pairs {
				node, noop = append(node, p.Node.CapacityRatio), append(noop, p.Noop.CapacityRatio)
			}
			fmt.Fprintf(w, "capacity (%d workers, %.0f IDs/s): node delivered %.3f of it, noop %.3f (medians)\n",
				c.Pairs[0].Node.Workers, c.Pairs[0].Node.Capacity, median(node), median(noop))
		}
	}
	if o := rep.Overload; o != nil {
		writeOverload(w, o)
	}
	if i := rep.Idle; i != nil {
		fmt.Fprintf(w, "idle pid %d over %.1fs: cpu %.3fs = %.2f%% of a core, %.0f context switches/s, rss max %.1f MB, end %.1f MB\n",
			i.PID, i.Seconds, i.CPUSeconds, i.CPUPercent, i.Switches, float64(i.RSSMaxBytes)/1e6, float64(i.RSSEndBytes)/1e6)
	}
}

// writeSeq prints a sequence run's own figures.
func writeSeq(w io.Writer, r *Result, q *SeqResult) {
	fmt.Fprintf(w, "  generator %q: %d sections; keys %d %s; owners called %d (%s)\n",
		q.Generator, q.Sections, q.Keys, q.KeyDist, len(q.Owners), strings.Join(q.Owners, " "))
	fmt.Fprintf(w, "  refusals: WRONG_NODE followed %d, SECTION_MOVING %d", q.WrongNode, q.SectionMoving)
	if len(q.ItemErrors) > 0 {
		fmt.Fprintf(w, "; items refused %s", fmtErrors(q.ItemErrors))
	}
	if r.Mode == modeSeqs {
		fmt.Fprintf(w, "; %.1f items per NextSeqs", q.ItemsPerRPC)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  checker: %d violations  (%d of %d responses checked, %d keys)\n", q.Violations, q.Checked, q.Responses, q.CheckedKeys)
	for _, v := range q.Samples {
		fmt.Fprintf(w, "    %s\n", v)
	}
	if r.Malformed > 0 {
		fmt.Fprintf(w, "  malformed responses %d (a count other than asked)\n", r.Malformed)
	}
	if nw := q.NodeWrites; nw != nil {
		fmt.Fprintf(w, "  node sequence writes %.2f/s  (%d over the window); keys in memory %d\n", nw.PerSecond, nw.Writes, nw.Keys)
	}
}

// fmtRatio prints a ratio, or "-" where there is none.
func fmtRatio(r float64) string {
	if r <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", r)
}

// writeCompareMedians prints the medians over the pairs of what each side
// measured beside its rate: the servers' CPU per call and the node's
// counter writes.
func writeCompareMedians(w io.Writer, c *Comparison) {
	var nodeCPU, noopCPU, nodeCores, noopCores, writes, claimed, seqWrites []float64
	var wrongNode, moving uint64
	seqMode := false
	for _, p := range c.Pairs {
		if s := p.Node.ServerCPU; s != nil {
			nodeCPU, nodeCores = append(nodeCPU, s.PerCallNS), append(nodeCores, s.Cores)
		}
		if s := p.Noop.ServerCPU; s != nil {
			noopCPU, noopCores = append(noopCPU, s.PerCallNS), append(noopCores, s.Cores)
		}
		for _, r := range []*Result{p.Node, p.Noop} {
			if q := r.Seq; q != nil {
				seqMode = true
				wrongNode += q.WrongNode
				moving += q.SectionMoving
			}
		}
		if q := p.Node.Seq; q != nil && q.NodeWrites != nil {
			seqWrites = append(seqWrites, q.NodeWrites.PerSecond)
		}
		if cw := p.Node.CounterWrites; cw != nil {
			writes = append(writes, cw.PerSecond)
			if cw.Claims > 0 {
				claimed = append(claimed, float64(cw.ClaimedIDs)/float64(cw.Claims))
			}
		}
	}
	side := func(perCall, cores []float64) string {
		if len(perCall) == 0 {
			return "unknown (PID not found)"
		}
		return fmt.Sprintf("%s per call, %.2f of a core", fmtNS(int64(median(perCall))), median(cores))
	}
	fmt.Fprintf(w, "server cpu (medians): node %s; noop %s\n", side(nodeCPU, nodeCores), side(noopCPU, noopCores))
	if len(writes) > 0 {
		per := "no claim in any window"
		if len(claimed) > 0 {
			per = fmt.Sprintf("%.0f IDs per claim", median(claimed))
		}
		fmt.Fprintf(w, "node counter writes (segment claims, median of %d windows): %.2f/s, %s\n", len(writes), median(writes), per)
	}
	if seqMode {
		fmt.Fprintf(w, "sequence refusals over all windows: WRONG_NODE followed %d, SECTION_MOVING %d\n", wrongNode, moving)
	}
	if len(seqWrites) > 0 {
		fmt.Fprintf(w, "node sequence writes (median of %d windows): %.2f/s\n", len(seqWrites), median(seqWrites))
	}
}
