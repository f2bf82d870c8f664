package load

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/intervals"
)

// Overload is the flood scenario (--flood-callers): the configured run
// alone, then the same run again while a flood of large batches asks for
// far more than the generator makes, in one invocation.
type Overload struct {
	Alone  *Result `json:"alone"`
	Loaded *Result `json:"with_flood"`
	Flood  *Result `json:"flood"`
	// LayoutRate is the generator's rate (IDs/s); Delivered what the
	// flood and the run got together while flooded, and its share of the
	// rate.
	LayoutRate     float64 `json:"layout_ids_per_s"`
	Delivered      float64 `json:"delivered_ids_per_s"`
	DeliveredRatio float64 `json:"delivered_ratio"`
	// P99Ratio is the run's p99 with the flood over its p99 alone.
	P99Ratio float64 `json:"p99_ratio"`
	// CrossDups counts IDs received both by the run and by the flood;
	// in ranges mode, by more than one of the three windows (the run
	// alone, the run with the flood, the flood), as interval sets make
	// keeping each window cheap.
	CrossDups uint64 `json:"cross_duplicates"`
}

// floodConfig is the flood's run: NextIDs of --flood-batch from
// --flood-callers over --flood-conns, on the run's target and window.
func floodConfig(f *flags, base runConfig) runConfig {
	c := base
	c.label, c.mode, c.batch = "flood", modeBatch, f.floodBatch
	c.callers, c.conns = f.floodCallers, f.floodConns
	c.record = make([]uint64, f.record)
	// The flood shares the node with the run: no CPU or claims of its
	// own to report.
	c.serverPID, c.metricsURL = 0, ""
	return c
}

// overload runs the scenario against cfg's target.
func overload(ctx context.Context, f *flags, cfg runConfig) (*Overload, error) {
	rate, err := layoutRate(ctx, cfg.addr, cfg.tls, cfg.generator)
	if err != nil {
		return nil, err
	}
	o := &Overload{LayoutRate: rate}
	cfg.label = "alone"
	if o.Alone, err = run(ctx, cfg); err != nil {
		return nil, fmt.Errorf("alone: %w", err)
	}
	cfg.label = "with flood"
	fcfg := floodConfig(f, cfg)
	errs := make(chan error, 1)
	go func() {
		var err error
		o.Flood, err = run(ctx, fcfg)
		errs <- err
	}()
	o.Loaded, err = run(ctx, cfg)
	if ferr := <-errs; ferr != nil {
		return nil, fmt.Errorf("flood: %w", ferr)
	}
	if err != nil {
		return nil, fmt.Errorf("with flood: %w", err)
	}
	o.Delivered = float64(o.Loaded.IDs+o.Flood.IDs) / o.Flood.Seconds
	o.DeliveredRatio = o.Delivered / rate
	o.P99Ratio = ratio(float64(o.Loaded.Latency.P99), float64(o.Alone.Latency.P99))
	// run leaves each window's IDs sorted at the front of its record
	// (the flood's always: it calls NextIDs), or as intervals in ranges
	// mode.
	if cfg.mode == modeRanges {
		o.CrossDups = crossDuplicates(fcfg.record[:o.Flood.Checked], o.Alone.ids, o.Loaded.ids)
	} else {
		o.CrossDups = commonSorted(cfg.record[:o.Loaded.Checked], fcfg.record[:o.Flood.Checked])
	}
	return o, nil
}

// crossDuplicates counts the IDs held by more than one of the windows:
// ids (a list, sorted in place) and the sets. Each window has counted its
// own duplicates.
func crossDuplicates(ids []uint64, sets ...*intervals.Set) uint64 {
	var listed intervals.Set
	listed.AddIDs(ids)
	_, n := intervals.Union(append(sets, &listed)...)
	return n
}

// commonSorted counts the values of sorted a also in sorted b.
func commonSorted(a, b []uint64) uint64 {
	var n uint64
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] < b[j]:
			i++
		case a[i] > b[j]:
			j++
		default:
			n++
			i++
		}
	}
	return n
}

// layoutRate asks the node for the generator's capacity in IDs/s: its
// workers (Info) times the layout's rate.
func layoutRate(ctx context.Context, addr string, cfg *tls.Config, name string) (float64, error) {
	g, err := generatorInfo(ctx, addr, cfg, name)
	if err != nil {
		return 0, err
	}
	if _, err := generator.ParseLayout(g.GetLayout()); err != nil {
		return 0, fmt.Errorf("generator %q: layout %q: %w", g.GetName(), g.GetLayout(), err)
	}
	_, rate := capacity(g)
	return rate, nil
}

// generatorInfo asks the node at addr, over a connection of its own, for
// the named generator's Info ("": the default generator).
func generatorInfo(ctx context.Context, addr string, cfg *tls.Config, name string) (*firnv1.GeneratorInfo, error) {
	conn, err := grpc.NewClient(addr, dialOptions(cfg)...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return lookupGenerator(ctx, firnv1.NewIDServiceClient(conn), addr, name)
}

// lookupGenerator calls Info and picks the named generator ("": the
// default one).
func lookupGenerator(ctx context.Context, stub firnv1.IDServiceClient, addr, name string) (*firnv1.GeneratorInfo, error) {
	info, err := stub.Info(ctx, &firnv1.InfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("%s: Info: %w", addr, err)
	}
	for _, g := range info.GetGenerators() {
		if g.GetName() == name || (name == "" && g.GetIsDefault()) {
			return g, nil
		}
	}
	return nil, fmt.Errorf("%s has no generator %q", addr, name)
}

// capacity is what the generator can issue: its workers (len(workers),
// at least 1: a node that does not list them holds one) times the
// layout's rate, in IDs/s; 0 when its layout does not parse.
func capacity(g *firnv1.GeneratorInfo) (workers int, idsPerSec float64) {
	workers = max(1, len(g.GetWorkers()))
	if g.GetKind() == kindSegment {
		return workers, 0 // a counter: no layout bounds its rate
	}
	l, err := generator.ParseLayout(g.GetLayout())
	if err != nil {
		return workers, 0
	}
	return workers, float64(workers) * l.Rate()
}

func writeOverload(w io.Writer, o *Overload) {
	writeResult(w, o.Alone)
	writeResult(w, o.Loaded)
	writeResult(w, o.Flood)
	refusal := "none"
	if l := o.Flood.ErrLatency; l != nil {
		refusal = fmt.Sprintf("p50 %s  p99 %s  max %s", fmtNS(l.P50), fmtNS(l.P99), fmtNS(l.Max))
	}
	fmt.Fprintf(w, "overload: %s p99 %s alone, %s with the flood (%.2f×); flood refused in %s\n",
		o.Alone.Label, fmtNS(o.Alone.Latency.P99), fmtNS(o.Loaded.Latency.P99), o.P99Ratio, refusal)
	fmt.Fprintf(w, "overload: delivered %.0f IDs/s while flooded = %.3f of the generator's %.0f (workers × the layout's rate); %d IDs received by both\n",
		o.Delivered, o.DeliveredRatio, o.LayoutRate, o.CrossDups)
}
