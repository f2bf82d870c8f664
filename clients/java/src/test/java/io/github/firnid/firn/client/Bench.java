package io.github.firnid.firn.client;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.LongAdder;

/**
 * A micro benchmark of {@code next()} (no JMH): warms the buffer, then
 * takes IDs for a fixed time with 1 thread and with N threads, and prints
 * IDs/s.
 *
 * <pre>
 *   bench [--threads N] [--seconds S] [--max-age-ms M] [--max-batch B] ENDPOINT...
 *   bench --fake ...        an in-process fake node (the client's own ceiling)
 * </pre>
 *
 * Against a real node the figure is bounded by what the node issues (a
 * snowflake layout with 12 sequence bits gives 4096 IDs per ms per
 * worker); the fake node hands out whatever is asked, so its figure is the
 * client's take path alone.
 */
public final class Bench {
  public static void main(String[] args) throws Exception {
    int threads = Math.max(2, Runtime.getRuntime().availableProcessors());
    double seconds = 3;
    long maxAgeMs = 100;
    int maxBatch = 1_000_000;
    boolean fake = false;
    List<String> eps = new ArrayList<>();
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--threads" -> threads = Integer.parseInt(args[++i]);
        case "--seconds" -> seconds = Double.parseDouble(args[++i]);
        case "--max-age-ms" -> maxAgeMs = Long.parseLong(args[++i]);
        case "--max-batch" -> maxBatch = Integer.parseInt(args[++i]);
        case "--fake" -> fake = true;
        default -> eps.add(args[i]);
      }
    }
    FakeNode node = null;
    if (fake) {
      node = new FakeNode(1L << 40);
      eps.add(node.addr());
    }
    if (eps.isEmpty()) {
      System.err.println("usage: bench [--fake] [--threads N] [--seconds S] [--max-age-ms M] [--max-batch B] ENDPOINT...");
      System.exit(2);
    }
    try (FirnClient c = FirnClient.builder().endpoints(eps).maxAge(Duration.ofMillis(maxAgeMs))
        .batchBounds(16, maxBatch).build()) {
      // Warm-up: the JIT, the connection, and the refiller's demand measure.
      run(c, threads, Math.min(1.0, seconds / 2), false);
      run(c, 1, seconds, true);
      run(c, threads, seconds, true);
      System.out.println("stats: " + c.stats());
    } finally {
      if (node != null) {
        node.close();
      }
    }
  }

  private static void run(FirnClient c, int threads, double seconds, boolean print) throws Exception {
    LongAdder total = new LongAdder();
    LongAdder errors = new LongAdder();
    CountDownLatch start = new CountDownLatch(1);
    long[] sink = new long[threads * 16];
    Thread[] ts = new Thread[threads];
    final long durNs = (long) (seconds * 1e9);
    for (int t = 0; t < threads; t++) {
      final int me = t;
      ts[t] = new Thread(() -> {
        try {
          start.await();
        } catch (InterruptedException e) {
          return;
        }
        long end = System.nanoTime() + durNs;
        long n = 0;
        long x = 0;
        while (true) {
          // Check the clock every 1024 takes.
          for (int i = 0; i < 1024; i++) {
            try {
              x ^= c.next();
              n++;
            } catch (FirnException e) {
              errors.increment();
            }
          }
          if (System.nanoTime() >= end) {
            break;
          }
        }
        sink[me * 16] = x;
        total.add(n);
      });
      ts[t].start();
    }
    long t0 = System.nanoTime();
    start.countDown();
    for (Thread t : ts) {
      t.join();
    }
    double secs = (System.nanoTime() - t0) / 1e9;
    if (print) {
      System.out.printf("next(): %d thread(s): %,.0f IDs/s (%,d IDs in %.2fs, %d failed calls)%n",
          threads, total.sum() / secs, total.sum(), secs, errors.sum());
    }
  }
}
