package server

// The status page: GET / on the HTTP listener, a page that needs no
// script and refreshes itself, with the same facts as /readyz and
// /metrics: each generator's state and why, its lease, reservation, lead
// and ring, and the recent state changes.

import (
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/firnid/firn/server/admission"
	"github.com/firnid/firn/server/core"
)

var statusTmpl = template.Must(template.New("status").Funcs(template.FuncMap{
	"dur": func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"ts":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>firn {{.Node}} — {{if .AllServing}}serving{{else}}NOT SERVING{{end}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#111;background:#fff}
h1{font-size:1.4rem} h2{font-size:1.15rem;margin-top:1.6rem}
.serving{color:#0a6b22;font-weight:bold} .down{color:#b00020;font-weight:bold}
table{border-collapse:collapse;margin:.4rem 0} td,th{border:1px solid #ccc;padding:.25rem .6rem;text-align:left;vertical-align:top}
.warn{background:#fff3cd;padding:.4rem .8rem;border:1px solid #e0c060} .fault{background:#fde2e2;padding:.4rem .8rem;border:1px solid #d08080}
small{color:#555}
</style></head><body>
<h1>firn node {{.Node}} <small>cluster {{.Cluster}} · {{.Coordinator}} · version {{.Version}} · instance {{.Instance}}</small></h1>
<p>Clock: {{ts .Now}}{{if .Fault}} <span class="fault">FAULT INJECTION ON: clock offset {{dur .FaultOffset}}</span>{{end}}</p>
{{if .NoNTP}}<p class="warn">No NTP configured (--ntp): clock drift is unchecked.</p>{{else}}<p>NTP: {{.NTP}}</p>{{end}}
{{if .EmbeddedURL}}<p>Embedded etcd: {{.EmbeddedURL}} (a second local node joins with <code>--etcd {{.EmbeddedURL}}</code>; two embedded coordinators are two separate ID spaces)</p>{{end}}
<p>Peers: {{.Peers}}</p>
<p id="clock-check"{{if .Unchecked}} class="warn"{{end}}>Clock check: {{.ClockCheck}}</p>
{{range .Gens}}
<h2>core.Generator {{.Name}}{{if .IsDefault}} (default){{end}}: {{if .Serving}}<span class="serving" id="state-{{.Name}}">SERVING</span>{{else}}<span class="down" id="state-{{.Name}}">NOT SERVING</span>{{end}}</h2>
{{if not .Serving}}<p class="down" id="reason-{{.Name}}">Why: {{.Reason}}</p>{{end}}
<table>
<tr><th>state</th><td>{{.State}}</td></tr>
{{if .Seq}}<tr><th>sequence</th><td><code>{{.Layout}}</code></td></tr>
<tr><th>sections</th><td id="sections-{{.Name}}">{{.Seq.Serving}} answered here ({{.Seq.Owned}} held) of {{len .Owners}}; {{.Seq.Members}} nodes serve it; taken {{.Seq.Takes}}, given up {{.Seq.Releases}}</td></tr>
<tr><th>keys</th><td>{{.Seq.Keys}} in memory (forgotten past the budget: {{.Seq.Evicted}}); {{.Seq.Raises}} writes of the section maxima</td></tr>
<tr><th>values issued</th><td>{{.Issued}} (rate {{printf "%.0f" .Rate}}/s)</td></tr>
{{else if .Segment}}<tr><th>segment</th><td><code>{{.Layout}}</code></td></tr>
<tr><th>counter</th><td id="counter-{{.Name}}">next {{.Segment.Counter.Next}} (seq {{.Segment.Counter.Seq}}, as this node last wrote it)</td></tr>
<tr><th>claimed</th><td>{{.Segment.Available}} IDs held, {{.Segment.Settling}} settling; step {{.Segment.Step}}; {{.Segment.Claimed}} IDs in {{.Segment.Claims}} claims; handed back {{.Segment.HandedBack}}, skipped here {{.Segment.Dropped}}; cluster-wide: counter next {{.Segment.Counter.Next}}, skipped {{.Segment.Counter.Skipped}}</td></tr>
<tr><th>IDs issued</th><td>{{.Issued}} (rate {{printf "%.0f" .Rate}}/s)</td></tr>
<tr><th>max batch / range</th><td>{{.MaxBatch}} / {{.MaxRange}}</td></tr>
{{else}}<tr><th>layout</th><td><code>{{.Layout}}</code> (runs out {{ts .LayoutEnd}})</td></tr>
<tr><th>worker / datacenter</th><td>{{if .HasLease}}{{.Worker}} / {{.Datacenter}}{{else}}none held{{end}}{{if .DatacenterFixed}} (datacenter pinned by --datacenter){{end}}</td></tr>
{{if or (gt .Wide.Max 1) .Wide.Auto}}<tr><th>workers</th><td id="workers-{{.Name}}">{{len .Wide.Workers}} serving of {{.Wide.Wanted}} wanted{{if .Wide.Auto}} (auto, at most {{.Wide.Max}}){{end}}: {{range $i, $w := .Wide.Workers}}{{if $i}}, {{end}}{{$w}}{{end}}{{if .Wide.Degraded}} <span class="warn">{{.Wide.Degraded}}</span>{{end}}</td></tr>{{end}}
<tr><th>reserved until</th><td>{{if .HasLease}}{{ts .ReservedUntil}}{{else}}—{{end}}</td></tr>
<tr><th>clock lead</th><td>{{dur .ClockLead}} (limit max-lead {{dur .MaxLead}})</td></tr>
<tr><th>max staleness</th><td>{{dur .MaxStaleness}}</td></tr>
<tr><th>IDs issued</th><td>{{.Issued}} (rate {{printf "%.0f" .Rate}}/s)</td></tr>
<tr><th>last 2 min</th><td class="charts">IDs/s {{.RateChart}} clock lead {{.LeadChart}}</td></tr>
<tr><th>ring buffer</th><td>{{.Ring.Available}} of {{.Ring.Capacity}} (target {{.Ring.Target}}), empty hits {{.Ring.EmptyHits}}, stale dropped {{.Ring.DroppedStale}}</td></tr>
<tr><th>max batch</th><td>{{.MaxBatch}}</td></tr>
<tr><th>queue</th><td>{{.Queued}} IDs asked for and not yet produced (limit {{.MaxQueue}}); shed {{.Shed}}</td></tr>
{{end}}</table>
<p>Recent state changes, newest first (times on this node's clock):</p>
<table><tr><th>when</th><th>time</th><th>from</th><th>to</th><th>reason</th></tr>
{{range .Events}}<tr><td>{{.Ago}}</td><td>{{ts .At}}</td><td>{{.From}}</td><td>{{.To}}</td><td>{{.Reason}}</td></tr>{{else}}<tr><td colspan="5">none</td></tr>{{end}}
</table>
{{end}}
<p><small>This page refreshes every 2 s and needs no scripts. /readyz and /metrics carry the same facts.</small></p>
</body></html>`))

type statusGen struct {
	core.GeneratorStatus
	Rate float64
	// RateChart and LeadChart draw the last two minutes (inline SVG).
	RateChart, LeadChart template.HTML
	// Admission: the queue, its bound and the requests shed.
	Queued, MaxQueue int64
	Shed             uint64
	Events           []statusEvent // newest first; shadows core.GeneratorStatus.Events
}

type statusEvent struct {
	core.Event
	Ago string
}

func (n *Node) handleStatus(w http.ResponseWriter, r *http.Request) {
	wall, mono := n.clock.Now()
	data := struct {
		Node, Cluster, Coordinator, Version, Instance, EmbeddedURL, NTP, Peers, ClockCheck string
		Now                                                                                time.Time
		Fault, NoNTP, AllServing, Unchecked                                                bool
		FaultOffset                                                                        time.Duration
		Gens                                                                               []statusGen
	}{Node: n.NodeInfo().Name, Cluster: n.cfg.Cluster, Coordinator: n.coordName, Version: n.cfg.Version,
		Instance: n.NodeInfo().InstanceID, EmbeddedURL: n.embeddedURL, Now: wall,
		Fault: n.cfg.EnableFaultInjection, NoNTP: len(n.cfg.NTP) == 0, AllServing: true}
	if n.offset != nil {
		data.FaultOffset = n.offset.CurrentOffset()
	}
	if off, ok := n.policy.LastNTPOffset(); ok {
		data.NTP = fmt.Sprintf("offset %v (limit --max-clock-offset %v)", off.Round(time.Microsecond), n.cfg.MaxClockOffset)
	} else if len(n.cfg.NTP) > 0 {
		data.NTP = fmt.Sprintf("no usable answer yet (limit --max-clock-offset %v)", n.cfg.MaxClockOffset)
	}
	if checked, count, skew := n.policy.PeerStatus(); checked {
		nodes := "nodes"
		if count == 1 {
			nodes = "node (this one)"
		}
		data.Peers = fmt.Sprintf("%d live %s; this clock is %v from their median (limit --max-peer-skew %v)",
			count, nodes, skew.Round(time.Millisecond), n.cfg.MaxPeerSkew)
	} else {
		data.Peers = "not checked yet"
	}
	data.Unchecked, data.ClockCheck = n.policy.ClockCheck()
	for _, rt := range n.core.Generators() {
		st := rt.Status(wall)
		if !st.Serving {
			data.AllServing = false
		}
		sg := statusGen{GeneratorStatus: st, Rate: rt.RecentRate(mono)}
		sg.RateChart, sg.LeadChart = n.charts(rt)
		if f := rt.Fair(); f != nil { // a segment generator queues nothing
			sg.Queued, sg.MaxQueue = f.Queued(), f.MaxQueue()
			for i := range admission.NumShed {
				sg.Shed += f.Shed(i)
			}
		}
		for i := len(st.Events) - 1; i >= 0; i-- {
			e := st.Events[i]
			sg.Events = append(sg.Events, statusEvent{Event: e, Ago: wall.Sub(e.At).Round(100*time.Millisecond).String() + " ago"})
		}
		data.Gens = append(data.Gens, sg)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	statusTmpl.Execute(w, data)
}
