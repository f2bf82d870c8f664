// Package ringbuffer owns firn's pre-generated ID buffer: a ring of
// power-of-two slots with one filler goroutine and many concurrent takers,
// in the manner of Baidu's UidGenerator.
//
// It imports only the standard library and declares the small interfaces it
// needs: a Source (the generator's NextBatch) and a Clock (only the
// monotonic reading is used: to stamp refill chunks and to judge them as
// they are taken; a clock's FastMono where it has one).
//
// # Invariants
//
//   - No slot reaches two takers. Takers claim a range of positions with
//     one CAS on the head; a claimed position belongs to its taker alone.
//     The filler writes a slot for lap k+1 only after every slot of its
//     64-slot block from lap k was released by its taker (one atomic add
//     per block touched), and each slot carries the lap it was written
//     for, which the taker checks.
//   - Reset advances an epoch instead of rewinding: IDs of a retired source
//     are dropped, also by a taker that claimed them before the Reset and
//     copies them after, and no refill from the retired source is
//     published (the filler holds the fill lock for a whole refill, and
//     Reset cancels the source's context, then takes that lock).
//   - Freshness: no ID handed out is older than MaxStaleness plus one tick,
//     however late the filler runs. Each refill chunk is stamped with the
//     tick of its monotonic generation time, and a take judges the stamps
//     it claims by the tick of its own clock reading (one monotonic read a
//     take, or a batch), publishing it to the shared tick when the filler's
//     timer has not yet moved it. Takes once trusted the filler's tick
//     alone and read no clock: on a starved machine (a container throttled
//     by its CPU quota, a thread descheduled while its P held the timer)
//     the timer fired late and IDs left the ring older than the bound by
//     that lateness (the chaos suite beside busy loops: an ID 236 ms older
//     than its call, where the bound of 125 ms and the checker's 50 ms of
//     slack allow 176). The read costs about 30 ns on this VM's clock.
//   - Take and TakeN take no lock and allocate nothing; an empty ring
//     returns ErrEmpty at once. Generate serves what the ring cannot, under
//     the fill lock, draining the ring first, so a caller's IDs never go
//     backwards.
//
// # Sizing and idle
//
// The filler keeps a target sized to recent demand (IDs per second ×
// MaxStaleness/2, at most the ring), refills when the ring falls under half
// of it, and runs its timer only while the ring holds IDs or demand is not
// zero: an idle buffer costs nothing.
//
// # Hazards
//
// A taker parked between claim and copy holds its block: the filler stops
// there until it is released, and never overwrites it. A source that
// blocks (a generator waiting on its reservation) holds the fill lock;
// Reset cancels its context first.
package ringbuffer
