package server

import (
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/server/admission"
)

// metrics are the node's Prometheus metrics, on a registry the node owns.
// Event counters are incremented where the events happen; everything that
// is state is read at scrape time by the collector below, so the domain
// types stay ignorant of Prometheus.
type metrics struct {
	grpc        *grpcMetrics
	transitions *prometheus.CounterVec
}

func newMetrics(n *Node) *metrics {
	// The interceptor times calls: the monotonic clock alone, in one read
	// where the clock has one (the system clock: Now reads two).
	mono := func() time.Duration { _, m := n.clock.Now(); return m }
	if f, ok := n.clock.(interface{ FastMono() (time.Duration, bool) }); ok {
		if _, ok := f.FastMono(); ok {
			mono = func() time.Duration { m, _ := f.FastMono(); return m }
		}
	}
	m := &metrics{
		grpc: newGRPCMetrics(mono),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "firn_state_transitions_total",
			Help: "Serving-state transitions, by generator and new state."}, []string{"generator", "state"}),
	}
	n.reg.MustRegister(m.grpc.collectors()...)
	n.reg.MustRegister(m.transitions, &nodeCollector{n: n},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	n.reg.MustRegister(n.policy.Collectors()...)
	n.reg.MustRegister(n.core.Collectors()...)
	return m
}

