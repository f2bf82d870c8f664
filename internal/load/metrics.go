package load

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// segmentMetrics is what a node's /metrics says of one segment
// generator's claims at one moment.
type segmentMetrics struct {
	claims, claimed, step float64
}

// The node's metrics read by --node-metrics (server/metrics.go).
const (
	metricSegClaims  = "firn_segment_claims_total"
	metricSegClaimed = "firn_segment_claimed_ids_total"
	metricSegStep    = "firn_segment_step"
)

// readSegmentMetrics reads generator gen's claim counters from a node's
// Prometheus text exposition at url. A generator without them (not a
// segment generator, or no such generator) is an error.
func readSegmentMetrics(ctx context.Context, url, gen string) (segmentMetrics, error) {
	var m segmentMetrics
	var found bool
	err := fetchMetrics(ctx, url, func(r io.Reader) (err error) {
		m, found, err = parseSegmentMetrics(r, gen)
		return err
	})
	if err == nil && !found {
		err = fmt.Errorf("--node-metrics %s: no %s{generator=%q}: not a segment generator of this node?", url, metricSegClaims, gen)
	}
	return m, err
}

// fetchMetrics GETs a node's /metrics at url and hands the body to parse.
func fetchMetrics(ctx context.Context, url string, parse func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("--node-metrics %q: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("--node-metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("--node-metrics %s: HTTP %s", url, resp.Status)
	}
	if err := parse(resp.Body); err != nil {
		return fmt.Errorf("--node-metrics %s: %w", url, err)
	}
	return nil
}

// parseSegmentMetrics picks gen's claim counters out of a text
// exposition; found says the claims counter was there.
func parseSegmentMetrics(r io.Reader, gen string) (m segmentMetrics, found bool, err error) {
	seen, err := parseGeneratorMetrics(r, gen, map[string]*float64{
		metricSegClaims: &m.claims, metricSegClaimed: &m.claimed, metricSegStep: &m.step})
	return m, seen[metricSegClaims], err
}

// parseGeneratorMetrics reads, from a text exposition, the samples
// labelled {generator="gen"} alone of the metrics named in dst into
// them; seen says which it found.
func parseGeneratorMetrics(r io.Reader, gen string, dst map[string]*float64) (seen map[string]bool, err error) {
	seen = map[string]bool{}
	label := "{generator=" + strconv.Quote(gen) + "} "
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		d, ok := dst[name]
		if !ok {
			continue
		}
		v, ok := strings.CutPrefix("{"+rest, label)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return seen, fmt.Errorf("%s: %w", line, err)
		}
		*d = f
		seen[name] = true
	}
	return seen, sc.Err()
}

// since is what the counters say of the window from m0 to m, of seconds.
func (m segmentMetrics) since(m0 segmentMetrics, gen string, seconds float64) *CounterWrites {
	claims := uint64(max(m.claims-m0.claims, 0))
	return &CounterWrites{
		Generator:  gen,
		Claims:     claims,
		PerSecond:  ratio(float64(claims), seconds),
		ClaimedIDs: uint64(max(m.claimed-m0.claimed, 0)),
		Step:       uint64(m.step),
	}
}

// seqMetrics is what a node's /metrics says of one sequence generator at
// one moment.
type seqMetrics struct {
	writes, keys float64
}

// The node's sequence metrics read by --node-metrics (server/metrics.go).
const (
	metricSeqWrites = "firn_seq_writes_total"
	metricSeqKeys   = "firn_seq_keys"
)

// readSeqMetrics reads sequence generator gen's writes and keys from a
// node's /metrics at url. A generator without them is an error.
func readSeqMetrics(ctx context.Context, url, gen string) (seqMetrics, error) {
	var m seqMetrics
	var found bool
	err := fetchMetrics(ctx, url, func(r io.Reader) (err error) {
		m, found, err = parseSeqMetrics(r, gen)
		return err
	})
	if err == nil && !found {
		err = fmt.Errorf("--node-metrics %s: no %s{generator=%q}: not a sequence generator of this node?", url, metricSeqWrites, gen)
	}
	return m, err
}

// parseSeqMetrics picks gen's sequence metrics out of a text exposition;
// found says the writes counter was there.
func parseSeqMetrics(r io.Reader, gen string) (m seqMetrics, found bool, err error) {
	seen, err := parseGeneratorMetrics(r, gen, map[string]*float64{metricSeqWrites: &m.writes, metricSeqKeys: &m.keys})
	return m, seen[metricSeqWrites], err
}

// since is what the metrics say of the window from m0 to m, of seconds.
func (m seqMetrics) since(m0 seqMetrics, gen string, seconds float64) *SeqWrites {
	w := uint64(max(m.writes-m0.writes, 0))
	return &SeqWrites{Generator: gen, Writes: w, PerSecond: ratio(float64(w), seconds), Keys: uint64(max(m.keys, 0))}
}

// The Go runtime's metrics of the node's heap, read by --noop-heap auto.
const (
	metricHeapGoal = "go_memstats_next_gc_bytes" // the heap size at which the next collection starts
	metricGOGC     = "go_gc_gogc_percent"
)

// readLiveHeap estimates the node's live heap from its /metrics at url,
// and reads its GOGC: the next collection's goal is the live heap grown by
// GOGC percent (GOGC 100 where the node does not say).
func readLiveHeap(ctx context.Context, url string) (live int64, gogcPercent int, err error) {
	var goal, gogc float64
	var haveGoal, haveGOGC bool
	err = fetchMetrics(ctx, url, func(r io.Reader) error {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			name, v, ok := strings.Cut(sc.Text(), " ")
			if !ok || (name != metricHeapGoal && name != metricGOGC) {
				continue
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return fmt.Errorf("%s: %w", sc.Text(), err)
			}
			if name == metricHeapGoal {
				goal, haveGoal = f, true
			} else {
				gogc, haveGOGC = f, true
			}
		}
		return sc.Err()
	})
	switch {
	case err != nil:
		return 0, 0, err
	case !haveGoal:
		return 0, 0, fmt.Errorf("--node-metrics %s: no %s", url, metricHeapGoal)
	case !haveGOGC || gogc <= 0:
		gogc = 100
	}
	return int64(goal * 100 / (100 + gogc)), int(gogc), nil
}
