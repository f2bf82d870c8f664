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
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return segmentMetrics{}, fmt.Errorf("--node-metrics %q: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return segmentMetrics{}, fmt.Errorf("--node-metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return segmentMetrics{}, fmt.Errorf("--node-metrics %s: HTTP %s", url, resp.Status)
	}
	m, found, err := parseSegmentMetrics(resp.Body, gen)
	if err != nil {
		return m, fmt.Errorf("--node-metrics %s: %w", url, err)
	}
	if !found {
		return m, fmt.Errorf("--node-metrics %s: no %s{generator=%q}: not a segment generator of this node?", url, metricSegClaims, gen)
	}
	return m, nil
}

// parseSegmentMetrics picks gen's claim counters out of a text
// exposition; found says the claims counter was there.
func parseSegmentMetrics(r io.Reader, gen string) (m segmentMetrics, found bool, err error) {
	label := "{generator=" + strconv.Quote(gen) + "} "
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		var dst *float64
		switch name {
		case metricSegClaims:
			dst = &m.claims
		case metricSegClaimed:
			dst = &m.claimed
		case metricSegStep:
			dst = &m.step
		default:
			continue
		}
		v, ok := strings.CutPrefix("{"+rest, label)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return m, found, fmt.Errorf("%s: %w", line, err)
		}
		*dst = f
		found = found || name == metricSegClaims
	}
	return m, found, sc.Err()
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