var (
	descIssued       = prometheus.NewDesc("firn_ids_issued_total", "IDs handed out, by generator.", []string{"generator"}, nil)
	descRingCap      = prometheus.NewDesc("firn_ringbuffer_capacity", "Ring buffer slots.", []string{"generator"}, nil)
	descRingAvail    = prometheus.NewDesc("firn_ringbuffer_available", "IDs buffered now.", []string{"generator"}, nil)
	descRingTarget   = prometheus.NewDesc("firn_ringbuffer_target", "IDs the filler keeps ready, sized to demand.", []string{"generator"}, nil)
	descRingEmpty    = prometheus.NewDesc("firn_ringbuffer_empty_hits_total", "Takes that found the ring empty (served by direct generation).", []string{"generator"}, nil)
	descRingStale    = prometheus.NewDesc("firn_ringbuffer_stale_dropped_total", "Buffered IDs dropped for exceeding max-staleness.", []string{"generator"}, nil)
	descRingRefills  = prometheus.NewDesc("firn_ringbuffer_refills_total", "Refill rounds that added IDs.", []string{"generator"}, nil)
	descServing      = prometheus.NewDesc("firn_serving", "1 while the generator serves.", []string{"generator"}, nil)
	descQueueIDs     = prometheus.NewDesc("firn_queue_ids", "IDs asked of the generator and not yet produced (admission's queue).", []string{"generator"}, nil)
	descQueueSeconds = prometheus.NewDesc("firn_queue_seconds", "The queue as time at the layout's rate.", []string{"generator"}, nil)
	descQueueLimit   = prometheus.NewDesc("firn_queue_limit_ids", "The queue bound (--max-queue at the layout's rate).", []string{"generator"}, nil)
	descShed         = prometheus.NewDesc("firn_requests_shed_total", "Requests refused at once by admission (RESOURCE_EXHAUSTED), by reason: queue_full, deadline.", []string{"generator", "reason"}, nil)
	descRetired      = prometheus.NewDesc("firn_generator_retired", "1 for a generator its stored definition retired (`firn generator retire`): it no longer serves, for good, and is no outage; 0 for the others.", []string{"generator"}, nil)
	descNotServing   = prometheus.NewDesc("firn_not_serving", "1 for each cause holding the generator out, 0 for the others; every cause of the fixed list (the API's ErrorReason names) is exported at all times.", []string{"generator", "cause"}, nil)
	descState        = prometheus.NewDesc("firn_state", "1 for the generator's current state.", []string{"generator", "state"}, nil)
	descWorker       = prometheus.NewDesc("firn_worker_id", "Worker ID held (-1: none).", []string{"generator"}, nil)
	descDatacenter   = prometheus.NewDesc("firn_datacenter_id", "Datacenter value held (-1: none).", []string{"generator"}, nil)
	descWorkers      = prometheus.NewDesc("firn_workers_serving", "Workers whose IDs the generator hands out now (a wide generator holds several; below firn_workers_wanted, one lease is out).", []string{"generator"}, nil)
	descWorkersWant  = prometheus.NewDesc("firn_workers_wanted", "Workers the generator aims to hold: --workers, or the current target under --workers auto.", []string{"generator"}, nil)
	descInUse        = prometheus.NewDesc("firn_worker_ids_in_use", "Worker slots with a live owner in the cluster (as last listed).", []string{"generator"}, nil)
	descLimit        = prometheus.NewDesc("firn_worker_id_limit", "Worker slots of the layout.", []string{"generator"}, nil)
	descResLeft      = prometheus.NewDesc("firn_reservation_remaining_seconds", "Time until the reservation ends (negative: exhausted).", []string{"generator"}, nil)
	descLead         = prometheus.NewDesc("firn_clock_lead_seconds", "How far the logical time stands ahead of the clock.", []string{"generator"}, nil)
	descMaxLead      = prometheus.NewDesc("firn_max_lead_seconds", "Configured max-lead.", []string{"generator"}, nil)
	descSegNext      = prometheus.NewDesc("firn_segment_next_id", "A segment generator's counter as this node last read or wrote it: the lowest ID no claim had taken.", []string{"generator"}, nil)
	descSegStep      = prometheus.NewDesc("firn_segment_step", "The size of a segment generator's next claim on this node.", []string{"generator"}, nil)
	descSegAvail     = prometheus.NewDesc("firn_segment_available_ids", "IDs this node has claimed and not yet handed out.", []string{"generator"}, nil)
	descSegClaimed   = prometheus.NewDesc("firn_segment_claimed_ids_total", "IDs this node claimed from the counter.", []string{"generator"}, nil)
	descSegClaims    = prometheus.NewDesc("firn_segment_claims_total", "Counter writes that claimed IDs.", []string{"generator"}, nil)
	descSegBack      = prometheus.NewDesc("firn_segment_handed_back_ids_total", "IDs this node handed back to the counter at a graceful stop.", []string{"generator"}, nil)
	descSegDropped   = prometheus.NewDesc("firn_segment_dropped_ids_total", "Claimed IDs this node could neither hand out nor hand back (skipped).", []string{"generator"}, nil)
	descSegSkipped   = prometheus.NewDesc("firn_segment_skipped_ids", "IDs of a segment generator skipped cluster-wide, as the counter this node last read or wrote records them (hand-backs the free list could not keep, bumps, and what nodes held when they stopped without handing back, counted at their next start).", []string{"generator"}, nil)
	descSeqSections  = prometheus.NewDesc("firn_seq_sections", "Sections of a sequence generator (fixed at its creation).", []string{"generator"}, nil)
	descSeqOwned     = prometheus.NewDesc("firn_seq_sections_owned", "Sections of a sequence generator this node holds the lease of.", []string{"generator"}, nil)
	descSeqServing   = prometheus.NewDesc("firn_seq_sections_serving", "Sections of a sequence generator this node answers for (owned, take settled).", []string{"generator"}, nil)
	descSeqMembers   = prometheus.NewDesc("firn_seq_members", "Nodes serving a sequence generator, as this node last read them.", []string{"generator"}, nil)
	descSeqKeys      = prometheus.NewDesc("firn_seq_keys", "Keys of a sequence generator this node keeps in memory.", []string{"generator"}, nil)
	descSeqEvicted   = prometheus.NewDesc("firn_seq_evicted_keys_total", "Keys this node forgot past its memory budget (each starts again above its section's highest value).", []string{"generator"}, nil)
	descSeqWrites    = prometheus.NewDesc("firn_seq_writes_total", "Writes of a sequence generator's persisted section maxima by this node (raises ahead of demand, and takes).", []string{"generator"}, nil)
	descSeqTakes     = prometheus.NewDesc("firn_seq_section_takes_total", "Sections this node took (at its start, a move to it, a failover).", []string{"generator"}, nil)
	descSeqReleases  = prometheus.NewDesc("firn_seq_section_releases_total", "Sections this node gave up (a move to another node, a lease lost, a stop).", []string{"generator"}, nil)
	descSegSettling  = prometheus.NewDesc("firn_segment_settling_ids", "IDs this node claimed that wait for their settle time and a confirming read before use (shared coordinators).", []string{"generator"}, nil)
	descLayoutLeft   = prometheus.NewDesc("firn_layout_seconds_remaining", "Time until the layout's time field runs out.", []string{"generator"}, nil)
	descMaxOffset    = prometheus.NewDesc("firn_max_clock_offset_seconds", "Configured --max-clock-offset.", nil, nil)
	descMaxPeerSkew  = prometheus.NewDesc("firn_max_peer_skew_seconds", "Configured --max-peer-skew.", nil, nil)
	descWindow       = prometheus.NewDesc("firn_reservation_window_seconds", "Configured --reservation-window.", nil, nil)
	descNTPOffset    = prometheus.NewDesc("firn_ntp_offset_seconds", "Last NTP offset (clock minus NTP).", nil, nil)
	descNTPUnchecked = prometheus.NewDesc("firn_ntp_unchecked", "1 when no NTP server is configured: drift is unchecked.", nil, nil)
	descFault        = prometheus.NewDesc("firn_fault_injection_enabled", "1 when the fault-injection listener is on.", nil, nil)
	descFaultOffset  = prometheus.NewDesc("firn_fault_clock_offset_seconds", "Injected clock offset.", nil, nil)
	descBuild        = prometheus.NewDesc("firn_build_info", "Build and node identity: the module version, VCS revision and whether the build's tree was modified, and the Go version.", []string{"cluster", "node", "version", "revision", "modified", "go_version"}, nil)
)

