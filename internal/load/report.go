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
	fmt.Fprintf(w, "  rpc/s %.0f  ids/s %.0f  calls/s %.0f  (%d calls, %d RPCs, %d IDs)\n", r.RPCPS, r.IDsPS, r.CallsPS, r.Calls, r.RPCs, r.IDs)
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
	fmt.Fprintf(w, "  duplicates %d  (%d of %d IDs checked)\n", r.Dups, r.Checked, r.IDs)
	if r.Mode == modeRanges {
		if r.Capacity > 0 {
			fmt.Fprintf(w, "  capacity %.0f IDs/s (workers %d × the layout's rate), delivered %.3f of it\n", r.Capacity, r.Workers, r.CapacityRatio)
		} else {
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
		fmt.Fprintf(w, "%-6s %12s %12s %8s %8s %8s\n", "pair", "rpc ratio", "ids ratio", "p50", "p99", "p99.9")
		for i, p := range c.Pairs {
			r := p.Ratios
			fmt.Fprintf(w, "%-6d %12.3f %12.3f %8.3f %8.3f %8.3f\n", i+1, r.RPC, r.IDs, r.P50, r.P99, r.P999)
		}
		m := c.Median
		fmt.Fprintf(w, "%-6s %12.3f %12.3f %8.3f %8.3f %8.3f   (node / noop, median of %d pairs)\n", "median", m.RPC, m.IDs, m.P50, m.P99, m.P999, len(c.Pairs))
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
