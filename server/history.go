package server

// The recent history the status page draws: every second, each
// generator's issue rate and clock lead, for the last two minutes, as
// server-rendered SVG (the page needs no script).

import (
	"context"
	"fmt"
	"github.com/firnid/firn/server/core"
	"html/template"
	"strings"
	"sync"
	"time"
)

// historyLen is how many one-second samples the page draws.
const historyLen = 120

// sample is one second of a generator.
type sample struct {
	rate float64       // IDs/s over the second
	lead time.Duration // logical time ahead of the clock at its end
}

// history is a generator's last historyLen samples.
type history struct {
	mu      sync.Mutex
	samples []sample // oldest first
	issued  uint64   // the issued count at the last sample
	at      time.Duration
	have    bool
}

// add records one sample from the issued count and the lead at the
// monotonic reading mono.
func (h *history) add(mono time.Duration, issued uint64, lead time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.have && mono > h.at {
		rate := float64(issued-h.issued) / (mono - h.at).Seconds()
		h.samples = append(h.samples, sample{rate: rate, lead: lead})
		if len(h.samples) > historyLen {
			h.samples = h.samples[len(h.samples)-historyLen:]
		}
	}
	h.issued, h.at, h.have = issued, mono, true
}

func (h *history) snapshot() []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]sample(nil), h.samples...)
}

// sampleHistory records every generator's sample once a second until ctx
// ends (the node's drain).
func (n *Node) sampleHistory(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		wall, mono := n.clock.Now()
		for _, rt := range n.core.Generators() {
			lead, _ := rt.Lead(wall)
			lead = max(lead, 0)
			n.history(rt).add(mono, rt.Issued(), lead)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sparkline draws values (oldest first) as an SVG polyline scaled to top
// (at least the largest value), with a dashed line at limit when limit > 0.
// The element carries the class spark and a title with the latest value.
func sparkline(id string, values []float64, top, limit float64, title string) template.HTML {
	const w, h = 240.0, 36.0
	for _, v := range values {
		top = max(top, v)
	}
	if top <= 0 {
		top = 1
	}
	y := func(v float64) float64 { return h - 2 - (h-4)*v/top }
	var pts strings.Builder
	for i, v := range values {
		x := w * float64(i) / float64(max(historyLen-1, 1))
		fmt.Fprintf(&pts, "%.1f,%.1f ", x, y(v))
	}
	var lim string
	if limit > 0 {
		lim = fmt.Sprintf(`<line x1="0" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#b00020" stroke-dasharray="4 3"/>`, w, y(limit), y(limit))
	}
	return template.HTML(fmt.Sprintf(`<svg class="spark" id="%s" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img"><title>%s</title><rect width="%.0f" height="%.0f" fill="#f6f6f6"/>%s<polyline fill="none" stroke="#0a4d8c" stroke-width="1.5" points="%s"/></svg>`,
		template.HTMLEscapeString(id), w, h, w, h, template.HTMLEscapeString(title), w, h, lim, strings.TrimSpace(pts.String())))
}

// history is rt's samples (none yet for a generator added a moment ago).
func (n *Node) history(rt *core.Generator) *history {
	h, _ := n.hist.LoadOrStore(rt.Name(), &history{})
	return h.(*history)
}

// charts renders the two charts of a generator.
func (n *Node) charts(rt *core.Generator) (rate, lead template.HTML) {
	s := n.history(rt).snapshot()
	rates := make([]float64, len(s))
	leads := make([]float64, len(s))
	var lastRate float64
	var lastLead time.Duration
	for i, x := range s {
		rates[i], leads[i] = x.rate, x.lead.Seconds()
		lastRate, lastLead = x.rate, x.lead
	}
	name := rt.Name()
	rate = sparkline("rate-"+name, rates, 0, 0, fmt.Sprintf("IDs/s over the last %d s; now %.0f/s", len(s), lastRate))
	lead = sparkline("lead-"+name, leads, rt.Config().MaxLead.Seconds(), rt.Config().MaxLead.Seconds(),
		fmt.Sprintf("clock lead over the last %d s; now %v (dashed: max-lead %v)", len(s), lastLead.Round(time.Millisecond), rt.Config().MaxLead))
	return rate, lead
}