// nodeCollector reads the node's state at scrape time.
type nodeCollector struct{ n *Node }

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIssued, descRingCap, descRingAvail, descRingTarget, descRingEmpty,
		descRingStale, descRingRefills, descServing, descRetired, descNotServing, descState, descWorker, descDatacenter,
		descQueueIDs, descQueueSeconds, descQueueLimit, descShed, descWorkers, descWorkersWant,
		descSegNext, descSegStep, descSegAvail, descSegClaimed, descSegClaims, descSegBack, descSegDropped, descSegSkipped, descSegSettling,
		descSeqSections, descSeqOwned, descSeqServing, descSeqMembers, descSeqKeys, descSeqEvicted, descSeqWrites, descSeqTakes, descSeqReleases,
		descInUse, descLimit, descResLeft, descLead, descMaxLead, descLayoutLeft, descMaxOffset, descNTPOffset,
		descNTPUnchecked, descFault, descFaultOffset, descBuild, descMaxPeerSkew, descWindow} {
		ch <- d
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	wall, _ := n.clock.Now()
	g := prometheus.MustNewConstMetric
	for _, rt := range n.core.Generators() {
		name := rt.Name()
		st := rt.Status(wall)
		ch <- g(descIssued, prometheus.CounterValue, float64(st.Issued), name)
		ch <- g(descServing, prometheus.GaugeValue, b2f(st.Serving), name)
		ch <- g(descRetired, prometheus.GaugeValue, b2f(rt.Retired()), name)
		snap := rt.State().Snapshot()
		held := snap.Held()
		for _, code := range clockguard.Codes {
			ch <- g(descNotServing, prometheus.GaugeValue, b2f(held[code]), name, string(code))
		}
		for _, s := range []clockguard.State{clockguard.StateStarting, clockguard.StateChecking, clockguard.StateServing,
			clockguard.StateNotServing, clockguard.StateDraining, clockguard.StateStopped} {
			ch <- g(descState, prometheus.GaugeValue, b2f(snap.State == s), name, s.String())
		}
		if sq := st.Seq; sq != nil {
			ch <- g(descSeqSections, prometheus.GaugeValue, float64(len(st.Owners)), name)
			ch <- g(descSeqOwned, prometheus.GaugeValue, float64(sq.Owned), name)
			ch <- g(descSeqServing, prometheus.GaugeValue, float64(sq.Serving), name)
			ch <- g(descSeqMembers, prometheus.GaugeValue, float64(sq.Members), name)
			ch <- g(descSeqKeys, prometheus.GaugeValue, float64(sq.Keys), name)
			ch <- g(descSeqEvicted, prometheus.CounterValue, float64(sq.Evicted), name)
			ch <- g(descSeqWrites, prometheus.CounterValue, float64(sq.Raises), name)
			ch <- g(descSeqTakes, prometheus.CounterValue, float64(sq.Takes), name)
			ch <- g(descSeqReleases, prometheus.CounterValue, float64(sq.Releases), name)
			continue
		}
		if seg := st.Segment; seg != nil {
			ch <- g(descSegNext, prometheus.GaugeValue, float64(seg.Counter.Next), name)
			ch <- g(descSegStep, prometheus.GaugeValue, float64(seg.Step), name)
			ch <- g(descSegAvail, prometheus.GaugeValue, float64(seg.Available), name)
			ch <- g(descSegClaimed, prometheus.CounterValue, float64(seg.Claimed), name)
			ch <- g(descSegClaims, prometheus.CounterValue, float64(seg.Claims), name)
			ch <- g(descSegBack, prometheus.CounterValue, float64(seg.HandedBack), name)
			ch <- g(descSegDropped, prometheus.CounterValue, float64(seg.Dropped), name)
			ch <- g(descSegSkipped, prometheus.GaugeValue, float64(seg.Counter.Skipped), name)
			ch <- g(descSegSettling, prometheus.GaugeValue, float64(seg.Settling), name)
			continue // no ring, no queue, no worker, no layout
		}
		ch <- g(descRingCap, prometheus.GaugeValue, float64(st.Ring.Capacity), name)
		ch <- g(descRingAvail, prometheus.GaugeValue, float64(st.Ring.Available), name)
		ch <- g(descRingTarget, prometheus.GaugeValue, float64(st.Ring.Target), name)
		ch <- g(descRingEmpty, prometheus.CounterValue, float64(st.Ring.EmptyHits), name)
		ch <- g(descRingStale, prometheus.CounterValue, float64(st.Ring.DroppedStale), name)
		ch <- g(descRingRefills, prometheus.CounterValue, float64(st.Ring.Refills), name)
		q := float64(rt.Fair().Queued())
		ch <- g(descQueueIDs, prometheus.GaugeValue, q, name)
		ch <- g(descQueueSeconds, prometheus.GaugeValue, q/rt.Capacity(), name)
		ch <- g(descWorkers, prometheus.GaugeValue, float64(len(st.Wide.Workers)), name)
		ch <- g(descWorkersWant, prometheus.GaugeValue, float64(st.Wide.Wanted), name)
		ch <- g(descQueueLimit, prometheus.GaugeValue, float64(rt.Fair().MaxQueue()), name)
		for i, r := range admission.ShedReasons {
			ch <- g(descShed, prometheus.CounterValue, float64(rt.Fair().Shed(i)), name, r)
		}
		w, dc := -1.0, -1.0
		resLeft := 0.0
		if st.HasLease {
			w, dc = float64(st.Worker), float64(st.Datacenter)
			resLeft = st.ReservedUntil.Sub(wall).Seconds()
		}
		ch <- g(descWorker, prometheus.GaugeValue, w, name)
		ch <- g(descDatacenter, prometheus.GaugeValue, dc, name)
		ch <- g(descInUse, prometheus.GaugeValue, float64(rt.InUse()), name)
		ch <- g(descLimit, prometheus.GaugeValue, float64(rt.Config().Layout.WorkerLimit()*rt.SlotsPerWorker()), name)
		ch <- g(descResLeft, prometheus.GaugeValue, resLeft, name)
		ch <- g(descLead, prometheus.GaugeValue, st.ClockLead.Seconds(), name)
		ch <- g(descMaxLead, prometheus.GaugeValue, rt.Config().MaxLead.Seconds(), name)
		ch <- g(descLayoutLeft, prometheus.GaugeValue, st.LayoutEnd.Sub(wall).Seconds(), name)
	}
	ch <- g(descMaxOffset, prometheus.GaugeValue, n.cfg.MaxClockOffset.Seconds())
	ch <- g(descMaxPeerSkew, prometheus.GaugeValue, n.cfg.MaxPeerSkew.Seconds())
	ch <- g(descWindow, prometheus.GaugeValue, n.cfg.Timing.ReservationWindow.Seconds())
	off, ok := n.policy.LastNTPOffset()
	if ok {
		ch <- g(descNTPOffset, prometheus.GaugeValue, off.Seconds())
	} else {
		ch <- g(descNTPOffset, prometheus.GaugeValue, 0)
	}
	ch <- g(descNTPUnchecked, prometheus.GaugeValue, b2f(len(n.cfg.NTP) == 0))
	ch <- g(descFault, prometheus.GaugeValue, b2f(n.cfg.EnableFaultInjection))
	fo := time.Duration(0)
	if n.offset != nil {
		fo = n.offset.CurrentOffset()
	}
	ch <- g(descFaultOffset, prometheus.GaugeValue, fo.Seconds())
	ch <- g(descBuild, prometheus.GaugeValue, 1, n.cfg.Cluster, n.NodeInfo().Name, n.cfg.Version, n.cfg.Revision,
		strconv.FormatBool(n.cfg.Modified), runtime.Version())
}
