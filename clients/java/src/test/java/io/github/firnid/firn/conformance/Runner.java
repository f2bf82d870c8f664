package io.github.firnid.firn.conformance;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.github.firnid.firn.client.FirnClient;
import io.github.firnid.firn.client.FirnException;
import io.github.firnid.firn.client.Run;
import io.github.firnid.firn.client.SeqRange;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * The conformance runner (test/conformance/README.md): reads commands, one
 * JSON object per line, from standard input and answers each with one line
 * on standard output.
 */
public final class Runner {
  private static final Gson GSON = new GsonBuilder().disableHtmlEscaping().serializeNulls().create();

  private FirnClient client;

  public static void main(String[] args) throws Exception {
    // gRPC logs go to standard error only.
    java.util.logging.Logger.getLogger("").setLevel(java.util.logging.Level.WARNING);
    PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, StandardCharsets.UTF_8);
    System.setOut(System.err);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    Runner r = new Runner();
    for (String line; (line = in.readLine()) != null; ) {
      if (line.isBlank()) {
        continue;
      }
      JsonObject answer;
      try {
        answer = r.handle(JsonParser.parseString(line).getAsJsonObject());
      } catch (Exception e) {
        answer = new JsonObject();
        answer.addProperty("ok", false);
        answer.addProperty("error", String.valueOf(e));
      }
      out.println(GSON.toJson(answer));
      out.flush();
    }
    if (r.client != null) {
      r.client.close();
    }
    System.exit(0);
  }

  private static JsonObject ok() {
    JsonObject o = new JsonObject();
    o.addProperty("ok", true);
    return o;
  }

  private static JsonObject fail(String msg) {
    JsonObject o = new JsonObject();
    o.addProperty("ok", false);
    o.addProperty("error", msg);
    return o;
  }

  private static long num(JsonObject o, String k) {
    JsonElement e = o.get(k);
    if (e == null || e.isJsonNull()) {
      return 0;
    }
    return e.getAsLong();
  }

  private static String str(JsonObject o, String k) {
    JsonElement e = o.get(k);
    return e == null || e.isJsonNull() ? null : e.getAsString();
  }

  JsonObject handle(JsonObject cmd) throws Exception {
    String op = str(cmd, "op");
    if (op == null) {
      return fail("no op");
    }
    switch (op) {
      case "open":
        return open(cmd);
      case "close":
        if (client != null) {
          client.close();
          client = null;
        }
        return ok();
      case "stats": {
        JsonObject o = ok();
        if (client != null) {
          Map<String, Object> s = client.stats();
          o.addProperty("failovers", (Long) s.get("failovers"));
          o.addProperty("seq_redirects", (Long) s.get("seq_redirects"));
        }
        return o;
      }
      case "next":
      case "next_n":
      case "next_range":
      case "next_seq":
      case "current_seq":
        if (client == null) {
          return fail("no open client");
        }
        return calls(op, cmd);
      case "bench":
        if (client == null) {
          return fail("no open client");
        }
        return bench(cmd);
      case "close_while_waiting":
        if (client == null) {
          return fail("no open client");
        }
        return closeWhileWaiting(cmd);
      default:
        return fail("unknown op " + op);
    }
  }

  private JsonObject open(JsonObject cmd) {
    if (client != null) {
      client.close();
      client = null;
    }
    FirnClient.Builder b = FirnClient.builder();
    List<String> eps = new ArrayList<>();
    JsonElement e = cmd.get("endpoints");
    if (e != null && e.isJsonArray()) {
      for (JsonElement x : e.getAsJsonArray()) {
        eps.add(x.getAsString());
      }
    }
    b.endpoints(eps);
    String gen = str(cmd, "generator");
    if (gen != null) {
      b.generator(gen);
    }
    JsonElement tls = cmd.get("tls");
    if (tls != null && tls.isJsonObject()) {
      JsonObject t = tls.getAsJsonObject();
      String ca = str(t, "ca");
      String cert = str(t, "cert");
      String key = str(t, "key");
      if (cert != null || key != null) {
        b.tls(ca, cert, key);
      } else {
        b.tls(ca);
      }
    }
    JsonElement res = cmd.get("resolve");
    if (res != null && res.isJsonObject()) {
      Map<String, List<String>> m = new HashMap<>();
      for (Map.Entry<String, JsonElement> en : res.getAsJsonObject().entrySet()) {
        List<String> addrs = new ArrayList<>();
        for (JsonElement a : en.getValue().getAsJsonArray()) {
          addrs.add(a.getAsString());
        }
        m.put(en.getKey(), addrs);
      }
      b.resolver(m::get);
    }
    long ct = num(cmd, "call_timeout_ms");
    if (ct > 0) {
      b.callTimeout(Duration.ofMillis(ct));
    }
    long ma = num(cmd, "max_age_ms");
    if (ma > 0) {
      b.maxAge(Duration.ofMillis(ma));
    }
    try {
      client = b.build();
    } catch (IllegalArgumentException ex) {
      return fail(ex.getMessage());
    }
    return ok();
  }

  /** One caller's results. */
  private static final class Caller {
    final List<String> ids = new ArrayList<>();
    final List<String[]> runs = new ArrayList<>();
    final JsonArray errors = new JsonArray();

    JsonObject json() {
      JsonObject o = new JsonObject();
      JsonArray a = new JsonArray();
      for (String id : ids) {
        a.add(id);
      }
      o.add("ids", a);
      JsonArray r = new JsonArray();
      for (String[] run : runs) {
        JsonArray p = new JsonArray();
        p.add(run[0]);
        p.add(run[1]);
        r.add(p);
      }
      o.add("runs", r);
      o.add("errors", errors);
      return o;
    }

    void error(int at, FirnException e) {
      JsonObject o = new JsonObject();
      o.addProperty("at", at);
      o.addProperty("reason", e.reason().name());
      o.addProperty("code", e.code().map(Enum::name).orElse(""));
      if (e.retryAfter().isPresent()) {
        o.addProperty("retry_ms", e.retryAfter().get().toMillis());
      } else {
        o.add("retry_ms", JsonNull.INSTANCE);
      }
      o.addProperty("message", String.valueOf(e.getMessage()));
      errors.add(o);
    }

    void error(int at, RuntimeException e) {
      JsonObject o = new JsonObject();
      o.addProperty("at", at);
      o.addProperty("reason", "ERROR_REASON_UNSPECIFIED");
      o.addProperty("code", "");
      o.add("retry_ms", JsonNull.INSTANCE);
      o.addProperty("message", String.valueOf(e));
      errors.add(o);
    }
  }

  private static String u(long v) {
    return Long.toUnsignedString(v);
  }

  private JsonObject calls(String op, JsonObject cmd) throws Exception {
    final long arrived = System.nanoTime();
    int callers = (int) Math.max(num(cmd, "callers"), 1);
    long calls = num(cmd, "calls");
    long forMs = num(cmd, "for_ms");
    long deadlineMs = num(cmd, "deadline_ms");
    long pauseMs = num(cmd, "pause_ms");
    long n = num(cmd, "n");
    int count = (int) num(cmd, "count");
    byte[] key;
    String kb = str(cmd, "key_base64");
    if (kb != null) {
      key = Base64.getDecoder().decode(kb);
    } else {
      String k = str(cmd, "key");
      key = k == null ? new byte[0] : k.getBytes(StandardCharsets.UTF_8);
    }
    final Duration timeout = deadlineMs > 0 ? Duration.ofMillis(deadlineMs) : null;
    final FirnClient c = client;
    Caller[] results = new Caller[callers];
    Thread[] threads = new Thread[callers];
    for (int t = 0; t < callers; t++) {
      Caller res = new Caller();
      results[t] = res;
      threads[t] = new Thread(() -> {
        for (int i = 0; ; i++) {
          if (forMs > 0) {
            if (System.nanoTime() - arrived >= TimeUnit.MILLISECONDS.toNanos(forMs)) {
              break;
            }
          } else if (i >= calls) {
            break;
          }
          if (i > 0 && pauseMs > 0) {
            try {
              Thread.sleep(pauseMs);
            } catch (InterruptedException e) {
              return;
            }
          }
          try {
            switch (op) {
              case "next" -> res.ids.add(u(timeout == null ? c.next() : c.next(timeout)));
              case "next_n" -> {
                for (long id : c.nextN((int) n, timeout)) {
                  res.ids.add(u(id));
                }
              }
              case "next_range" -> {
                for (Run r : c.nextRange(n, timeout)) {
                  res.runs.add(new String[] {u(r.first()), Long.toString(r.count())});
                }
              }
              case "next_seq" -> {
                SeqRange r = c.nextSeq(key, count == 0 ? 1 : count, timeout);
                res.runs.add(new String[] {u(r.first()), Integer.toString(r.count())});
              }
              case "current_seq" -> res.runs.add(new String[] {u(c.currentSeq(key, timeout)), "0"});
              default -> throw new IllegalStateException(op);
            }
          } catch (FirnException e) {
            res.error(i, e);
          } catch (RuntimeException e) {
            res.error(i, e);
          }
        }
      }, "caller-" + t);
    }
    for (Thread t : threads) {
      t.start();
    }
    for (Thread t : threads) {
      t.join();
    }
    JsonObject o = ok();
    JsonArray arr = new JsonArray();
    for (Caller r : results) {
      arr.add(r.json());
    }
    o.add("callers", arr);
    return o;
  }

  /** Counts the IDs {@code callers} callers get from next() in for_ms, after warm_ms of the same uncounted. */
  private JsonObject bench(JsonObject cmd) throws Exception {
    int callers = (int) Math.max(num(cmd, "callers"), 1);
    long warmMs = num(cmd, "warm_ms");
    long forMs = num(cmd, "for_ms");
    final FirnClient c = client;
    java.util.concurrent.atomic.LongAdder ids = new java.util.concurrent.atomic.LongAdder();
    java.util.concurrent.atomic.LongAdder errs = new java.util.concurrent.atomic.LongAdder();
    java.util.concurrent.atomic.AtomicBoolean counting = new java.util.concurrent.atomic.AtomicBoolean();
    java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
    long[] sink = new long[callers * 16];
    Thread[] threads = new Thread[callers];
    for (int t = 0; t < callers; t++) {
      final int me = t;
      threads[t] = new Thread(() -> {
        long n = 0;
        long e = 0;
        long x = 0;
        while (!stop.get()) {
          // Count in batches of 1024 between looks at the flags.
          boolean count = counting.get();
          for (int i = 0; i < 1024; i++) {
            try {
              x ^= c.next();
              if (count) {
                n++;
              }
            } catch (RuntimeException ex) {
              e++;
            }
          }
        }
        sink[me * 16] = x;
        ids.add(n);
        errs.add(e);
      }, "bench-" + t);
      threads[t].start();
    }
    Thread.sleep(warmMs);
    counting.set(true);
    long start = System.nanoTime();
    Thread.sleep(forMs);
    counting.set(false);
    double secs = (System.nanoTime() - start) / 1e9;
    stop.set(true);
    for (Thread t : threads) {
      t.join();
    }
    JsonObject o = ok();
    o.addProperty("ids", ids.sum());
    o.addProperty("errors", errs.sum());
    o.addProperty("seconds", secs);
    return o;
  }

  private JsonObject closeWhileWaiting(JsonObject cmd) throws Exception {
    int callers = (int) Math.max(num(cmd, "callers"), 1);
    long waitMs = num(cmd, "wait_ms");
    long deadlineMs = num(cmd, "deadline_ms");
    final Duration timeout = deadlineMs > 0 ? Duration.ofMillis(deadlineMs) : null;
    final FirnClient c = client;
    Caller[] results = new Caller[callers];
    Thread[] threads = new Thread[callers];
    for (int t = 0; t < callers; t++) {
      Caller res = new Caller();
      results[t] = res;
      threads[t] = new Thread(() -> {
        try {
          res.ids.add(u(timeout == null ? c.next() : c.next(timeout)));
        } catch (FirnException e) {
          res.error(0, e);
        } catch (RuntimeException e) {
          res.error(0, e);
        }
      }, "waiter-" + t);
      threads[t].start();
    }
    Thread.sleep(waitMs);
    long start = System.nanoTime();
    c.close();
    for (Thread t : threads) {
      t.join();
    }
    long closeMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
    JsonObject o = ok();
    o.addProperty("close_ms", closeMs);
    JsonArray arr = new JsonArray();
    for (Caller r : results) {
      arr.add(r.json());
    }
    o.add("callers", arr);
    return o;
  }
}
