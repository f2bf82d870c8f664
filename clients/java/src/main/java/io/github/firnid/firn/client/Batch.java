package io.github.firnid.firn.client;

import java.util.concurrent.atomic.AtomicLong;

/**
 * One run of consecutive IDs as the buffer holds it: the IDs are
 * {@code first+0 … first+n-1}, so a batch costs the same whatever its
 * length and a take computes its ID instead of loading it. Takers claim
 * indexes with one atomic add on {@code pos}; an index below {@code n}
 * belongs to its taker alone, so no ID reaches two callers. {@code pos}
 * only grows: a batch is retired (exhausted, or dropped as stale) by
 * pushing {@code pos} past {@code n}, never by lowering it.
 */
final class Batch {
  final long first;
  final long n;
  /** The index whose taker wakes the refiller; -1: none. */
  final long half;
  /** The last monotonic reading (ns, {@link FirnClient#mono()}) at which its IDs may be handed out. */
  final long expire;
  /** The endpoint that issued the run (null for the empty sentinel). */
  final Object ep;
  /** How many refills had been delivered when its refill was launched. */
  final long born;
  /** Its refill's own number in delivery order. */
  final long dseq;
  /** Set (under the client's lock) once its served count was accounted. */
  boolean retired;
  /** The next index to claim. */
  final AtomicLong pos = new AtomicLong();

  Batch(long first, long n, long half, long expire, Object ep, long born, long dseq) {
    this.first = first;
    this.n = n;
    this.half = half;
    this.expire = expire;
    this.ep = ep;
    this.born = born;
    this.dseq = dseq;
  }

  /** The sentinel installed when the buffer holds nothing: it never expires and has no IDs. */
  static Batch empty() {
    Batch b = new Batch(0, 0, -1, Long.MAX_VALUE, null, 0, 0);
    b.retired = true;
    return b;
  }

  /** How many IDs takers got so far. */
  long served() {
    return Math.min(pos.get(), n);
  }

  long remaining() {
    return n - served();
  }

  /**
   * Claims up to {@code need} indexes: the first index claimed and how
   * many (0 when the batch is exhausted). The claim is one atomic add.
   */
  long claim(long need) {
    long end = pos.addAndGet(need);
    long start = end - need;
    if (start >= n) {
      return -1;
    }
    return start;
  }

  /**
   * Retires the batch so that no later take gets any of its IDs; returns
   * how many IDs were handed out from it.
   */
  long retire() {
    long served = pos.get();
    if (served < n) {
      served = Math.min(pos.getAndAdd(n), n);
    }
    return Math.min(served, n);
  }
}
