package io.github.firnid.firn.client;

import io.github.firnid.firn.client.internal.health.HealthCheckRequest;
import io.github.firnid.firn.client.internal.health.HealthCheckResponse;
import io.github.firnid.firn.v1.CurrentSeqRequest;
import io.github.firnid.firn.v1.GeneratorInfo;
import io.github.firnid.firn.v1.IDServiceGrpc;
import io.github.firnid.firn.v1.InfoRequest;
import io.github.firnid.firn.v1.InfoResponse;
import io.github.firnid.firn.v1.NextIDsRequest;
import io.github.firnid.firn.v1.NextIDsResponse;
import io.github.firnid.firn.v1.NextRangeRequest;
import io.github.firnid.firn.v1.NextRangeResponse;
import io.github.firnid.firn.v1.NextSeqRequest;
import io.github.firnid.firn.v1.NextSeqResponse;
import io.github.firnid.firn.v1.SectionOwner;
import com.google.protobuf.ByteString;
import io.grpc.Context;
import io.grpc.Deadline;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.NegotiationType;
import io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.StreamObserver;
import io.netty.handler.ssl.SslContext;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * firn's Java client: it hides the network behind a local prefetch buffer
 * and fails over across a list of nodes.
 *
 * <pre>{@code
 * try (FirnClient c = FirnClient.builder().endpoints("10.0.0.1:7300", "10.0.0.2:7300").build()) {
 *   long id = c.next();
 *   List<Run> runs = c.nextRange(100_000);
 * }
 * }</pre>
 *
 * <h2>Thread safety</h2>
 * A client is safe for use by any number of threads at once, and meant to
 * be shared: one per process and generator. No ID reaches two callers.
 *
 * <h2>The buffer</h2>
 * A buffer of runs of consecutive IDs, fetched with NextRange (NextIDs from
 * a node without it) by one refill thread. {@link #next()} takes an ID with
 * one volatile read, one monotonic clock read and one atomic add while the
 * buffer holds fresh IDs; only an empty or stale buffer makes it wait for a
 * refill. The refiller measures the demand and asks for about
 * {@code rate × batchWindow} IDs per refill (doubling while callers wait,
 * halved after a node sheds load), keeping two refills buffered or in
 * flight while they would be used before they go stale. No ID is handed
 * out later than {@code maxAge} after the start of the RPC that fetched it;
 * stale and, on close, buffered IDs are dropped, never reused. Each
 * caller's successive IDs from {@code next()} increase while one endpoint
 * serves; across a failover they need not.
 *
 * <h2>Failover</h2>
 * A fetch is a round of attempts, one per endpoint at most: the endpoint
 * last served from first, then the others; endpoints that failed in the
 * last second, whose health watch (grpc.health.v1, service = the generator
 * name) says NOT_SERVING, or whose connection is failing go last. An
 * attempt's deadline is the call timeout, or, while another endpoint
 * follows, half of the waiting caller's remaining time, so a node that
 * hangs leaves the caller time to fail over. UNAVAILABLE, a shed
 * (OVERLOADED) and no answer by the deadline sent count against the
 * endpoint. An endpoint whose refusal carried a RetryInfo is not asked
 * again until that time has passed; a round that finds every endpoint in
 * that state fails at once with the refusal and a RetryInfo of the time
 * left.
 *
 * <h2>Sequences</h2>
 * {@link #nextSeq} and {@link #currentSeq} serve a sequence generator: each
 * call is one request (nothing is buffered), sent to the owner of the key's
 * section (FNV-1a-64(key) mod sections, from Info's section map); a
 * WRONG_NODE refusal is followed to the owner it names, and
 * SECTION_MOVING / UNAVAILABLE / OVERLOADED are retried after the wait
 * their RetryInfo gives until the caller's deadline (10 s without one).
 *
 * <h2>Errors</h2>
 * Every failure is a {@link FirnException}; see {@link Reason}.
 */
public final class FirnClient implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(FirnClient.class.getName());

  /** Largest n of {@link #nextN} and {@link #nextRange}. */
  public static final int MAX_NEXT_N = 1 << 24;
  public static final long MAX_NEXT_RANGE = 1L << 24;
  /** Bounds of a sequence key (bytes) and count. */
  public static final int MAX_SEQ_KEY = 256;
  public static final int MAX_SEQ_COUNT = 10000;

  static final long MS = 1_000_000L;
  static final long NO_DEADLINE = Long.MAX_VALUE;
  private static final long BASE = System.nanoTime();

  // Timing constants, as the Go client's.
  private static final long DOWN_FOR = 1000 * MS;
  private static final long MIN_ATTEMPT = 10 * MS;
  /**
   * Bounds, in place of a shorter callTimeout, the round's last attempt at
   * an endpoint that has not answered yet: its connection, TLS handshake
   * and first calls are inside it, and a JVM starting on a loaded machine
   * can take seconds over them. A caller's deadline still cuts it.
   */
  static final long FIRST_ANSWER_TIMEOUT = 10_000 * MS;
  private static final long MAX_RETRY_WAIT = 5000 * MS;
  private static final long LACKING_FOR = 30_000 * MS;
  private static final long RANGE_RETRY = 60_000 * MS;
  private static final long MIN_BACKOFF = 50 * MS;
  private static final long MAX_BACKOFF = 1000 * MS;
  private static final long WATCH_RETRY_MIN = 100 * MS;
  private static final long WATCH_RETRY_MAX = 5000 * MS;
  /**
   * Refills in flight: one. Two in flight to one node come back
   * interleaved (the node cuts both from one stream of runs), and the order
   * rule (behindLocked) then drops the later one's runs that fall below
   * what was handed out; the buffer still keeps two batches buffered or on
   * their way. (As the Go client.)
   */
  private static final int MAX_IN_FLIGHT = 1;
  private static final double RATE_KEEP = 0.7;
  private static final int MAX_SEQ_HOPS = 3;
  private static final long SEQ_REFRESH_EVERY = 3000 * MS;
  private static final long SEQ_REFRESH_GAP = 250 * MS;
  private static final long SEQ_RETRY_FOR = 10_000 * MS;
  private static final long SEQ_BACKOFF_MIN = 25 * MS;
  private static final long SEQ_BACKOFF_MAX = 1000 * MS;
  private static final int MAX_INBOUND = 16 << 20;

  /**
   * Moves the client's clock ahead by this many ns: for tests only (a node's answer that arrives
   * after the caller's deadline, deterministically). Zero otherwise.
   */
  static volatile long clockAheadForTest;

  /** The monotonic clock the client uses: ns since the class loaded. */
  static long mono() {
    return System.nanoTime() - BASE + clockAheadForTest;
  }

  // ---- options ----
  private final String generator;
  private final long callTimeout;
  private final long maxAge;
  private final long batchWindow;
  private final int minBatch;
  private final int maxBatch;
  private final boolean healthWatch;
  private final long resolveEvery;
  private final Function<String, ? extends List<?>> resolver;
  private final SslContext ssl;
  private final long tickLen;

  // ---- the take path ----
  private volatile Batch cur;
  private final Batch empty = Batch.empty();
  private final AtomicBoolean kicked = new AtomicBoolean();
  private final LinkedBlockingQueue<Object> events = new LinkedBlockingQueue<>();
  private static final Object KICK = new Object();
  private static final Object STOP = new Object();

  private final AtomicLong overloads = new AtomicLong();
  private final AtomicLong directAbove = new AtomicLong();

  // ---- state under mu ----
  private final Object mu = new Object();
  private final ArrayList<Batch> queue = new ArrayList<>();
  private Batch last;
  private long notifyGen;
  private long failGen;
  private FirnException lastErr;
  // nextRound is the refiller's retryAt after a failed round, mirrored
  // (mono; MIN_VALUE after a round that delivered): no fetch starts before
  // it. fetching is the number of refill fetches in flight.
  private long nextRound = Long.MIN_VALUE;
  private int fetching;
  private long retired;
  private int waiters;
  private long starved;
  private boolean closedLocked;
  private final Set<Attempt> refillAttempts = new HashSet<>();
  private final ArrayList<Long> waitDeadlines = new ArrayList<>();

  private volatile boolean closing;
  private final Set<Attempt> allAttempts = ConcurrentHashMap.newKeySet();
  private final CountDownLatch closedLatch = new CountDownLatch(1);

  // ---- endpoints ----
  private final List<Target> targets;
  private final boolean hasNames;
  private final Object epMu = new Object();
  private volatile List<Endpoint> eps = List.of();
  private volatile Endpoint active;
  private final CountDownLatch resolved = new CountDownLatch(1);
  private volatile long lastResolveAsk;

  // ---- threads ----
  private final ExecutorService exec;
  private final ScheduledExecutorService sched;
  /**
   * Runs the DNS lookups, one at a time: a lookup can take seconds (a
   * resolver that does not answer), and on the timer thread it would hold
   * up the cuts of refill attempts that waiting callers ask for.
   */
  private final ExecutorService resolveExec;
  private final AtomicBoolean resolveQueued = new AtomicBoolean();
  private final Thread refillThread;

  // ---- sequences ----
  private volatile SeqMap seqMap;
  private volatile long seqMapAt;
  private final AtomicBoolean seqRefreshing = new AtomicBoolean();
  private final Object seqLoadMu = new Object();
  private CountDownLatch seqLoading; // under seqLoadMu: the map load under way
  private final ConcurrentHashMap<String, ManagedChannel> seqConns = new ConcurrentHashMap<>();
  private final ConcurrentHashMap<String, AtomicBoolean> seqConnAnswered = new ConcurrentHashMap<>();

  // ---- stats ----
  private final AtomicLong failovers = new AtomicLong();
  private final AtomicLong fetches = new AtomicLong();
  private final AtomicLong fetchErrors = new AtomicLong();
  private final AtomicLong dropped = new AtomicLong();
  private final AtomicLong droppedStale = new AtomicLong();
  private final AtomicLong droppedBehind = new AtomicLong();
  private final AtomicLong seqRedirects = new AtomicLong();
  private final AtomicLong seqRetries = new AtomicLong();
  private final AtomicLong batchSize = new AtomicLong();

  private FirnClient(Builder b, List<Target> targets, SslContext ssl) {
    this.generator = b.generator;
    this.callTimeout = b.callTimeout.toNanos();
    this.maxAge = b.maxAge.toNanos();
    this.batchWindow = b.batchWindow.toNanos();
    this.minBatch = b.minBatch;
    this.maxBatch = b.maxBatch;
    this.healthWatch = b.healthCheck;
    this.resolveEvery = b.resolveInterval.toNanos();
    this.resolver = b.resolver;
    this.ssl = ssl;
    this.tickLen = maxAge / 8;
    this.targets = targets;
    this.hasNames = targets.stream().anyMatch(t -> t.name);
    this.cur = empty;
    this.directAbove.set(minBatch);
    this.batchSize.set(minBatch);
    AtomicInteger n = new AtomicInteger();
    this.exec = Executors.newCachedThreadPool(r -> {
      Thread t = new Thread(r, "firn-client-fetch-" + n.incrementAndGet());
      t.setDaemon(true);
      return t;
    });
    this.sched = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "firn-client-timer");
      t.setDaemon(true);
      return t;
    });
    this.resolveExec = Executors.newSingleThreadExecutor(r -> {
      Thread t = new Thread(r, "firn-client-resolve");
      t.setDaemon(true);
      return t;
    });
    List<Endpoint> fixed = new ArrayList<>();
    for (Target t : targets) {
      if (!t.name) {
        fixed.add(newEndpoint(t.host, t.port, t.raw));
      }
    }
    this.eps = List.copyOf(fixed);
    for (Endpoint ep : fixed) {
      startWatch(ep);
    }
    if (hasNames) {
      resolveSoon();
      sched.scheduleWithFixedDelay(this::resolveSoon, resolveEvery, resolveEvery, TimeUnit.NANOSECONDS);
    } else {
      resolved.countDown();
    }
    this.refillThread = new Thread(this::refillLoop, "firn-client-refill");
    refillThread.setDaemon(true);
    refillThread.start();
  }

  /** A new builder. */
  public static Builder builder() {
    return new Builder();
  }

  // =====================================================================
  // Taking IDs
  // =====================================================================

  /**
   * One ID, waiting for a refill as long as it takes (each failed failover
   * round while it waits ends the wait with its error).
   */
  public long next() {
    return next0(NO_DEADLINE);
  }

  /** One ID, waiting at most {@code timeout} for a refill (DEADLINE after it). */
  public long next(Duration timeout) {
    return next0(deadlineOf(timeout));
  }

  private long next0(long deadline) {
    Batch b = cur;
    if (mono() <= b.expire) {
      long i = b.pos.getAndIncrement();
      if (i < b.n) {
        if (i == b.half) {
          kick();
        }
        return b.first + i;
      }
    }
    return nextSlow(deadline);
  }

  private long nextSlow(long deadline) {
    for (;;) {
      waitBatch(deadline);
      Batch b = cur;
      if (mono() <= b.expire) {
        long i = b.pos.getAndIncrement();
        if (i < b.n) {
          if (i == b.half) {
            kick();
          }
          return b.first + i;
        }
      }
    }
  }

  /** {@code n} distinct increasing IDs (1 ≤ n ≤ {@link #MAX_NEXT_N}). */
  public long[] nextN(int n) {
    return nextN(n, null);
  }

  /**
   * {@code n} distinct increasing IDs: from the buffer while it holds them,
   * the rest fetched directly when more than a batch (with failover, each
   * attempt within its share of the timeout).
   */
  public long[] nextN(int n, Duration timeout) {
    if (n < 1 || n > MAX_NEXT_N) {
      throw FirnException.local(Reason.INVALID_ARGUMENT, "n " + n + " outside [1, " + MAX_NEXT_N + "]");
    }
    List<Run> runs = takeRuns(n, deadlineOf(timeout));
    long[] out = new long[n];
    int k = 0;
    for (Run r : runs) {
      for (long i = 0; i < r.count(); i++) {
        out[k++] = r.first() + i;
      }
    }
    return out;
  }

  /** {@code n} distinct IDs as increasing runs of consecutive IDs (1 ≤ n ≤ {@link #MAX_NEXT_RANGE}). */
  public List<Run> nextRange(long n) {
    return nextRange(n, null);
  }

  /**
   * {@code n} distinct IDs as runs of consecutive IDs, sorted, runs that
   * touch merged, their counts adding up to n: a large n costs a few runs
   * on the wire instead of 8 bytes an ID.
   */
  public List<Run> nextRange(long n, Duration timeout) {
    if (n < 1 || n > MAX_NEXT_RANGE) {
      throw FirnException.local(Reason.INVALID_ARGUMENT, "n " + n + " outside [1, " + MAX_NEXT_RANGE + "]");
    }
    return takeRuns(n, deadlineOf(timeout));
  }

  /** A run a call took, and the mono reading at which it expires (MAX_VALUE: fetched for the call). */
  private record Taken(Run run, long expire) {}

  /**
   * n IDs for nextN and nextRange, as sorted runs. A run taken from the buffer was fresh when
   * taken; should the call then wait (for a refill, or a direct fetch of the rest), a run whose
   * batch expired meanwhile is dropped (counted) and taken again, so the freshness bound holds
   * when the call returns. Runs fetched directly are handed out as the call returns.
   */
  private List<Run> takeRuns(long n, long deadline) {
    if (closing) {
      throw closedError();
    }
    List<Taken> out = new ArrayList<>();
    long got = 0;
    try {
      while (true) {
        boolean waited = false;
        while (got < n) {
          long need = n - got;
          Taken t = take(need);
          if (t != null) {
            out.add(t);
            got += t.run().count();
            continue;
          }
          waited = true;
          if (need > directAbove.get()) {
            for (Run fr : fetchDirect(deadline, need)) {
              out.add(new Taken(fr, Long.MAX_VALUE));
              got += fr.count();
            }
            continue;
          }
          waitBatch(deadline);
        }
        if (!waited) {
          break;
        }
        long now = mono();
        for (Iterator<Taken> it = out.iterator(); it.hasNext(); ) {
          Taken t = it.next();
          if (now > t.expire()) { // stale while the call waited
            it.remove();
            got -= t.run().count();
            dropped.addAndGet(t.run().count());
          }
        }
        if (got == n) {
          break;
        }
      }
      if (closing) {
        throw closedError();
      }
    } catch (RuntimeException e) {
      // The IDs taken for a call that fails are never handed out: counted
      // dropped, as buffered ones are at close.
      dropped.addAndGet(got);
      throw e;
    }
    List<Run> runs = new ArrayList<>(out.size());
    for (Taken t : out) {
      runs.add(t.run());
    }
    return sortRuns(runs);
  }

  /** Claims up to need IDs of cur without a lock, or null when cur holds no fresh ID. */
  private Taken take(long need) {
    Batch b = cur;
    if (mono() > b.expire) {
      return null;
    }
    long start = b.claim(need);
    if (start < 0) {
      return null;
    }
    long hi = Math.min(start + need, b.n);
    if (start <= b.half && b.half < hi) {
      kick();
    }
    return new Taken(new Run(b.first + start, hi - start), b.expire);
  }

  /**
   * Fetches n IDs straight from the endpoints, in as many fetches as their bounds take. When a
   * later fetch fails, the IDs the earlier ones brought are never handed out: counted dropped
   * here, since the caller never sees them.
   */
  private List<Run> fetchDirect(long deadline, long n) {
    List<Run> out = new ArrayList<>();
    long got = 0;
    try {
      while (got < n) {
        Fetched f = fetch(deadline, (int) Math.min(n - got, Integer.MAX_VALUE), false);
        for (Run r : f.runs) {
          out.add(r);
          got += r.count();
        }
      }
    } catch (RuntimeException e) {
      dropped.addAndGet(got);
      throw e;
    }
    return out;
  }

  static List<Run> sortRuns(List<Run> runs) {
    runs.sort((a, b) -> Long.compareUnsigned(a.first(), b.first()));
    ArrayList<Run> out = new ArrayList<>(runs.size());
    for (Run r : runs) {
      int k = out.size() - 1;
      if (k >= 0 && out.get(k).first() + out.get(k).count() == r.first() && r.first() != 0) {
        Run p = out.get(k);
        out.set(k, new Run(p.first(), p.count() + r.count()));
        continue;
      }
      out.add(r);
    }
    return out;
  }

  /** Splits IDs (a NextIDs answer) into runs of consecutive IDs. */
  static List<Run> runsOf(List<Long> ids) {
    ArrayList<Run> runs = new ArrayList<>();
    for (long id : ids) {
      int k = runs.size() - 1;
      if (k >= 0 && id != 0 && runs.get(k).first() + runs.get(k).count() == id) {
        Run p = runs.get(k);
        runs.set(k, new Run(p.first(), p.count() + 1));
        continue;
      }
      runs.add(new Run(id, 1));
    }
    return runs;
  }

  /**
   * Returns once cur may hold fresh IDs, after waiting for a refill if need
   * be; throws CLOSED, DEADLINE, or the error of a failover round that
   * failed while it waited.
   */
  private void waitBatch(long deadline) {
    synchronized (mu) {
      if (closedLocked) {
        throw closedError();
      }
      if (installLocked()) {
        return;
      }
      // Every endpoint asked the client to wait (RetryInfo) for longer than
      // this caller would: no refill comes in its time, and it is refused at
      // once with the refusal that said so (the endpoint's free first, with
      // the time still left), not left to its deadline — whichever call met
      // that refusal.
      if (deadline != NO_DEADLINE) {
        long m = mono();
        Endpoint first = heldFirst(m);
        if (first != null && first.retryUntil.get() > deadline) {
          throw heldError(first, eps.size(), m);
        }
        // The refiller backs off after a failed round (no RetryInfo came:
        // 50 ms, doubling to 1 s). With no fetch in flight, a caller whose
        // deadline ends before the next round gets no refill in its time
        // either: refused at once with that round's refusal, the node's
        // reason in it, not left to a bare DEADLINE.
        if (lastErr != null && nextRound != Long.MIN_VALUE && fetching == 0 && nextRound > deadline) {
          throw backoffError(lastErr, nextRound - m);
        }
      }
      long gen = notifyGen;
      long fgen = failGen;
      waiters++;
      starved++;
      boolean multi = eps.size() > 1 || hasNames;
      boolean hasDeadline = deadline != NO_DEADLINE;
      Long dl = deadline;
      if (multi && hasDeadline) {
        waitDeadlines.add(dl);
      }
      if (multi) {
        long share = waitShareLocked(mono());
        if (share != NO_DEADLINE) {
          cutAttemptsLocked(share);
        }
      }
      kick();
      boolean timedOut = false;
      try {
        while (notifyGen == gen && !closedLocked) {
          long left = deadline == NO_DEADLINE ? Long.MAX_VALUE : deadline - mono();
          if (left <= 0) {
            timedOut = true;
            break;
          }
          long ms = Math.min(left / MS, 1_000_000L);
          int ns = (int) Math.min(left % MS, 999_999);
          try {
            mu.wait(ms, ms == 0 && ns == 0 ? 1 : ns);
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw FirnException.local(Reason.CLOSED, "client: interrupted while waiting for IDs");
          }
        }
      } finally {
        waiters--;
        if (multi && hasDeadline) {
          waitDeadlines.remove(dl);
        }
      }
      if (closedLocked) {
        throw closedError();
      }
      if (installLocked()) {
        return;
      }
      if (failGen != fgen && lastErr != null) {
        throw lastErr;
      }
      if (timedOut) {
        throw deadlineError();
      }
    }
  }

  /** The last failed round's refusal, for a caller whose deadline ends before the next round (in {@code left}). */
  private static FirnException backoffError(FirnException e, long left) {
    Duration retry = e.retryAfter().isPresent() ? Duration.ofNanos(Math.max(left, 10 * MS)) : null;
    return new FirnException(e.reason(), e.code().orElse(null), retry, e.metadata(),
        "client: no refill before the caller's deadline (the next round in " + Math.max(left, 0) / MS
            + "ms, after a failed one): " + e.getMessage(), e);
  }

  /** Makes cur a batch with fresh IDs if the buffer has one; reports whether it now holds fresh IDs. */
  private boolean installLocked() {
    long t = mono();
    Batch b = cur;
    if (b.expire >= t && b.pos.get() < b.n) {
      return true;
    }
    retireLocked(b);
    while (!queue.isEmpty()) {
      Batch nb = queue.remove(0);
      if (nb.expire < t) {
        dropped.addAndGet(nb.n);
        droppedStale.addAndGet(nb.n);
        continue;
      }
      if (behindLocked(nb)) {
        dropped.addAndGet(nb.n);
        droppedBehind.addAndGet(nb.n);
        continue;
      }
      cur = nb;
      last = nb;
      return true;
    }
    if (b != empty) {
      cur = empty;
    }
    return false;
  }

  /**
   * Whether nb's IDs are below those of the last batch installed, from the
   * same endpoint, whose refill was in flight with nb's: handing nb out
   * would give a caller a lower ID next, so it is dropped.
   */
  private boolean behindLocked(Batch nb) {
    Batch l = last;
    return l != null && nb.ep == l.ep && nb.born < l.dseq && Long.compareUnsigned(nb.first, l.first) < 0;
  }

  /** Queues nb behind the others, but before queued batches of its endpoint with higher IDs. */
  private void enqueueLocked(Batch nb) {
    int i = queue.size();
    for (int j = queue.size() - 1; j >= 0; j--) {
      Batch q = queue.get(j);
      if (q.ep == nb.ep) {
        if (Long.compareUnsigned(q.first, nb.first) < 0) {
          break;
        }
        i = j;
      }
    }
    queue.add(i, nb);
  }

  private void retireLocked(Batch b) {
    if (b.retired) {
      return;
    }
    b.retired = true;
    long served = b.retire();
    retired += served;
    dropped.addAndGet(b.n - served);
    droppedStale.addAndGet(b.n - served);
  }

  private long bufferedLocked() {
    long t = mono();
    long n = 0;
    Batch b = cur;
    if (b.expire >= t) {
      n += b.remaining();
    }
    for (Batch q : queue) {
      if (q.expire >= t) {
        n += q.n;
      }
    }
    return n;
  }

  private void kick() {
    if (kicked.compareAndSet(false, true)) {
      events.offer(KICK);
    }
  }

  // =====================================================================
  // The refiller
  // =====================================================================

  private static final class FetchResult {
    final Fetched f;
    final FirnException err;
    final long born;
    final long count;

    FetchResult(Fetched f, FirnException err, long born, long count) {
      this.f = f;
      this.err = err;
      this.born = born;
      this.count = count;
    }
  }


  private int inFlight;
  private long inFlightIds;
  private long delivered;
  private double rate;
  private long rBatch;
  private long lastMono;
  private long lastTotal;
  private long lastStarved;
  private long lastOverloads;
  private long backoff;
  private long retryAt = Long.MIN_VALUE;

  private void refillLoop() {
    try {
      refill();
    } finally {
      // A refill answered as close ran, which the refiller did not take:
      // its IDs are never handed out.
      for (Object ev; (ev = events.poll()) != null; ) {
        if (ev instanceof FetchResult res) {
          dropUnserved(res);
        }
      }
    }
  }

  /** Counts the IDs of a refill that is never delivered (the client closed) dropped. */
  private void dropUnserved(FetchResult res) {
    if (res.err == null && res.f != null) {
      for (Run r : res.f.runs) {
        dropped.addAndGet(r.count());
      }
    }
  }

  private void refill() {
    rBatch = minBatch;
    lastMono = mono();
    long nextTick = mono() + tickLen;
    boolean ticking = true;
    while (!closing) {
      Object ev;
      try {
        // After a failed round the next is due at retryAt: the loop wakes
        // then, not at the tick after it (maxAge / 8, up to minutes), so
        // the round runs when waitBatch expects it to.
        long m0 = mono();
        boolean round = retryAt > m0 && (!ticking || retryAt < nextTick);
        if (ticking || round) {
          long wait = (round ? retryAt : nextTick) - m0;
          ev = wait > 0 ? events.poll(wait, TimeUnit.NANOSECONDS) : events.poll();
          if (ev == null && ticking && mono() >= nextTick) {
            nextTick = Math.max(nextTick + tickLen, mono());
          }
        } else {
          ev = events.take();
        }
      } catch (InterruptedException e) {
        return;
      }
      if (ev == STOP || closing) {
        if (ev instanceof FetchResult res) {
          dropUnserved(res);
        }
        return;
      }
      if (ev == KICK) {
        kicked.set(false);
      } else if (ev instanceof FetchResult res) {
        deliverNow(res);
      }
      long m = mono();
      long[] bw = measure(m);
      launch(m, bw[0], (int) bw[1]);
      boolean need = bw[0] > 0 || inFlight > 0 || bw[1] > 0 || rate * tickLen / 1e9 >= 1;
      if (need && !ticking) {
        ticking = true;
        nextTick = mono() + tickLen;
      } else if (!need && ticking) {
        ticking = false;
      }
    }
  }

  /** Drops stale batches, updates the rate and batch size; returns {buffered, waiters}. */
  private long[] measure(long m) {
    long total;
    long st;
    long buffered;
    int w;
    synchronized (mu) {
      Batch b = cur;
      if (b.expire < m && b != empty) {
        installLocked();
      }
      queue.removeIf(q -> {
        if (q.expire < m) {
          dropped.addAndGet(q.n);
          droppedStale.addAndGet(q.n);
          return true;
        }
        return false;
      });
      total = retired;
      b = cur;
      if (!b.retired) {
        total += b.served();
      }
      st = starved;
      buffered = bufferedLocked();
      w = waiters;
    }
    long dt = m - lastMono;
    if (dt < tickLen / 2) {
      return new long[] {buffered, w};
    }
    double inst = (total - lastTotal) / (dt / 1e9);
    if (inst >= rate) {
      rate = inst;
    } else {
      rate = RATE_KEEP * rate + (1 - RATE_KEEP) * inst;
    }
    if (rate < 1e-3) {
      rate = 0;
    }
    lastMono = m;
    lastTotal = total;
    double size = rate * batchWindow / 1e9;
    if (st != lastStarved) {
      size = Math.max(size, Math.min(2.0 * rBatch, rate * maxAge / 1e9));
    }
    lastStarved = st;
    directAbove.set((long) Math.min(Math.max(size, minBatch), maxBatch));
    long ov = overloads.get();
    if (ov != lastOverloads) {
      lastOverloads = ov;
      size = Math.min(size, rBatch / 2.0);
    }
    rBatch = (long) Math.min(Math.max(size, minBatch), maxBatch);
    batchSize.set(rBatch);
    return new long[] {buffered, w};
  }

  private void deliverNow(FetchResult res) {
    inFlight--;
    inFlightIds -= res.count;
    synchronized (mu) {
      fetching = inFlight;
    }
    deliver(res);
  }

  private void launch(long m, long buffered, int w) {
    if (m < retryAt) {
      return;
    }
    boolean proactive = rate * maxAge / 1e9 >= rBatch;
    while (inFlight < MAX_IN_FLIGHT) {
      long have = buffered + inFlightIds;
      if (!(w > 0 && have == 0) && !(proactive && have < 2 * rBatch)) {
        return;
      }
      inFlight++;
      inFlightIds += rBatch;
      synchronized (mu) {
        fetching = inFlight;
      }
      final long count = rBatch;
      final long born = delivered;
      try {
        exec.execute(() -> {
          FetchResult res;
          try {
            res = new FetchResult(fetch(NO_DEADLINE, (int) count, true), null, born, count);
          } catch (FirnException e) {
            res = new FetchResult(null, e, born, count);
          } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "refill failed", e);
            res = new FetchResult(null, FirnException.local(Reason.ERROR_REASON_UNSPECIFIED, "client: " + e), born, count);
          }
          events.offer(res);
          if (closing && events.remove(res)) {
            dropUnserved(res); // the refiller may have ended: no one else takes it
          }
        });
      } catch (java.util.concurrent.RejectedExecutionException e) {
        return; // closing
      }
    }
  }

  private void deliver(FetchResult res) {
    long m = mono();
    synchronized (mu) {
      if (closedLocked) {
        dropUnserved(res); // arrived after close dropped the buffer
        return;
      }
      if (res.err != null) {
        if (closing) {
          return;
        }
        backoff = Math.min(Math.max(2 * backoff, MIN_BACKOFF), MAX_BACKOFF);
        retryAt = m + backoff;
        long until = heldUntil(m);
        if (until != Long.MIN_VALUE) {
          retryAt = Math.max(retryAt, until);
        }
        failGen++;
        lastErr = res.err;
        nextRound = retryAt;
      } else {
        backoff = 0;
        nextRound = Long.MIN_VALUE;
        delivered++;
        long total = 0;
        for (Run r : res.f.runs) {
          total += r.count();
        }
        long mid = total / 2;
        long off = 0;
        for (Run r : res.f.runs) {
          long n = r.count();
          long half = (off <= mid && mid < off + n) ? mid - off : -1;
          off += n;
          enqueueLocked(new Batch(r.first(), n, half, res.f.start + maxAge, res.f.ep, res.born, delivered));
        }
        installLocked();
      }
      notifyGen++;
      mu.notifyAll();
    }
  }

  // =====================================================================
  // Fetching: rounds, attempts, failover
  // =====================================================================

  private static final class Fetched {
    final List<Run> runs;
    final Endpoint ep;
    final long start;

    Fetched(List<Run> runs, Endpoint ep, long start) {
      this.runs = runs;
      this.ep = ep;
      this.start = start;
    }
  }

  private static final Object CUT = new Object();
  private static final Object CLOSED = new Object();

  /** One try at one endpoint in a failover round. */
  private final class Attempt {
    final long start;
    final long sent; // mono ns: the deadline the RPCs carry
    final boolean last;
    final boolean refill;
    final Context.CancellableContext ctx = Context.ROOT.withCancellation();
    final Deadline deadline;
    volatile Object cause;
    long cutAt; // under mu
    ScheduledFuture<?> timer; // under mu

    Attempt(long start, long sent, boolean last, boolean refill) {
      this.start = start;
      this.sent = sent;
      this.last = last;
      this.refill = refill;
      this.deadline = Deadline.after(Math.max(sent - start, 1), TimeUnit.NANOSECONDS);
      this.cutAt = sent;
    }

    void cancel(Object why) {
      if (cause == null) {
        cause = why;
      }
      ctx.cancel(null);
    }

    <T> T call(java.util.function.Supplier<T> rpc) {
      Context prev = ctx.attach();
      try {
        return rpc.get();
      } finally {
        ctx.detach(prev);
      }
    }
  }

  static long shareEnd(long now, long d) {
    return now + Math.max((d - now) / 2, MIN_ATTEMPT);
  }

  /** fresh: the endpoint has not answered yet (see FIRST_ANSWER_TIMEOUT). */
  private Attempt startAttempt(long callerDeadline, boolean last, boolean refill, boolean fresh) {
    long now = mono();
    long end = now + (fresh && last ? Math.max(callTimeout, FIRST_ANSWER_TIMEOUT) : callTimeout);
    if (callerDeadline != NO_DEADLINE) {
      if (!last) {
        end = Math.min(end, shareEnd(now, callerDeadline));
      }
      end = Math.min(end, callerDeadline);
    }
    Attempt a;
    if (refill) {
      synchronized (mu) {
        long share = waitShareLocked(now);
        if (share != NO_DEADLINE && !last) {
          end = Math.min(end, share);
        }
        a = new Attempt(now, end, last, true);
        refillAttempts.add(a);
      }
    } else {
      a = new Attempt(now, end, last, false);
    }
    allAttempts.add(a);
    if (closing) {
      a.cancel(CLOSED);
    }
    return a;
  }

  /** Ends a; returns {missed, cut} (see the Go client's endAttempt). */
  private boolean[] endAttempt(Attempt a) {
    if (a.refill) {
      synchronized (mu) {
        refillAttempts.remove(a);
        if (a.timer != null) {
          a.timer.cancel(false);
        }
      }
    }
    allAttempts.remove(a);
    boolean cut = a.cause == CUT;
    boolean missed = !cut && a.cause != CLOSED && mono() >= a.sent;
    a.ctx.cancel(null);
    return new boolean[] {missed, cut};
  }

  /**
   * The latest cut-off the callers waiting for a refill allow an attempt
   * started at now; NO_DEADLINE when none waits or one waits without a
   * deadline.
   */
  private long waitShareLocked(long now) {
    if (waiters == 0 || waitDeadlines.size() < waiters) {
      return NO_DEADLINE;
    }
    long end = Long.MIN_VALUE;
    for (long d : waitDeadlines) {
      end = Math.max(end, shareEnd(now, d));
    }
    return end;
  }

  private void cutAttemptsLocked(long t) {
    for (Attempt a : refillAttempts) {
      if (a.last) {
        continue;
      }
      long at = Math.max(t, a.start + MIN_ATTEMPT);
      if (at >= a.cutAt) {
        continue;
      }
      a.cutAt = at;
      if (a.timer != null) {
        a.timer.cancel(false);
      }
      try {
        a.timer = sched.schedule(() -> a.cancel(CUT), Math.max(at - mono(), 0), TimeUnit.NANOSECONDS);
      } catch (java.util.concurrent.RejectedExecutionException e) {
        // closing
      }
    }
  }

  private static final class Round {
    final List<Endpoint> eps = new ArrayList<>();
    final List<Endpoint> probes = new ArrayList<>();
    FirnException held;

    void end() {
      for (Endpoint ep : probes) {
        ep.probing.set(false);
      }
    }
  }

  private Round order(long m) {
    List<Endpoint> all = eps;
    int n = all.size();
    int first = indexOf(all, active);
    Round r = new Round();
    List<Endpoint> later = new ArrayList<>();
    Endpoint wait = null;
    for (int i = 0; i < n; i++) {
      Endpoint ep = all.get((first + i) % n);
      long until = ep.retryUntil.get();
      if (until > m || (until != 0 && !ep.probing.compareAndSet(false, true))) {
        if (wait == null || until < wait.retryUntil.get()) {
          wait = ep;
        }
        continue;
      } else if (until != 0) {
        r.probes.add(ep);
      }
      if (ep.usable(m)) {
        r.eps.add(ep);
      } else {
        later.add(ep);
      }
    }
    r.eps.addAll(later);
    if (r.eps.isEmpty() && wait != null) {
      r.held = heldError(wait, n, m);
    }
    return r;
  }

  private FirnException heldError(Endpoint ep, int n, long m) {
    long left = Math.max(ep.retryUntil.get() - m, 10 * MS);
    String why = "client: " + n + " endpoints, each asked the client to wait; none asked, the first free ("
        + ep.addr + ") in " + (left / MS) + "ms";
    FirnException.Details d = ep.refusal;
    if (d == null) {
      return new FirnException(Reason.UNAVAILABLE, Status.Code.UNAVAILABLE, Duration.ofNanos(left), null, why, null);
    }
    return d.withRetry(Duration.ofNanos(left), why).toException("");
  }

  /** When every endpoint asked the client to wait, the mono reading at which the first is free; else MIN_VALUE. */
  private long heldUntil(long m) {
    Endpoint first = heldFirst(m);
    return first == null ? Long.MIN_VALUE : first.retryUntil.get();
  }

  /** When every endpoint asked the client to wait, the one free first; else null. */
  private Endpoint heldFirst(long m) {
    Endpoint first = null;
    long at = Long.MAX_VALUE;
    for (Endpoint ep : eps) {
      long until = ep.retryUntil.get();
      if (until <= m) {
        return null;
      }
      if (first == null || until < at) {
        first = ep;
        at = until;
      }
    }
    return first;
  }

  private static boolean failover(FirnException.Details d) {
    return switch (d.code) {
      case UNAVAILABLE -> true;
      case RESOURCE_EXHAUSTED -> d.reason == Reason.OVERLOADED;
      case DEADLINE_EXCEEDED, CANCELLED -> true; // the caller's deadline is checked before
      default -> false;
    };
  }

  private static boolean countsAgainst(FirnException.Details d, boolean missed) {
    return switch (d.code) {
      case UNAVAILABLE -> true;
      case RESOURCE_EXHAUSTED -> d.reason == Reason.OVERLOADED;
      case DEADLINE_EXCEEDED, CANCELLED -> missed;
      default -> false;
    };
  }

  private void markDown(Endpoint ep, FirnException.Details d, String why) {
    long m = mono();
    long down = DOWN_FOR;
    if (d.retryAfter != null) {
      down = Math.min(Math.max(d.retryAfter.toNanos(), 10 * MS), MAX_RETRY_WAIT);
      ep.refusal = d;
      ep.retryUntil.set(m + down);
    }
    if (d.overloaded()) {
      overloads.incrementAndGet();
      kick();
    }
    ep.downUntil.set(m + down);
    LOG.log(Level.FINE, "endpoint {0} failed ({1}, {2}) for {3}ms: {4}",
        new Object[] {ep.addr, d.code, why, down / MS, d.message});
  }

  private void markLacking(Endpoint ep) {
    ep.downUntil.set(mono() + LACKING_FOR);
  }

  private FirnException roundFailed(int tried, FirnException.Details last) {
    askResolve();
    if (tried == 0 || last == null) {
      return new FirnException(Reason.UNAVAILABLE, null, null, null,
          "client: no endpoint: the DNS names given resolved to no address yet", null);
    }
    Reason r = last.reason == Reason.ERROR_REASON_UNSPECIFIED ? Reason.UNAVAILABLE : last.reason;
    return new FirnException(r, last.code, last.retryAfter, last.metadata,
        "client: no endpoint serves (" + tried + " endpoints tried): " + last.code + ": " + last.message, last.cause);
  }

  private Fetched fetch(long deadline, int count, boolean refill) {
    awaitResolved(deadline);
    Round r = order(mono());
    try {
      if (r.held != null) {
        throw r.held;
      }
      List<Endpoint> list = r.eps;
      FirnException.Details last = null;
      int notFound = 0;
      for (int i = 0; i < list.size(); i++) {
        Endpoint ep = list.get(i);
        if (i > 0) {
          failovers.incrementAndGet();
        }
        Attempt a = startAttempt(deadline, i == list.size() - 1, refill, !ep.answered.get());
        Fetched f = null;
        RuntimeException err = null;
        try {
          f = fetchFrom(a, ep, count);
        } catch (RuntimeException e) {
          err = e;
        }
        boolean[] mc = endAttempt(a);
        if (err == null) {
          ep.served();
          active = ep;
          fetches.incrementAndGet();
          return f;
        }
        if (closing) {
          throw closedError();
        }
        fetchErrors.incrementAndGet();
        FirnException.Details d = FirnException.details(err);
        if (deadline != NO_DEADLINE && mono() >= deadline) {
          if (countsAgainst(d, mc[0])) {
            markDown(ep, d, "no answer by the deadline sent");
          }
          throw afterDeadline(d, ep);
        }
        if ((mc[0] || mc[1]) && d.reason == Reason.ERROR_REASON_UNSPECIFIED) {
          // No answer in time. A node that answered with its reason (a
          // shed, a generator that does not serve), if only as the deadline
          // passed, is reported with that reason instead.
          d = new FirnException.Details(Status.Code.DEADLINE_EXCEEDED, d.reason, d.retryAfter, d.metadata,
              "endpoint " + ep.addr + ": no answer within " + ((mono() - a.start) / MS) + "ms: " + d.message, d.cause, d.proto);
        }
        last = d;
        if (d.code == Status.Code.NOT_FOUND) {
          notFound++;
          markLacking(ep);
          continue;
        }
        if (!failover(d)) {
          throw d.toException("client: endpoint " + ep.addr + ": ");
        }
        if (countsAgainst(d, mc[0])) {
          markDown(ep, d, "failing over");
        }
      }
      if (notFound > 0 && notFound == list.size()) {
        throw last.toException("client: no endpoint runs the generator: ");
      }
      throw roundFailed(list.size(), last);
    } finally {
      r.end();
    }
  }

  private Fetched fetchFrom(Attempt a, Endpoint ep, int count) {
    if (ep.maxBatch.get() == 0) {
      learnBounds(a, ep);
    }
    for (;;) {
      long m = mono();
      boolean useRange = m >= ep.noRangeUntil.get();
      AtomicLong bound = ep.maxRange;
      int c = count;
      if (!useRange) {
        bound = ep.maxBatch;
        c = Math.min(c, maxBatch);
      }
      long b = bound.get();
      if (b > 0) {
        c = (int) Math.min(c, b);
      }
      final int cc = c;
      try {
        List<Run> runs;
        if (useRange) {
          NextRangeResponse resp = a.call(() -> ep.ids.withDeadline(a.deadline)
              .nextRange(NextRangeRequest.newBuilder().setGenerator(generator).setCount(cc).build()));
          runs = rangeRuns(resp, cc);
        } else {
          NextIDsResponse resp = a.call(() -> ep.ids.withDeadline(a.deadline)
              .nextIDs(NextIDsRequest.newBuilder().setGenerator(generator).setCount(cc).build()));
          if (resp.getIdsCount() == 0) {
            throw Status.INTERNAL.withDescription("NextIDs answered no IDs").asRuntimeException();
          }
          runs = runsOf(resp.getIdsList());
        }
        return new Fetched(runs, ep, m);
      } catch (StatusRuntimeException e) {
        Status.Code code = e.getStatus().getCode();
        if (useRange && code == Status.Code.UNIMPLEMENTED) {
          ep.noRangeUntil.set(m + RANGE_RETRY);
          continue;
        }
        boolean tooLarge = code == Status.Code.INVALID_ARGUMENT
            || (code == Status.Code.RESOURCE_EXHAUSTED && !FirnException.details(e).overloaded());
        if (tooLarge && cc > 1) {
          bound.set(cc / 2);
          continue;
        }
        throw e;
      }
    }
  }

  private static List<Run> rangeRuns(NextRangeResponse resp, int count) {
    ArrayList<Run> runs = new ArrayList<>(resp.getRunsCount());
    long left = count;
    for (io.github.firnid.firn.v1.Run r : resp.getRunsList()) {
      long n = Math.min(r.getCount(), left);
      if (n <= 0) {
        continue;
      }
      long first = r.getFirst();
      int k = runs.size() - 1;
      if (k >= 0 && Long.compareUnsigned(first, runs.get(k).first() + runs.get(k).count() - 1) <= 0) {
        throw Status.INTERNAL.withDescription("NextRange answered runs out of order").asRuntimeException();
      }
      runs.add(new Run(first, n));
      left -= n;
      if (left == 0) {
        break;
      }
    }
    if (runs.isEmpty()) {
      throw Status.INTERNAL.withDescription("NextRange answered no IDs").asRuntimeException();
    }
    return runs;
  }

  private void learnBounds(Attempt a, Endpoint ep) {
    InfoResponse info;
    try {
      info = a.call(() -> ep.ids.withDeadline(a.deadline).info(InfoRequest.getDefaultInstance()));
    } catch (StatusRuntimeException e) {
      FirnException.Details d = FirnException.details(e);
      if (a.ctx.isCancelled() || failover(d)) {
        throw e;
      }
      ep.maxRange.compareAndSet(0, -1);
      ep.maxBatch.compareAndSet(0, -1);
      return;
    }
    long mr = -1;
    long mb = -1;
    for (GeneratorInfo g : info.getGeneratorsList()) {
      if ((generator.isEmpty() && g.getIsDefault()) || (!generator.isEmpty() && g.getName().equals(generator))) {
        if (g.getMaxRange() > 0) {
          mr = g.getMaxRange() < 0 ? Long.MAX_VALUE : g.getMaxRange();
        }
        if (g.getMaxBatch() > 0) {
          mb = Integer.toUnsignedLong(g.getMaxBatch());
        }
        break;
      }
    }
    ep.maxRange.compareAndSet(0, mr);
    ep.maxBatch.compareAndSet(0, mb);
  }

  /** Info of the first endpoint that answers, with failover. */
  public InfoResponse info(Duration timeout) {
    return info0(deadlineOf(timeout));
  }

  private InfoResponse info0(long deadline) {
    if (closing) {
      throw closedError();
    }
    awaitResolved(deadline);
    Round r = order(mono());
    try {
      if (r.held != null) {
        throw r.held;
      }
      FirnException.Details last = null;
      for (int i = 0; i < r.eps.size(); i++) {
        Endpoint ep = r.eps.get(i);
        Attempt a = startAttempt(deadline, i == r.eps.size() - 1, false, !ep.answered.get());
        try {
          InfoResponse resp = a.call(() -> ep.ids.withDeadline(a.deadline).info(InfoRequest.getDefaultInstance()));
          endAttempt(a);
          ep.served();
          return resp;
        } catch (StatusRuntimeException e) {
          boolean[] mc = endAttempt(a);
          if (closing) {
            throw closedError();
          }
          FirnException.Details d = FirnException.details(e);
          if (deadline != NO_DEADLINE && mono() >= deadline) {
            throw afterDeadline(d, ep);
          }
          last = d;
          if (!failover(d) && d.code != Status.Code.NOT_FOUND) {
            throw d.toException("client: endpoint " + ep.addr + ": ");
          }
          if (countsAgainst(d, mc[0])) {
            markDown(ep, d, "failing over");
          }
        }
      }
      throw roundFailed(r.eps.size(), last);
    } finally {
      r.end();
    }
  }

  // =====================================================================
  // Endpoints: channels, health, DNS
  // =====================================================================

  static final class Target {
    final String raw;
    final String host;
    final int port;
    final boolean name;

    Target(String raw, String host, int port, boolean name) {
      this.raw = raw;
      this.host = host;
      this.port = port;
      this.name = name;
    }

    static Target parse(String raw) {
      boolean name = false;
      String hp = raw;
      if (raw.startsWith("dns:///")) {
        name = true;
        hp = raw.substring("dns:///".length());
      } else if (raw.contains("://")) {
        throw new IllegalArgumentException("endpoint " + raw + ": only host:port and dns:///name:port are supported");
      }
      int colon = hp.lastIndexOf(':');
      if (colon <= 0 || colon == hp.length() - 1) {
        throw new IllegalArgumentException("endpoint " + raw + ": want host:port");
      }
      String host = hp.substring(0, colon);
      if (host.startsWith("[") && host.endsWith("]")) {
        host = host.substring(1, host.length() - 1);
      }
      int port;
      try {
        port = Integer.parseInt(hp.substring(colon + 1));
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("endpoint " + raw + ": bad port");
      }
      if (port < 1 || port > 65535) {
        throw new IllegalArgumentException("endpoint " + raw + ": port outside [1, 65535]");
      }
      return new Target(raw, host, port, name);
    }
  }

  static String hostPort(String host, int port) {
    return host.contains(":") ? "[" + host + "]:" + port : host + ":" + port;
  }

  private ManagedChannel newChannel(String host, int port) {
    NettyChannelBuilder b = NettyChannelBuilder.forAddress(host, port)
        .maxInboundMessageSize(MAX_INBOUND)
        // The node refuses pings more often than every 10 s.
        .keepAliveTime(20, TimeUnit.SECONDS)
        .keepAliveTimeout(5, TimeUnit.SECONDS);
    if (ssl != null) {
      b.sslContext(ssl).negotiationType(NegotiationType.TLS);
    } else {
      b.usePlaintext();
    }
    return b.build();
  }

  private Endpoint newEndpoint(String host, int port, String from) {
    ManagedChannel ch = newChannel(host, port);
    // Connect now, not at the first call: a call's attempt (callTimeout)
    // then is not spent on a connection that a loaded JVM can take a
    // second to set up.
    ch.getState(true);
    return new Endpoint(hostPort(host, port), from, ch);
  }

  private void startWatch(Endpoint ep) {
    if (healthWatch) {
      watch(ep, WATCH_RETRY_MIN);
    }
  }

  private void watch(Endpoint ep, long retry) {
    if (closing || ep.stopped) {
      return;
    }
    HealthCheckRequest req = HealthCheckRequest.newBuilder().setService(generator).build();
    final long[] nextRetry = {retry};
    Context prev = ep.watchCtx.attach();
    try {
      ep.health.watch(req, new StreamObserver<HealthCheckResponse>() {
        @Override
        public void onNext(HealthCheckResponse r) {
          ep.status = switch (r.getStatus()) {
            case SERVING -> Endpoint.HEALTH_SERVING;
            case NOT_SERVING -> Endpoint.HEALTH_NOT_SERVING;
            default -> Endpoint.HEALTH_UNKNOWN;
          };
          nextRetry[0] = WATCH_RETRY_MIN;
        }

        @Override
        public void onError(Throwable t) {
          ended(Status.fromThrowable(t).getCode());
        }

        @Override
        public void onCompleted() {
          ended(Status.Code.OK);
        }

        private void ended(Status.Code code) {
          ep.status = Endpoint.HEALTH_UNKNOWN;
          if (closing || ep.stopped) {
            return;
          }
          if (code == Status.Code.UNIMPLEMENTED) {
            ep.noHealth = true;
            return;
          }
          long wait = nextRetry[0];
          try {
            sched.schedule(() -> watch(ep, Math.min(2 * wait, WATCH_RETRY_MAX)), wait, TimeUnit.NANOSECONDS);
          } catch (java.util.concurrent.RejectedExecutionException e) {
            // closing
          }
        }
      });
    } finally {
      ep.watchCtx.detach(prev);
    }
  }

  /**
   * Waits for the first resolution of the DNS names: until the caller's deadline, or, for a
   * refill (no deadline of its own: the callers waiting on it wait within theirs), until it is
   * done or the client closes. A refill cut at the call timeout failed every waiting caller with
   * "resolved to no address yet" when the first resolution was slow (a cold JVM on a busy host),
   * though their deadlines had room; the Go client's refill waits as this one now does.
   */
  private void awaitResolved(long deadline) {
    if (resolved.getCount() == 0 || !eps.isEmpty()) {
      // Endpoints to ask already (host:port ones beside the names): no
      // call waits for a name's first lookup (as the Go client).
      return;
    }
    try {
      if (deadline == NO_DEADLINE) {
        resolved.await(); // the first resolution counts down, and so does close
        return;
      }
      long left = deadline - mono();
      if (left > 0) {
        resolved.await(left, TimeUnit.NANOSECONDS);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private void askResolve() {
    if (!hasNames || closing) {
      return;
    }
    long m = mono();
    if (m - lastResolveAsk < 500 * MS) {
      return;
    }
    lastResolveAsk = m;
    resolveSoon();
  }

  /** Queues a resolution on the resolver thread (at most one queued). */
  private void resolveSoon() {
    if (!resolveQueued.compareAndSet(false, true)) {
      return;
    }
    try {
      resolveExec.execute(() -> {
        resolveQueued.set(false);
        resolveNow();
      });
    } catch (java.util.concurrent.RejectedExecutionException e) {
      resolveQueued.set(false); // closing
    }
  }

  private List<String> lookup(String host) throws Exception {
    if (resolver != null) {
      List<?> got = resolver.apply(host);
      if (got != null) {
        List<String> out = new ArrayList<>();
        for (Object a : got) {
          out.add(a instanceof InetAddress ia ? ia.getHostAddress() : String.valueOf(a));
        }
        return out;
      }
    }
    List<String> out = new ArrayList<>();
    for (InetAddress a : InetAddress.getAllByName(host)) {
      out.add(a.getHostAddress());
    }
    return out;
  }

  /** Resolves the DNS names: each address an endpoint; endpoints no name gives any more are stopped. */
  private void resolveNow() {
    if (closing) {
      return;
    }
    try {
      Map<String, String[]> want = new LinkedHashMap<>(); // addr -> {host, port, from}
      Set<String> failedNames = new HashSet<>();
      for (Target t : targets) {
        if (!t.name) {
          continue;
        }
        try {
          for (String a : lookup(t.host)) {
            want.putIfAbsent(hostPort(a, t.port), new String[] {a, Integer.toString(t.port), t.raw});
          }
        } catch (Exception e) {
          failedNames.add(t.raw);
          LOG.log(Level.FINE, "resolving {0}: {1}", new Object[] {t.raw, e});
        }
      }
      List<Endpoint> stop = new ArrayList<>();
      List<Endpoint> started = new ArrayList<>();
      synchronized (epMu) {
        if (closing) {
          return;
        }
        List<Endpoint> next = new ArrayList<>();
        Set<String> have = new HashSet<>();
        for (Endpoint ep : eps) {
          boolean fixed = ep.from.equals(ep.addr) && targets.stream().anyMatch(t -> !t.name && t.raw.equals(ep.from));
          if (fixed || want.containsKey(ep.addr) || failedNames.contains(ep.from)) {
            next.add(ep);
            have.add(ep.addr);
          } else {
            stop.add(ep);
          }
        }
        for (Map.Entry<String, String[]> e : want.entrySet()) {
          if (have.add(e.getKey())) {
            String[] v = e.getValue();
            Endpoint ep = newEndpoint(v[0], Integer.parseInt(v[1]), v[2]);
            next.add(ep);
            started.add(ep);
          }
        }
        eps = List.copyOf(next);
      }
      for (Endpoint ep : started) {
        startWatch(ep);
      }
      for (Endpoint ep : stop) {
        ep.stop();
      }
    } finally {
      resolved.countDown();
    }
  }

  // =====================================================================
  // Sequences
  // =====================================================================

  /** A sequence generator's section map: section → owner's gRPC address (null: none known). */
  static final class SeqMap {
    final long sections;
    final String[] owners;

    SeqMap(long sections, String[] owners) {
      this.sections = sections;
      this.owners = owners;
    }

    String owner(byte[] key) {
      if (sections == 0) {
        return null;
      }
      return owners[(int) Long.remainderUnsigned(fnv1a64(key), sections)];
    }

    int section(byte[] key) {
      return sections == 0 ? -1 : (int) Long.remainderUnsigned(fnv1a64(key), sections);
    }

    /**
     * This map, but where it names no owner of a section that old (of as
     * many sections) names, old's: an owner a WRONG_NODE named is not
     * forgotten by a map read from a node that does not know it.
     */
    SeqMap keepingKnown(SeqMap old) {
      if (old == null || old.sections != sections) {
        return this;
      }
      String[] o = null;
      for (int i = 0; i < owners.length; i++) {
        if (owners[i] == null && old.owners[i] != null) {
          if (o == null) {
            o = Arrays.copyOf(owners, owners.length);
          }
          o[i] = old.owners[i];
        }
      }
      return o == null ? this : new SeqMap(sections, o);
    }
  }

  /** FNV-1a, 64-bit, over the key's bytes: a key's section is fnv1a64(key) mod sections. */
  public static long fnv1a64(byte[] key) {
    long h = 0xcbf29ce484222325L;
    for (byte b : key) {
      h ^= (b & 0xff);
      h *= 0x100000001b3L;
    }
    return h;
  }

  static SeqMap seqMapOf(InfoResponse info, String generator) {
    for (GeneratorInfo g : info.getGeneratorsList()) {
      if ((generator.isEmpty() && !g.getIsDefault()) || (!generator.isEmpty() && !g.getName().equals(generator))) {
        continue;
      }
      if (!g.getKind().equals("seq") || g.getSections() == 0) {
        return new SeqMap(0, new String[0]);
      }
      int s = g.getSections();
      String[] owners = new String[s];
      for (SectionOwner o : g.getSectionOwnersList()) {
        if (Integer.toUnsignedLong(o.getSection()) < s && dialable(o.getAddress())) {
          owners[o.getSection()] = o.getAddress();
        }
      }
      return new SeqMap(s, owners);
    }
    return new SeqMap(0, new String[0]);
  }

  static boolean dialable(String addr) {
    if (addr == null) {
      return false;
    }
    int colon = addr.lastIndexOf(':');
    if (colon <= 0 || colon == addr.length() - 1) {
      return false;
    }
    String host = addr.substring(0, colon);
    return !(host.equals("0.0.0.0") || host.equals("[::]") || host.equals("::"));
  }

  /** The next {@code count} values of {@code key}'s sequence (key as UTF-8). */
  public SeqRange nextSeq(String key, int count) {
    return nextSeq(key.getBytes(StandardCharsets.UTF_8), count, null);
  }

  /** The next {@code count} values of {@code key}'s sequence (key as UTF-8), retried within the timeout. */
  public SeqRange nextSeq(String key, int count, Duration timeout) {
    return nextSeq(key.getBytes(StandardCharsets.UTF_8), count, timeout);
  }

  /** The next {@code count} values of {@code key}'s sequence, retried for up to 10 s. */
  public SeqRange nextSeq(byte[] key, int count) {
    return nextSeq(key, count, null);
  }

  /**
   * The next {@code count} values (1 to {@link #MAX_SEQ_COUNT}) of
   * {@code key}'s sequence (1 to {@link #MAX_SEQ_KEY} bytes), from the
   * key's owner, retried within the timeout (10 s without one).
   */
  public SeqRange nextSeq(byte[] key, int count, Duration timeout) {
    checkSeq(key, count);
    NextSeqResponse resp = seqCall(key, deadlineOf(timeout), (stub, k) ->
        stub.nextSeq(NextSeqRequest.newBuilder().setGenerator(generator).setKey(k).setCount(count).build()));
    return new SeqRange(resp.getFirst(), resp.getCount());
  }

  /** A value at or above every value handed out for the key. */
  public long currentSeq(String key) {
    return currentSeq(key.getBytes(StandardCharsets.UTF_8), null);
  }

  /** A value at or above every value handed out for the key. */
  public long currentSeq(byte[] key) {
    return currentSeq(key, null);
  }

  /** A value at or above every value handed out for the key (0 for a key never used), retried within the timeout. */
  public long currentSeq(byte[] key, Duration timeout) {
    checkSeq(key, 1);
    return seqCall(key, deadlineOf(timeout), (stub, k) ->
        stub.currentSeq(CurrentSeqRequest.newBuilder().setGenerator(generator).setKey(k).build())).getValue();
  }

  private static void checkSeq(byte[] key, int count) {
    if (key == null || key.length < 1 || key.length > MAX_SEQ_KEY) {
      throw FirnException.local(Reason.INVALID_ARGUMENT,
          "client: invalid key: " + (key == null ? 0 : key.length) + " bytes outside [1, " + MAX_SEQ_KEY + "]");
    }
    if (count < 1 || count > MAX_SEQ_COUNT) {
      throw FirnException.local(Reason.INVALID_ARGUMENT, "client: invalid count: " + count + " outside [1, " + MAX_SEQ_COUNT + "]");
    }
  }

  private interface SeqRpc<T> {
    T call(IDServiceGrpc.IDServiceBlockingStub stub, ByteString key);
  }

  private <T> T seqCall(byte[] key, long deadline, SeqRpc<T> rpc) {
    if (closing) {
      throw closedError();
    }
    seqEnsureMap(deadline);
    long end = deadline == NO_DEADLINE ? mono() + SEQ_RETRY_FOR : deadline;
    ByteString k = ByteString.copyFrom(key);
    String hint = null;
    int hops = 0;
    long backoff = 0;
    int anyN = 0;
    // The last refusal of this call that named its reason: it wins over an
    // attempt the caller's own deadline cut short (that says nothing new).
    FirnException.Details reasoned = null;
    for (;;) {
      if (closing) {
        throw closedError();
      }
      String addr = seqRoute(key, hint, anyN);
      if (addr == null) {
        throw new FirnException(Reason.UNAVAILABLE, null, null, null, "client: no endpoint to ask", null);
      }
      SeqTarget target = seqTarget(addr);
      IDServiceGrpc.IDServiceBlockingStub stub = target.stub();
      AtomicBoolean answered = target.answered();
      long now = mono();
      long sent = Math.min(now + (answered.get() ? callTimeout : Math.max(callTimeout, FIRST_ANSWER_TIMEOUT)), end);
      Attempt a = new Attempt(now, sent, true, false);
      allAttempts.add(a);
      if (closing) {
        a.cancel(CLOSED);
      }
      FirnException.Details d;
      boolean missed;
      try {
        T out = a.call(() -> rpc.call(stub.withDeadline(a.deadline), k));
        endAttempt(a);
        answered.set(true);
        return out;
      } catch (StatusRuntimeException e) {
        missed = endAttempt(a)[0];
        d = FirnException.details(e);
      }
      if (closing) {
        throw closedError();
      }
      boolean callerDone = deadline != NO_DEADLINE && mono() >= deadline;
      // What follows: WRONG_NODE follows the owner; UNAVAILABLE, a shed and
      // an attempt's own time running out are retried; anything else ends.
      boolean redirect = d.reason == Reason.WRONG_NODE;
      boolean retry = !redirect && switch (d.code) {
        case UNAVAILABLE -> true;
        case RESOURCE_EXHAUSTED -> d.overloaded();
        case DEADLINE_EXCEEDED, CANCELLED -> !callerDone;
        default -> false;
      };
      if (callerDone && !redirect) {
        if (d.code == Status.Code.DEADLINE_EXCEEDED || d.code == Status.Code.CANCELLED) {
          if (reasoned != null) {
            throw reasoned.toException("client: the caller's deadline ran out; the section's owner last said: ");
          }
          throw deadlineError();
        }
      }
      if (d.reason != Reason.ERROR_REASON_UNSPECIFIED && !redirect) {
        reasoned = d;
      }
      if (redirect) {
        seqRedirects.incrementAndGet();
        seqStale();
        String owner = d.metadata == null ? null : d.metadata.get("owner");
        if (!dialable(owner)) {
          throw d.toException("client: the section's owner gives an address a client cannot dial (" + owner + "): ");
        }
        seqHint(key, owner);
        hops++;
        if (hops <= MAX_SEQ_HOPS && !owner.equals(addr)) {
          hint = owner;
          continue;
        }
        retry = true;
      }
      if (!retry) {
        throw d.toException("client: " + addr + ": ");
      }
      seqRetries.incrementAndGet();
      seqStale();
      if (hint == null) {
        SeqMap m = seqMap;
        if (m == null || m.owner(key) == null) {
          anyN++;
        }
      }
      hint = null;
      hops = 0;
      long wait;
      if (d.retryAfter != null) {
        wait = Math.min(Math.max(d.retryAfter.toNanos(), 10 * MS), MAX_RETRY_WAIT);
      } else {
        if (backoff == 0) {
          backoff = SEQ_BACKOFF_MIN;
        }
        wait = backoff * 3 / 4 + ThreadLocalRandom.current().nextLong(backoff / 2 + 1);
        backoff = Math.min(2 * backoff, SEQ_BACKOFF_MAX);
      }
      if (mono() + wait > end) {
        Reason r = d.reason == Reason.ERROR_REASON_UNSPECIFIED ? Reason.UNAVAILABLE : d.reason;
        throw new FirnException(r, d.code, d.retryAfter, d.metadata,
            "client: the section's owner cannot answer now, and the wait it asks (" + wait / MS
                + "ms) would pass the deadline: " + d.code + ": " + d.message, d.cause);
      }
      try {
        if (closedLatch.await(wait, TimeUnit.NANOSECONDS)) {
          throw closedError();
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw closedError();
      }
    }
  }

  private String seqRoute(byte[] key, String hint, int n) {
    if (hint != null) {
      return hint;
    }
    SeqMap m = seqMap;
    if (m != null) {
      String o = m.owner(key);
      if (o != null) {
        return o;
      }
    }
    List<Endpoint> all = eps;
    if (all.isEmpty()) {
      return null;
    }
    long now = mono();
    int first = indexOf(all, active);
    List<Endpoint> order = new ArrayList<>();
    List<Endpoint> rest = new ArrayList<>();
    for (int i = 0; i < all.size(); i++) {
      Endpoint ep = all.get((first + i) % all.size());
      (ep.usable(now) ? order : rest).add(ep);
    }
    order.addAll(rest);
    return order.get(n % order.size()).addr;
  }

  private void seqHint(byte[] key, String addr) {
    SeqMap m = seqMap;
    if (m == null || m.sections == 0) {
      return;
    }
    int s = m.section(key);
    if (addr.equals(m.owners[s])) {
      return;
    }
    String[] owners = Arrays.copyOf(m.owners, m.owners.length);
    owners[s] = addr;
    seqMap = new SeqMap(m.sections, owners);
  }

  /** Where a sequence call goes, and whether that connection answered a call yet (see FIRST_ANSWER_TIMEOUT). */
  private record SeqTarget(IDServiceGrpc.IDServiceBlockingStub stub, AtomicBoolean answered) {}

  private SeqTarget seqTarget(String addr) {
    for (Endpoint ep : eps) {
      if (ep.addr.equals(addr)) {
        return new SeqTarget(ep.ids, ep.answered);
      }
    }
    ManagedChannel ch = seqConns.computeIfAbsent(addr, a -> {
      Target t = Target.parse(a);
      return newChannel(t.host, t.port);
    });
    if (closing) {
      ch.shutdownNow();
      throw closedError();
    }
    return new SeqTarget(IDServiceGrpc.newBlockingStub(ch), seqConnAnswered.computeIfAbsent(addr, a -> new AtomicBoolean()));
  }

  /** Loads the section map on the first sequence call; refreshes it in the background every 3 s of use. */
  private void seqEnsureMap(long deadline) {
    if (seqMap == null) {
      // One load at a time; a call that finds one under way waits for it
      // within its own deadline (as the Go client does), never for the
      // loader's whole attempt.
      CountDownLatch mine = null;
      CountDownLatch theirs;
      synchronized (seqLoadMu) {
        if (seqMap != null) {
          return;
        }
        theirs = seqLoading;
        if (theirs == null) {
          mine = seqLoading = new CountDownLatch(1);
        }
      }
      if (mine == null) {
        try {
          if (deadline == NO_DEADLINE) {
            theirs.await();
          } else if (deadline > mono()) {
            theirs.await(deadline - mono(), TimeUnit.NANOSECONDS);
          }
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
        return;
      }
      try {
        try {
          seqMap = seqMapOf(info0(deadline), generator);
        } catch (FirnException e) {
          seqMap = new SeqMap(0, new String[0]);
          if (e.reason() == Reason.CLOSED) {
            throw e;
          }
        }
        seqMapAt = mono();
      } finally {
        synchronized (seqLoadMu) {
          seqLoading = null;
        }
        mine.countDown();
      }
      return;
    }
    if (mono() - seqMapAt > SEQ_REFRESH_EVERY) {
      seqRefresh();
    }
  }

  /** After a refusal: refresh soon. */
  private void seqStale() {
    if (mono() - seqMapAt > SEQ_REFRESH_GAP) {
      seqRefresh();
    }
  }

  private void seqRefresh() {
    if (closing || !seqRefreshing.compareAndSet(false, true)) {
      return;
    }
    // The map as the refresh starts: an owner learned from a WRONG_NODE
    // while the refresh is in flight (seqHint replaces the map) is newer
    // than what the refresh brings, which may come from the very node that
    // said it does not own the section; the refresh then leaves the map be.
    // A hint learned before the refresh began is kept where the map read
    // names no owner (keepingKnown).
    SeqMap before = seqMap;
    try {
      exec.execute(() -> {
        try {
          SeqMap m = seqMapOf(info0(mono() + 2 * callTimeout), generator);
          if ((m.sections > 0 || seqMap == null) && seqMap == before) {
            seqMap = m.keepingKnown(before);
          }
        } catch (RuntimeException e) {
          // keep the old map
        } finally {
          seqMapAt = mono();
          seqRefreshing.set(false);
        }
      });
    } catch (java.util.concurrent.RejectedExecutionException e) {
      seqRefreshing.set(false);
    }
  }

  // =====================================================================
  // Close, stats, helpers
  // =====================================================================

  /**
   * Closes the client: every caller waiting and every call in flight ends
   * with CLOSED, buffered IDs are dropped, the connections close. Idempotent.
   */
  @Override
  public void close() {
    synchronized (mu) {
      if (closedLocked) {
        return;
      }
      closedLocked = true;
      closing = true;
      retireLocked(cur);
      cur = empty;
      for (Batch q : queue) {
        dropped.addAndGet(q.n);
      }
      queue.clear();
      notifyGen++;
      mu.notifyAll();
    }
    closedLatch.countDown();
    resolved.countDown(); // a wait for the first resolution ends with the client
    for (Attempt a : allAttempts) {
      a.cancel(CLOSED);
    }
    events.offer(STOP);
    sched.shutdownNow();
    resolveExec.shutdownNow();
    exec.shutdown();
    List<Endpoint> list;
    synchronized (epMu) {
      list = eps;
    }
    for (Endpoint ep : list) {
      ep.stop();
    }
    for (ManagedChannel ch : seqConns.values()) {
      ch.shutdownNow();
    }
    for (Attempt a : allAttempts) {
      a.cancel(CLOSED);
    }
  }

  /** A snapshot of the client's counters. */
  public Map<String, Object> stats() {
    Map<String, Object> m = new LinkedHashMap<>();
    long buffered;
    synchronized (mu) {
      buffered = bufferedLocked();
    }
    m.put("buffered", buffered);
    m.put("batch_size", batchSize.get());
    m.put("fetches", fetches.get());
    m.put("fetch_errors", fetchErrors.get());
    m.put("failovers", failovers.get());
    m.put("dropped", dropped.get());
    m.put("dropped_stale", droppedStale.get());
    m.put("dropped_behind", droppedBehind.get());
    m.put("rate", (long) rate);
    m.put("seq_redirects", seqRedirects.get());
    m.put("seq_retries", seqRetries.get());
    Endpoint a = active;
    m.put("endpoint", a == null ? "" : a.addr);
    return m;
  }

  /** The endpoints the client asks now (DNS names expanded). */
  public List<String> endpoints() {
    List<String> out = new ArrayList<>();
    for (Endpoint ep : eps) {
      out.add(ep.addr);
    }
    return out;
  }

  private static int indexOf(List<Endpoint> all, Endpoint ep) {
    for (int i = 0; i < all.size(); i++) {
      if (all.get(i) == ep) {
        return i;
      }
    }
    return 0;
  }

  private static long deadlineOf(Duration timeout) {
    if (timeout == null) {
      return NO_DEADLINE;
    }
    long n = timeout.toNanos();
    return n <= 0 ? mono() : mono() + n;
  }

  private static FirnException closedError() {
    return FirnException.local(Reason.CLOSED, "client: closed");
  }

  /**
   * The error of a call whose deadline had passed when an attempt at ep failed with d: the node's
   * refusal when it answered with its reason, if only as the deadline passed (the answer is there,
   * and it says why); DEADLINE when no answer came (the attempt ran out or was cancelled) or the
   * failure names no reason.
   */
  private static FirnException afterDeadline(FirnException.Details d, Endpoint ep) {
    if (d.reason != Reason.ERROR_REASON_UNSPECIFIED
        && d.code != Status.Code.DEADLINE_EXCEEDED && d.code != Status.Code.CANCELLED) {
      return d.toException("client: endpoint " + ep.addr + ": ");
    }
    return deadlineError();
  }

  private static FirnException deadlineError() {
    return FirnException.local(Reason.DEADLINE, "client: deadline exceeded");
  }

  // =====================================================================
  // Builder
  // =====================================================================

  /** Builds a {@link FirnClient}. Options are checked by {@link #build()}. */
  public static final class Builder {
    private final List<String> endpoints = new ArrayList<>();
    private String generator = "";
    private Duration callTimeout = Duration.ofSeconds(1);
    private Duration maxAge = Duration.ofMillis(100);
    private Duration batchWindow = Duration.ofMillis(10);
    private int minBatch = 16;
    private int maxBatch = 100_000;
    private boolean healthCheck = true;
    private Duration resolveInterval = Duration.ofSeconds(5);
    private Function<String, ? extends List<?>> resolver;
    private String caFile;
    private String certFile;
    private String keyFile;
    private boolean tls;

    private Builder() {}

    /** The nodes: {@code host:port}, or {@code dns:///name:port} (each address of the name an endpoint). */
    public Builder endpoints(String... e) {
      endpoints.addAll(Arrays.asList(e));
      return this;
    }

    public Builder endpoints(List<String> e) {
      endpoints.addAll(e);
      return this;
    }

    /** The generator; "" (the default) is the node's default generator. */
    public Builder generator(String g) {
      generator = g == null ? "" : g;
      return this;
    }

    /**
     * The longest an attempt at one endpoint may take (default 1 s; 10 ms to
     * 5 min). Until an endpoint has answered once, the round's last attempt
     * at it may take 10 s if this is shorter: its connection, TLS handshake
     * and first calls are inside it (the caller's deadline still cuts it).
     */
    public Builder callTimeout(Duration d) {
      callTimeout = d;
      return this;
    }

    /** The longest an ID stays buffered after the start of the RPC that fetched it (default 100 ms; 8 ms to 1 h). */
    public Builder maxAge(Duration d) {
      maxAge = d;
      return this;
    }

    /** How much of the measured demand one refill covers (default 10 ms; at most half of maxAge). */
    public Builder batchWindow(Duration d) {
      batchWindow = d;
      return this;
    }

    /** The smallest and largest refill (default 16 and 100,000; at most 1,000,000). */
    public Builder batchBounds(int min, int max) {
      minBatch = min;
      maxBatch = max;
      return this;
    }

    /** Whether to watch each endpoint's grpc.health.v1 status (default true). */
    public Builder healthCheck(boolean on) {
      healthCheck = on;
      return this;
    }

    /** How often the DNS names are resolved again (default 5 s; at least 100 ms). */
    public Builder resolveInterval(Duration d) {
      resolveInterval = d;
      return this;
    }

    /**
     * A resolver hook for the DNS names: name → addresses ({@link InetAddress}es, or IP literals as
     * strings). It may return null to use the system resolver for that name.
     */
    public Builder resolver(Function<String, ? extends List<?>> r) {
      resolver = r;
      return this;
    }

    /** TLS, the nodes' certificates checked against the CA in this PEM file (null: the JDK's trust store). */
    public Builder tls(String caFile) {
      tls = true;
      this.caFile = caFile;
      return this;
    }

    /** mTLS: TLS with this client certificate chain and key (PEM; PKCS#8, SEC1 EC or PKCS#1 RSA). */
    public Builder tls(String caFile, String certFile, String keyFile) {
      tls = true;
      this.caFile = caFile;
      this.certFile = certFile;
      this.keyFile = keyFile;
      return this;
    }

    /** Builds the client; it does not contact any node. Throws IllegalArgumentException for a bad option. */
    public FirnClient build() {
      if (endpoints.isEmpty()) {
        throw new IllegalArgumentException("endpoints: need at least 1");
      }
      Set<String> seen = new HashSet<>();
      List<Target> targets = new ArrayList<>();
      for (int i = 0; i < endpoints.size(); i++) {
        String e = endpoints.get(i);
        if (e == null || e.isEmpty()) {
          throw new IllegalArgumentException("endpoints[" + i + "] is empty");
        }
        if (!seen.add(e)) {
          throw new IllegalArgumentException("endpoints[" + i + "] " + e + " given twice");
        }
        targets.add(Target.parse(e));
      }
      long ma = maxAge.toNanos();
      if (ma < 8 * MS || ma > 3_600_000 * MS) {
        throw new IllegalArgumentException("maxAge " + maxAge + " outside [8ms, 1h]");
      }
      if (batchWindow.toNanos() < 100_000 || batchWindow.toNanos() > ma / 2) {
        throw new IllegalArgumentException("batchWindow " + batchWindow + " outside [100µs, maxAge/2]");
      }
      if (minBatch < 1 || maxBatch > 1_000_000 || minBatch > maxBatch) {
        throw new IllegalArgumentException("batch bounds [" + minBatch + ", " + maxBatch + "] not within [1, 1000000]");
      }
      long ct = callTimeout.toNanos();
      if (ct < 10 * MS || ct > 300_000 * MS) {
        throw new IllegalArgumentException("callTimeout " + callTimeout + " outside [10ms, 5m]");
      }
      if (resolveInterval.toNanos() < 100 * MS) {
        throw new IllegalArgumentException("resolveInterval " + resolveInterval + " below 100ms");
      }
      if ((certFile == null) != (keyFile == null)) {
        throw new IllegalArgumentException("TLS client certificate and key go together");
      }
      SslContext ssl = null;
      if (tls) {
        ssl = Tls.context(caFile, certFile, keyFile);
      }
      return new FirnClient(this, targets, ssl);
    }
  }
}
