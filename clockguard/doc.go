// Package clockguard owns firn's view of time and the answer to "may this
// generator serve, and if not, why".
//
// It provides the clock sources (Clock, System, Fake, Offset), the step
// detector (StepDetector, StepSize), the NTP checker (NTPChecker, on
// github.com/beevik/ntp) and the serving state (ServingState). Its
// subpackage ntptest is a real NTP responder over UDP for tests. It imports
// only the standard library and the NTP client: the node wires it to
// metrics, health and the coordinator.
//
// # Invariants
//
// System is the only reader of the wall clock in firn. Everything else —
// generators, ring buffers, the checker, the detector — takes a Clock, whose
// one call returns the wall and the monotonic readings of a single instant.
// The wall reading is "now"; the monotonic reading only sizes steps.
//
// The NTP checker measures the Clock it is given, not the machine's: both
// local timestamps of every query (transmit and receive) are read from that
// Clock through the client's GetSystemTime hook, so an Offset clock's offset
// is what the checker reports. Its Offset is the clock minus NTP time
// (positive: ahead), the median over the usable answers; an answer is
// usable only if it arrives within Timeout, is not a kiss-of-death, is in
// sync (leap indicator not 3), has a stratum of at most MaxStratum, passes
// the client's own validation, and took at most MaxRTT. Fewer than MinValid
// usable answers is ErrNTPUnreachable (the clock could not be measured);
// a median beyond MaxOffset is *OffsetError. The two differ on purpose: the
// node's --ntp-required decides whether the first blocks serving, while the
// second always does.
//
// A step is s = monotonic delta − wall delta between two reads of one
// Clock: s > 0 the wall clock went back by s, s < 0 it jumped forward by
// −s. The detector reads its Clock every Interval on its own ticker — at
// idle too, one read per tick and nothing else — and reports every |s| of at
// least Threshold through its callback and its counters.
//
// A ServingState serves exactly while it is past its start checks (Ready),
// not draining or stopped, and no source holds a reason. Each source
// (SourceNTP, SourceClockRollback, SourceLease, ...) holds at most one
// reason; Reason joins them oldest first, so the first cause reads first.
// Every change is published as an immutable snapshot, so Serving, State and
// Reason are lock-free loads on the request path, and every transition
// reaches the subscribers in the order the changes were made.
//
// # Hazards
//
// Clocks decide availability, never uniqueness: that comes from the
// coordinator's reservations and the generator's logical time. Nothing here
// may be used to let a generator run past its reservation; the serving state
// only ever adds reasons not to serve.
//
// The detector sees the net step between two reads. A step undone within
// one Interval (back and forth again) is invisible, and a step smaller than
// Threshold is treated as jitter; a slow slew is not a step at all. The
// generator therefore checks s on its own reads as well, and the detector
// is the idle-time witness, not the only one.
//
// Go's monotonic clock does not advance while the machine is suspended, and
// a paused VM resumes with its wall clock corrected: both look like forward
// steps of the pause's length. That is the truth as far as IDs are
// concerned, which is why a large forward step must be met with suspicion
// by the node (no reservation past it until NTP or the peers agree).
//
// An NTP offset is only as good as its round trip: the error bound is RTT/2,
// which is why Validate refuses a MaxRTT above 2×MaxOffset. The median
// protects against one falseticker among three, not against a majority that
// agree on the wrong time; MinValid sets how many must agree. A server
// answering with a kiss-of-death asks to be queried less: the periodic
// Interval should stay long (the default is a minute).
//
// Subscribers to a ServingState run on the goroutine that made the change,
// while later changes wait: they must be short and must not call Set, Clear
// or a lifecycle method of the same state (that deadlocks); hand such work
// to another goroutine. Callbacks of the checker and the detector run on
// their loops' goroutines and delay the next check or poll.
package clockguard
