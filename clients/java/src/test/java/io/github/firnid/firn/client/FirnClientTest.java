package io.github.firnid.firn.client;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import com.google.protobuf.Any;
import com.google.protobuf.ByteString;
import com.google.protobuf.CodedOutputStream;
import com.google.rpc.RetryInfo;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.Test;

public class FirnClientTest {

  // ---- FNV-1a 64, against the values firn's seq.Hash (Go) computes ----

  @Test
  public void fnvMatchesGo() {
    assertEquals("17504670429736252214", Long.toUnsignedString(FirnClient.fnv1a64("chat:1".getBytes(StandardCharsets.UTF_8))));
    assertEquals("17504669330224624003", Long.toUnsignedString(FirnClient.fnv1a64("chat:2".getBytes(StandardCharsets.UTF_8))));
    assertEquals("15475503120500903760", Long.toUnsignedString(FirnClient.fnv1a64(new byte[] {0x00, (byte) 0xff, 0x10})));
    assertEquals("12638187200555641996", Long.toUnsignedString(FirnClient.fnv1a64("a".getBytes(StandardCharsets.UTF_8))));
    // The section: unsigned remainder (the hash is above 2^63).
    FirnClient.SeqMap m = new FirnClient.SeqMap(8, new String[8]);
    assertEquals(6, m.section("chat:1".getBytes(StandardCharsets.UTF_8)));
    assertEquals(3, m.section("chat:2".getBytes(StandardCharsets.UTF_8)));
    assertEquals(0, m.section(new byte[] {0x00, (byte) 0xff, 0x10}));
    assertEquals(4, m.section("a".getBytes(StandardCharsets.UTF_8)));
  }

  // ---- the buffer's claim logic ----

  @Test
  public void claimsNeverOverlapUnderManyThreads() throws Exception {
    final int threads = 8;
    final long n = 1_000_000;
    final long first = (1L << 53) + 12345; // above 2^53: exact as a long
    Batch b = new Batch(first, n, n / 2, Long.MAX_VALUE, null, 0, 0);
    BitSet[] got = new BitSet[threads];
    AtomicLong halfHits = new AtomicLong();
    CountDownLatch start = new CountDownLatch(1);
    Thread[] ts = new Thread[threads];
    for (int t = 0; t < threads; t++) {
      final int me = t;
      got[t] = new BitSet();
      ts[t] = new Thread(() -> {
        try {
          start.await();
        } catch (InterruptedException e) {
          return;
        }
        for (;;) {
          // Mix single takes and multi takes as next() and nextN() do.
          long need = (me % 2 == 0) ? 1 : 7;
          long s = b.claim(need);
          if (s < 0) {
            return;
          }
          long hi = Math.min(s + need, n);
          if (s <= b.half && b.half < hi) {
            halfHits.incrementAndGet();
          }
          for (long i = s; i < hi; i++) {
            got[me].set((int) i);
          }
        }
      });
      ts[t].start();
    }
    start.countDown();
    for (Thread t : ts) {
      t.join();
    }
    BitSet all = new BitSet();
    long total = 0;
    for (BitSet g : got) {
      assertFalse("an index reached two takers", all.intersects(g));
      all.or(g);
      total += g.cardinality();
    }
    assertEquals(n, total);
    assertEquals(n, all.cardinality());
    assertEquals("exactly one taker wakes the refiller", 1, halfHits.get());
    assertEquals(n, b.served());
    assertEquals(0, b.remaining());
  }

  @Test
  public void retireStopsLaterTakes() {
    Batch b = new Batch(100, 10, -1, Long.MAX_VALUE, null, 0, 0);
    assertEquals(0, b.claim(3));
    assertEquals(3, b.retire());
    assertTrue(b.claim(1) < 0);
    assertTrue(b.claim(100) < 0);
    assertEquals(10, b.served());
  }

  @Test
  public void runsAreSortedAndMerged() {
    List<Run> runs = new ArrayList<>(List.of(new Run(20, 5), new Run(10, 10), new Run(40, 1)));
    List<Run> out = FirnClient.sortRuns(runs);
    assertEquals(List.of(new Run(10, 15), new Run(40, 1)), out);
    assertEquals(List.of(new Run(5, 3), new Run(9, 1)), FirnClient.runsOf(List.of(5L, 6L, 7L, 9L)));
  }

  // ---- error mapping ----

  private static Any errorInfo(String reason, String domain, String k, String v) throws Exception {
    ByteArrayOutputStream bo = new ByteArrayOutputStream();
    CodedOutputStream out = CodedOutputStream.newInstance(bo);
    out.writeString(1, reason);
    out.writeString(2, domain);
    ByteArrayOutputStream eo = new ByteArrayOutputStream();
    CodedOutputStream e = CodedOutputStream.newInstance(eo);
    e.writeString(1, k);
    e.writeString(2, v);
    e.flush();
    out.writeBytes(3, ByteString.copyFrom(eo.toByteArray()));
    out.flush();
    return Any.newBuilder().setTypeUrl("type.googleapis.com/google.rpc.ErrorInfo")
        .setValue(ByteString.copyFrom(bo.toByteArray())).build();
  }

  private static StatusRuntimeException refusal(int code, String reason, Duration retry) throws Exception {
    com.google.rpc.Status.Builder st = com.google.rpc.Status.newBuilder().setCode(code).setMessage("refused")
        .addDetails(errorInfo(reason, FirnException.DOMAIN, "owner", "127.0.0.1:7300"));
    if (retry != null) {
      st.addDetails(Any.pack(RetryInfo.newBuilder().setRetryDelay(com.google.protobuf.Duration.newBuilder()
          .setSeconds(retry.getSeconds()).setNanos(retry.getNano())).build()));
    }
    return StatusProto.toStatusRuntimeException(st.build());
  }

  @Test
  public void errorInfoAndRetryInfoAreRead() throws Exception {
    FirnException.Details d = FirnException.details(
        refusal(Status.Code.RESOURCE_EXHAUSTED.value(), "OVERLOADED", Duration.ofMillis(250)));
    assertEquals(Status.Code.RESOURCE_EXHAUSTED, d.code);
    assertEquals(Reason.OVERLOADED, d.reason);
    assertEquals(Duration.ofMillis(250), d.retryAfter);
    assertTrue(d.overloaded());
    FirnException e = d.toException("x: ");
    assertEquals(Reason.OVERLOADED, e.reason());
    assertEquals(Status.Code.RESOURCE_EXHAUSTED, e.code().get());
    assertEquals(Duration.ofMillis(250), e.retryAfter().get());

    d = FirnException.details(refusal(Status.Code.FAILED_PRECONDITION.value(), "WRONG_NODE", null));
    assertEquals(Reason.WRONG_NODE, d.reason);
    assertEquals("127.0.0.1:7300", d.metadata.get("owner"));
    assertEquals(null, d.retryAfter);

    // An unknown reason name, another domain, no details at all.
    assertEquals(Reason.ERROR_REASON_UNSPECIFIED,
        FirnException.details(refusal(Status.Code.UNAVAILABLE.value(), "SOMETHING_NEW", null)).reason);
    com.google.rpc.Status other = com.google.rpc.Status.newBuilder().setCode(Status.Code.UNAVAILABLE.value())
        .addDetails(errorInfo("OVERLOADED", "elsewhere", "a", "b")).build();
    assertEquals(Reason.ERROR_REASON_UNSPECIFIED, FirnException.details(StatusProto.toStatusRuntimeException(other)).reason);
    d = FirnException.details(Status.UNAVAILABLE.withDescription("connection refused").asRuntimeException());
    assertEquals(Status.Code.UNAVAILABLE, d.code);
    assertEquals(Reason.ERROR_REASON_UNSPECIFIED, d.reason);
    // A connection lost under a call: gRPC-Java's UNKNOWN "channel closed" is UNAVAILABLE.
    d = FirnException.details(Status.UNKNOWN.withDescription("channel closed")
        .withCause(new java.nio.channels.ClosedChannelException()).asRuntimeException());
    assertEquals(Status.Code.UNAVAILABLE, d.code);
  }

  @Test
  public void reasonNames() {
    assertEquals(Reason.SECTION_MOVING, Reason.ofNodeName("SECTION_MOVING"));
    assertEquals(Reason.ERROR_REASON_UNSPECIFIED, Reason.ofNodeName("CLOSED")); // a client reason is not a node's
    assertTrue(Reason.CLOCK_ROLLBACK.fromNode());
    assertFalse(Reason.DEADLINE.fromNode());
    // Every firn.v1.ErrorReason name has its Reason, in the same order.
    for (io.github.firnid.firn.v1.ErrorReason r : io.github.firnid.firn.v1.ErrorReason.values()) {
      if (r == io.github.firnid.firn.v1.ErrorReason.UNRECOGNIZED) {
        continue;
      }
      assertEquals(r.name(), Reason.values()[r.getNumber()].name());
    }
  }

  // ---- the client without a node ----

  @Test
  public void badOptionsAreRefused() {
    String[][] bad = {{}, {""}, {"a:1", "a:1"}, {"nohost"}, {"h:0"}, {"http://h:1"}};
    for (String[] eps : bad) {
      try {
        FirnClient.builder().endpoints(eps).build().close();
        fail("accepted " + String.join(",", eps));
      } catch (IllegalArgumentException expected) {
        // refused
      }
    }
    try {
      FirnClient.builder().endpoints("127.0.0.1:1").callTimeout(Duration.ofMillis(1)).build().close();
      fail("accepted a 1ms call timeout");
    } catch (IllegalArgumentException expected) {
      // refused
    }
  }

  @Test
  public void invalidArgumentsFailBeforeAnyRequest() {
    try (FirnClient c = FirnClient.builder().endpoints("127.0.0.1:1").build()) {
      expect(Reason.INVALID_ARGUMENT, () -> c.nextN(0));
      expect(Reason.INVALID_ARGUMENT, () -> c.nextRange(0));
      expect(Reason.INVALID_ARGUMENT, () -> c.nextSeq("", 1));
      expect(Reason.INVALID_ARGUMENT, () -> c.nextSeq(new byte[257], 1));
      expect(Reason.INVALID_ARGUMENT, () -> c.nextSeq("k", 10001));
    }
  }

  @Test
  public void unreachableNodeFailsTheRoundAndCloseEndsWaiters() throws Exception {
    // Port 1 on loopback refuses connections: the round fails UNAVAILABLE.
    FirnClient c = FirnClient.builder().endpoints("127.0.0.1:1").callTimeout(Duration.ofMillis(500)).build();
    FirnException e = expect(null, () -> c.next(Duration.ofSeconds(3)));
    assertTrue(e.reason() == Reason.UNAVAILABLE || e.reason() == Reason.DEADLINE);
    c.close();
    expect(Reason.CLOSED, c::next);
    expect(Reason.CLOSED, () -> c.nextN(5));
    c.close(); // idempotent
  }

  @Test
  public void closeEndsCallersWaitingWithoutDeadline() throws Exception {
    // A listener that accepts and never answers: callers wait.
    try (java.net.ServerSocket hang = new java.net.ServerSocket(0, 50, java.net.InetAddress.getLoopbackAddress())) {
      FirnClient c = FirnClient.builder().endpoints("127.0.0.1:" + hang.getLocalPort()).callTimeout(Duration.ofSeconds(30)).build();
      int n = 4;
      FirnException[] got = new FirnException[n];
      Thread[] ts = new Thread[n];
      for (int i = 0; i < n; i++) {
        final int me = i;
        ts[i] = new Thread(() -> {
          try {
            c.next();
          } catch (FirnException e) {
            got[me] = e;
          }
        });
        ts[i].start();
      }
      Thread.sleep(300);
      long t0 = System.nanoTime();
      c.close();
      for (Thread t : ts) {
        t.join(5000);
      }
      long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
      assertTrue("close took " + ms + "ms", ms < 2000);
      for (FirnException e : got) {
        assertNotNull(e);
        assertEquals(Reason.CLOSED, e.reason());
      }
    }
  }

  @Test
  public void ecKeyIsWrappedAsPkcs8() throws Exception {
    java.security.KeyPairGenerator g = java.security.KeyPairGenerator.getInstance("EC");
    g.initialize(new java.security.spec.ECGenParameterSpec("secp256r1"));
    java.security.KeyPair kp = g.generateKeyPair();
    byte[] pkcs8 = kp.getPrivate().getEncoded();
    // The PKCS#8 form holds the SEC1 key in its OCTET STRING; unwrap it
    // with the curve added back as [0] is not needed: wrap the inner key
    // (which Java writes without [0]) after adding the curve.
    byte[] sec1 = innerOctets(pkcs8);
    byte[] curve = {(byte) 0xa0, 0x0a, 0x06, 0x08, 0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x03, 0x01, 0x07};
    byte[] withCurve = addToSequence(sec1, curve);
    byte[] wrapped = Tls.ecToPkcs8(withCurve);
    java.security.PrivateKey k = java.security.KeyFactory.getInstance("EC")
        .generatePrivate(new java.security.spec.PKCS8EncodedKeySpec(wrapped));
    assertEquals(((java.security.interfaces.ECPrivateKey) kp.getPrivate()).getS(),
        ((java.security.interfaces.ECPrivateKey) k).getS());
  }

  private static byte[] innerOctets(byte[] pkcs8) {
    // The last element of the outer SEQUENCE is the OCTET STRING.
    for (int i = pkcs8.length - 1; i > 0; i--) {
      if (pkcs8[i] == 0x04 && i + 2 < pkcs8.length) {
        int len = pkcs8[i + 1] & 0xff;
        int off = i + 2;
        if (len == 0x81) {
          len = pkcs8[i + 2] & 0xff;
          off++;
        }
        if (off + len == pkcs8.length && pkcs8[off] == 0x30) {
          return java.util.Arrays.copyOfRange(pkcs8, off, off + len);
        }
      }
    }
    throw new AssertionError("no inner key");
  }

  private static byte[] addToSequence(byte[] seq, byte[] extra) {
    int len = seq[1] & 0xff;
    int off = 2;
    if (len == 0x81) {
      len = seq[2] & 0xff;
      off = 3;
    }
    byte[] body = new byte[len + extra.length];
    System.arraycopy(seq, off, body, 0, len);
    System.arraycopy(extra, 0, body, len, extra.length);
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.write(0x30);
    if (body.length < 0x80) {
      out.write(body.length);
    } else {
      out.write(0x81);
      out.write(body.length);
    }
    out.writeBytes(body);
    return out.toByteArray();
  }


  // ---- the client against an in-process fake node ----

  @Test
  public void manyThreadsNeverGetAnIdTwice() throws Exception {
    try (FakeNode node = new FakeNode((1L << 60) + 7);
        FirnClient c = FirnClient.builder().endpoints(node.addr()).build()) {
      final int threads = 8;
      final int calls = 20_000;
      long[][] got = new long[threads][];
      Thread[] ts = new Thread[threads];
      for (int t = 0; t < threads; t++) {
        final int me = t;
        ts[t] = new Thread(() -> {
          long[] mine = new long[calls + 10 * 50];
          int k = 0;
          for (int i = 0; i < calls; i++) {
            mine[k++] = c.next(Duration.ofSeconds(5));
            if (i % 2000 == 0) {
              for (long id : c.nextN(50, Duration.ofSeconds(5))) {
                mine[k++] = id;
              }
            }
          }
          got[me] = java.util.Arrays.copyOf(mine, k);
        });
        ts[t].start();
      }
      for (Thread t : ts) {
        t.join();
      }
      java.util.HashSet<Long> seen = new java.util.HashSet<>();
      for (long[] mine : got) {
        for (int i = 0; i < mine.length; i++) {
          assertTrue("ID " + mine[i] + " reached two callers", seen.add(mine[i]));
          assertTrue(mine[i] >= (1L << 60) + 7);
        }
      }
      assertEquals(threads * (calls + 10 * 50), seen.size());
    }
  }

  @Test
  public void nextIdsIncreasePerCallerAndRangesAddUp() throws Exception {
    try (FakeNode node = new FakeNode(1000);
        FirnClient c = FirnClient.builder().endpoints(node.addr()).build()) {
      long prev = -1;
      for (int i = 0; i < 5000; i++) {
        long id = c.next();
        assertTrue(id > prev);
        prev = id;
      }
      List<Run> runs = c.nextRange(300_000);
      long total = 0;
      for (Run r : runs) {
        total += r.count();
      }
      assertEquals(300_000, total);
      long[] ids = c.nextN(1000);
      for (int i = 1; i < ids.length; i++) {
        assertTrue(ids[i] > ids[i - 1]);
      }
    }
  }

  @Test
  public void shedReachesTheCallerWithRetryInfoAndIsAskedOncePerRetry() throws Exception {
    try (FakeNode node = new FakeNode(1);
        FirnClient c = FirnClient.builder().endpoints(node.addr()).build()) {
      c.next(Duration.ofSeconds(5)); // connected
      node.shed = true;
      node.shedRetry = Duration.ofSeconds(2);
      long refused = System.nanoTime();
      FirnException e = expect(Reason.OVERLOADED, () -> c.nextN(5000, Duration.ofSeconds(2)));
      assertEquals(io.grpc.Status.Code.RESOURCE_EXHAUSTED, e.code().get());
      assertTrue(e.retryAfter().isPresent());
      // A refill the client sent before it learned to wait may reach the
      // node after this refusal: the calls settle before they are counted.
      long asked = settled(node.calls);
      long t0 = System.nanoTime();
      for (int i = 0; i < 20; i++) {
        FirnException again = expect(Reason.OVERLOADED, () -> c.nextN(5000, Duration.ofSeconds(2)));
        assertTrue(again.retryAfter().isPresent());
      }
      assertTrue("refusals came at once", System.nanoTime() - t0 < TimeUnit.MILLISECONDS.toNanos(400));
      assertEquals("a node that asked to wait is not asked again before then", asked, node.calls.get());
      node.shed = false;
      long left = refused + TimeUnit.MILLISECONDS.toNanos(2100) - System.nanoTime();
      if (left > 0) {
        Thread.sleep(TimeUnit.NANOSECONDS.toMillis(left) + 1);
      }
      assertEquals(5000, c.nextN(5000, Duration.ofSeconds(2)).length);
    }
  }

  @Test
  public void failsOverFromRefusingAndHangingNodes() throws Exception {
    try (FakeNode a = new FakeNode(1L << 40); FakeNode b = new FakeNode(1L << 50)) {
      a.refuseReason = "DRAINING";
      try (FirnClient c = FirnClient.builder().endpoints(a.addr(), b.addr()).build()) {
        long id = c.next(Duration.ofSeconds(3));
        assertTrue("served by b", id >= (1L << 50));
      }
      a.refuseReason = null;
      a.hang = true;
      try (FirnClient c = FirnClient.builder().endpoints(a.addr(), b.addr()).callTimeout(Duration.ofSeconds(10)).build()) {
        long t0 = System.nanoTime();
        long id = c.next(Duration.ofSeconds(1));
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue("served by b", id >= (1L << 50));
        assertTrue("failed over within the caller's deadline (" + ms + "ms)", ms < 1000);
        assertTrue(((Long) c.stats().get("failovers")) >= 1);
      }
    }
  }

  @Test
  public void aRoundFailsWithTheNodesReason() throws Exception {
    try (FakeNode a = new FakeNode(1)) {
      a.refuseReason = "CLOCK_ROLLBACK";
      try (FirnClient c = FirnClient.builder().endpoints(a.addr()).build()) {
        long t0 = System.nanoTime();
        FirnException e = expect(Reason.CLOCK_ROLLBACK, () -> c.next(Duration.ofSeconds(2)));
        assertEquals(io.grpc.Status.Code.UNAVAILABLE, e.code().get());
        assertTrue(System.nanoTime() - t0 < TimeUnit.MILLISECONDS.toNanos(1500));
      }
    }
  }


  // A node's refusal that reaches the client after the caller's deadline
  // passed, but before the client decides, is reported with the node's
  // reason, not as DEADLINE: the answer is there, and it says why. The
  // client's clock is moved past the caller's deadline as the node refuses
  // the caller's own request (the call's gRPC deadline, on the real clock,
  // is minutes away); the refills' requests (other counts) leave it be.
  @Test
  public void aRefusalArrivingAfterTheCallersDeadlineKeepsTheNodesReason() throws Exception {
    try (FakeNode node = new FakeNode(1)) {
      node.refuseReason = "NTP_OFFSET";
      node.beforeRefusal = count -> {
        if (count == 123_457 || count == 0) { // the nextN's fetch, or Info
          FirnClient.clockAheadForTest += TimeUnit.HOURS.toNanos(1);
        }
      };
      try (FirnClient c = FirnClient.builder().endpoints(node.addr()).callTimeout(Duration.ofMinutes(1)).build()) {
        // More than a batch: fetched directly, under the caller's deadline.
        FirnException e = expect(Reason.NTP_OFFSET, () -> c.nextN(123_457, Duration.ofMinutes(10)));
        assertEquals(io.grpc.Status.Code.UNAVAILABLE, e.code().get());
        node.refuseInfo = true;
        e = expect(Reason.NTP_OFFSET, () -> c.info(Duration.ofMinutes(10)));
        assertEquals(io.grpc.Status.Code.UNAVAILABLE, e.code().get());
      } finally {
        node.beforeRefusal = null;
        FirnClient.clockAheadForTest = 0;
      }
    }
  }

  @Test
  public void nodeWithoutNextRangeIsAskedNextIds() throws Exception {
    try (FakeNode node = new FakeNode(500)) {
      node.noRange = true;
      try (FirnClient c = FirnClient.builder().endpoints(node.addr()).build()) {
        long first = c.next(Duration.ofSeconds(3));
        assertTrue(first >= 500);
        assertEquals(40_000, c.nextN(40_000, Duration.ofSeconds(3)).length);
        long rangeAsked = node.rangeCalls.get();
        c.nextRange(50_000, Duration.ofSeconds(3));
        assertEquals("NextRange is not asked again for a while", rangeAsked, node.rangeCalls.get());
        assertTrue(node.idsCalls.get() >= 2);
      }
    }
  }

  @Test
  public void staleIdsAreNeverHandedOut() throws Exception {
    try (FakeNode node = new FakeNode(1000);
        FirnClient c = FirnClient.builder().endpoints(node.addr()).maxAge(Duration.ofMillis(30))
            .batchWindow(Duration.ofMillis(5)).build()) {
      long a = c.next(Duration.ofSeconds(3));
      long fetchedUpTo = node.counter.get(); // every ID below it was fetched by then
      Thread.sleep(100);
      long b = c.next(Duration.ofSeconds(3));
      assertTrue("an ID " + b + " of a batch older than maxAge was handed out (first " + a + ")", b >= fetchedUpTo);
      assertTrue(((Long) c.stats().get("dropped_stale")) > 0);
    }
  }


  @Test
  public void aSlowFirstResolutionWaitsWithinTheCallersDeadline() throws Exception {
    // The first answer of the names comes after the call timeout: the
    // refill that serves next() waits for it, and the caller, whose
    // deadline has room, gets its ID (before, the refill gave up at the
    // call timeout and failed the caller "resolved to no address yet").
    try (FakeNode node = new FakeNode(1)) {
      String port = node.addr().substring(node.addr().lastIndexOf(':') + 1);
      java.util.concurrent.atomic.AtomicInteger asked = new java.util.concurrent.atomic.AtomicInteger();
      try (FirnClient c = FirnClient.builder().endpoints("dns:///firn.test:" + port)
          .callTimeout(Duration.ofMillis(300))
          .resolver(host -> {
            if (asked.getAndIncrement() == 0) {
              try {
                Thread.sleep(800);
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
            }
            return List.of("127.0.0.1");
          })
          .build()) {
        assertTrue(c.next(Duration.ofSeconds(3)) >= 1);
      }
    }
  }

  @Test
  public void aFixedEndpointServesWhileANameIsFirstResolved() throws Exception {
    // Endpoints given as host:port serve at once; a DNS name beside them
    // whose first lookup hangs holds up no call (as the Go client: a call
    // waits for the first resolution only while there is no endpoint).
    CountDownLatch release = new CountDownLatch(1);
    try (FakeNode node = new FakeNode(1L << 40);
        FirnClient c = FirnClient.builder().endpoints(node.addr(), "dns:///slow.test:1").healthCheck(false)
            .resolver(host -> {
              try {
                release.await(30, TimeUnit.SECONDS);
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
              return List.of("127.0.0.1");
            })
            .build()) {
      try {
        assertTrue(c.next(Duration.ofSeconds(5)) >= 1L << 40);
        assertEquals(5000, c.nextN(5000, Duration.ofSeconds(5)).length);
      } catch (FirnException e) {
        fail(e.reason() + ": " + e.getMessage() + ", though endpoint " + node.addr()
            + " serves (the name's first lookup has not answered)");
      } finally {
        release.countDown();
      }
    } finally {
      release.countDown();
    }
  }

  @Test
  public void aSlowFirstAnswerServesWithinTheCallersDeadline() throws Exception {
    // The endpoint's answers take longer than the call timeout (as a cold
    // connection and TLS handshake on a loaded machine do): until it has
    // answered once, the round's last attempt is not bounded by the call
    // timeout, so callers whose deadlines have room are served. Once it
    // has answered, a slow answer fails the attempt at the call timeout.
    for (boolean buffered : new boolean[] {true, false}) {
      try (FakeNode node = new FakeNode(1)) {
        node.delayMs = 700;
        try (FirnClient c = FirnClient.builder().endpoints(node.addr()).callTimeout(Duration.ofMillis(300))
            .maxAge(Duration.ofSeconds(5)).build()) {
          long t0 = System.nanoTime();
          try {
            if (buffered) {
              assertTrue(c.next(Duration.ofSeconds(3)) >= 1);
            } else {
              assertEquals(5000, c.nextN(5000, Duration.ofSeconds(3)).length);
            }
          } catch (FirnException e) {
            fail("first call (" + (buffered ? "next" : "nextN") + "), " + (System.nanoTime() - t0) / 1_000_000
                + "ms after it began: " + e.getMessage());
          }
          FirnException e = expect(null, () -> c.nextN(50_000, Duration.ofSeconds(3)));
          assertTrue(e.getMessage(), e.getMessage().contains("no answer within"));
        }
      }
    }
  }

  @Test
  public void aMapReadAgainKeepsAnOwnerItDoesNotName() {
    // An owner learned from WRONG_NODE survives a refresh read from a node
    // that names no owner of that section (the race that made the next test
    // redirect twice: a refresh begun just after the hint); an owner the
    // read names wins; a map of another shape replaces the old one whole.
    FirnClient.SeqMap old = new FirnClient.SeqMap(3, new String[] {"a:1", "b:1", null});
    FirnClient.SeqMap read = new FirnClient.SeqMap(3, new String[] {null, "c:1", null});
    assertArrayEquals(new String[] {"a:1", "c:1", null}, read.keepingKnown(old).owners);
    assertArrayEquals(new String[] {null, "c:1", null}, read.owners);
    FirnClient.SeqMap other = new FirnClient.SeqMap(2, new String[] {null, null});
    assertSame(other, other.keepingKnown(old));
    assertSame(read, read.keepingKnown(null));
  }

  @Test
  public void sequenceCallsFollowWrongNodeAndRetrySectionMoving() throws Exception {
    try (FakeNode owner = new FakeNode(1); FakeNode other = new FakeNode(1)) {
      other.seqOwner = owner.addr(); // other refuses WRONG_NODE naming owner
      owner.moving.set(2); // the owner answers SECTION_MOVING twice first
      try (FirnClient c = FirnClient.builder().endpoints(other.addr()).generator("chats").build()) {
        long t0 = System.nanoTime();
        SeqRange r = c.nextSeq("chat:1", 3, Duration.ofSeconds(3));
        assertEquals(1, r.first());
        assertEquals(3, r.count());
        assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(90)); // waited the RetryInfo twice
        assertEquals(1L, c.stats().get("seq_redirects"));
        // The owner is remembered: the next call goes to it directly.
        long before = other.seqCalls.get();
        assertEquals(4, c.nextSeq("chat:1", 1, Duration.ofSeconds(3)).first());
        assertEquals(before, other.seqCalls.get());
        assertEquals(1L, c.stats().get("seq_redirects"));
        // A section that keeps moving past the deadline: SECTION_MOVING with its RetryInfo.
        // (A second: on a loaded machine the JVM's first attempt may take most of
        // a shorter one, and an attempt the deadline cuts before any answer is
        // rightly DEADLINE.)
        owner.moving.set(1000);
        FirnException e = expect(Reason.SECTION_MOVING, () -> c.nextSeq("chat:1", 1, Duration.ofSeconds(1)));
        assertTrue(e.retryAfter().isPresent());
        assertEquals(io.grpc.Status.Code.UNAVAILABLE, e.code().get());
      }
    }
  }

  @Test
  public void sequenceCallsGoToTheOwnerTheMapNames() throws Exception {
    try (FakeNode owner = new FakeNode(1); FakeNode other = new FakeNode(1)) {
      other.seqOwner = owner.addr();
      other.mapNamesOwner = true;
      try (FirnClient c = FirnClient.builder().endpoints(other.addr()).generator("chats").build()) {
        for (int i = 1; i <= 5; i++) {
          assertEquals(i, c.nextSeq(new byte[] {(byte) i, 0}, 1).first());
        }
        assertEquals(0L, c.stats().get("seq_redirects"));
        assertEquals(0, other.seqCalls.get());
      }
    }
  }

  /** The count once it has not moved for 100 ms (at most 1 s). */
  private static long settled(java.util.concurrent.atomic.AtomicLong n) throws InterruptedException {
    long v = n.get();
    long stable = System.nanoTime();
    long end = stable + TimeUnit.SECONDS.toNanos(1);
    while (System.nanoTime() < end) {
      Thread.sleep(10);
      long w = n.get();
      if (w != v) {
        v = w;
        stable = System.nanoTime();
      } else if (System.nanoTime() - stable >= TimeUnit.MILLISECONDS.toNanos(100)) {
        break;
      }
    }
    return v;
  }

  @Test
  public void idsTakenForAFailedNextNAreCountedDropped() throws Exception {
    try (FakeNode node = new FakeNode(1000)) {
      node.rangeAnswers = 1; // one refill answered, every later one refused
      try (FirnClient c = FirnClient.builder().endpoints(node.addr()).healthCheck(false)
          .maxAge(Duration.ofMinutes(1)).build()) {
        c.next();
        long fetched = node.counter.get() - 1000;
        assertTrue("fetched " + fetched, fetched > 1);
        FirnException e = expect(null, () -> c.nextN(1_000_000, Duration.ofMillis(500)));
        assertEquals(e.getMessage(), Long.valueOf(fetched - 1), c.stats().get("dropped"));
      }
    }
  }

  // A nextRange larger than the node's max_range is fetched in several
  // NextRange calls; when a later one fails, the IDs the earlier ones took
  // are never handed out and are counted dropped.
  @Test
  public void idsOfAnEarlierFetchOfAFailedNextRangeAreCountedDropped() throws Exception {
    try (FakeNode node = new FakeNode(1000)) {
      node.infoMaxRange = 400;
      node.rangeAnswers = 1; // the first NextRange answered, later ones refused
      try (FirnClient c = FirnClient.builder().endpoints(node.addr()).healthCheck(false)
          .maxAge(Duration.ofMinutes(1)).build()) {
        FirnException e = expect(Reason.LEASE_LOST, () -> c.nextRange(1000, Duration.ofMillis(500)));
        long fetched = node.counter.get() - 1000;
        assertEquals("fetched by the failed call", 400, fetched);
        assertEquals(e.getMessage(), Long.valueOf(fetched), c.stats().get("dropped"));
      }
    }
  }

  // nextN takes the buffer's IDs first, then fetches the rest directly;
  // when that fetch outlasts maxAge, what it took from the buffer went stale
  // meanwhile: dropped (counted) and taken again, never handed out.
  @Test
  public void aSplitNextNTakesAgainWhatWentStaleWhileItWaited() throws Exception {
    try (FakeNode node = new FakeNode(1000)) {
      try (FirnClient c = FirnClient.builder().endpoints(node.addr()).healthCheck(false)
          .maxAge(Duration.ofMillis(300)).build()) {
        long first = c.next();
        long fetchedUpTo = node.counter.get(); // the first batch's IDs lie below
        node.slowCount = 50_000;
        node.slowMs = 600;
        long[] ids = c.nextN(100_000, Duration.ofSeconds(10));
        assertEquals(100_000, ids.length);
        for (long id : ids) {
          assertFalse("ID " + id + " of the batch fetched 600ms before (maxAge 300ms) was handed out",
              id > first && id < fetchedUpTo);
        }
        assertTrue("the stale IDs are counted dropped: " + c.stats(),
            (Long) c.stats().get("dropped") >= fetchedUpTo - first - 1);
      }
    }
  }

  // After a failed refill round the refiller waits before the next (50 ms,
  // doubling to 1 s) when the node sent no RetryInfo (LEASE_LOST). A caller
  // whose deadline ends before that next round gets no refill in its time:
  // it is refused at once with the last round's refusal, the node's reason
  // in it, not left to end DEADLINE with no cause (as the Go client's
  // TestRefusedAtOnceWithinTheRefillBackoff). With a maxAge of 4 s the
  // refiller's tick is 500 ms: the round after the backoff must still run
  // when the backoff ends, not at the next tick, past the caller's deadline.
  @Test
  public void aCallerWhoseDeadlineEndsWithinTheRefillBackoffGetsTheLastRefusalAtOnce() throws Exception {
    try (FakeNode node = new FakeNode(1)) {
      node.refuseReason = "LEASE_LOST";
      for (Duration maxAge : List.of(Duration.ofMillis(100), Duration.ofSeconds(4))) {
        try (FirnClient c = FirnClient.builder().endpoints(node.addr()).healthCheck(false).maxAge(maxAge).build()) {
          // The first round's refusal, with a patient deadline.
          expect(Reason.LEASE_LOST, () -> c.next(Duration.ofSeconds(10)));
          List<String> got = new ArrayList<>();
          for (int i = 0; i < 10; i++) {
            got.add(expect(null, () -> c.next(Duration.ofMillis(300))).reason().name());
          }
          List<String> want = new ArrayList<>();
          for (int i = 0; i < 10; i++) {
            want.add("LEASE_LOST");
          }
          assertEquals("maxAge " + maxAge + ": the reasons of 10 calls in a row: " + String.join(" ", got), want, got);
        }
      }
    }
  }

  // A next whose deadline ends before the one endpoint, which asked the
  // client to wait, is free again is refused at once with that endpoint's
  // refusal and the time left, not with the error of an older failed refill
  // (a lease loss since over; the wait was set by a shed a nextN met).
  @Test
  public void aHeldRefusalIsTheStandingOne() throws Exception {
    try (FakeNode node = new FakeNode(1000)) {
      try (FirnClient c = FirnClient.builder().endpoints(node.addr()).healthCheck(false)
          .maxAge(Duration.ofMillis(100)).build()) {
        node.refuseReason = "LEASE_LOST";
        expect(Reason.LEASE_LOST, () -> c.next(Duration.ofSeconds(2)));
        node.refuseReason = null;
        c.next(Duration.ofSeconds(5));
        Thread.sleep(150); // the buffer goes stale
        node.shedRetry = Duration.ofSeconds(3);
        node.shed = true;
        expect(Reason.OVERLOADED, () -> c.nextN(100_000, Duration.ofSeconds(2)));
        long start = System.nanoTime();
        FirnException e = expect(Reason.OVERLOADED, () -> c.next(Duration.ofSeconds(1)));
        long tookMs = (System.nanoTime() - start) / 1_000_000;
        assertTrue("refused after " + tookMs + "ms, not at once", tookMs < 500);
        Duration d = e.retryAfter().orElse(null);
        assertTrue("retry after " + d + ", want the time left of the 3s asked",
            d != null && d.compareTo(Duration.ofSeconds(1)) > 0 && d.compareTo(Duration.ofSeconds(3)) <= 0);
      }
    }
  }

  // A sequence call that finds another call loading the section map waits
  // for that load within its own deadline, as the Go client does: it does
  // not sit behind a load that may take the other call's whole attempt.
  @Test
  public void aSequenceCallWaitsForAnothersMapLoadWithinItsDeadline() throws Exception {
    try (FakeNode n = new FakeNode(1)) {
      n.hangInfo = true; // the map load (Info) gets no answer
      // callTimeout 5 min: the first call's Info attempt ends only with close.
      FirnClient c = FirnClient.builder().endpoints(n.addr()).generator("chats").healthCheck(false)
          .callTimeout(Duration.ofMinutes(5)).build();
      try {
        Thread first = new Thread(() -> {
          try {
            c.nextSeq("chat:1", 1);
          } catch (FirnException e) {
            // CLOSED at the end of the test
          }
        });
        first.setDaemon(true);
        first.start();
        while (n.infoCalls.get() == 0) {
          Thread.sleep(5); // the first call loads the map, holding the load
        }
        CountDownLatch secondDone = new CountDownLatch(1);
        FirnException[] got = new FirnException[1];
        Thread second = new Thread(() -> {
          try {
            c.nextSeq("chat:2", 1, Duration.ofMillis(200));
          } catch (FirnException e) {
            got[0] = e;
          } finally {
            secondDone.countDown();
          }
        });
        second.setDaemon(true);
        second.start();
        assertTrue("a nextSeq with a 200ms deadline still waits for another call's map load after 20s",
            secondDone.await(20, TimeUnit.SECONDS));
        assertNotNull("the second call had no answer in its time", got[0]);
        assertEquals(got[0].getMessage(), Reason.DEADLINE, got[0].reason());
        assertEquals("the first call's load ended", 1, n.infoCalls.get());
      } finally {
        c.close();
      }
    }
  }

  @Test
  public void aWaitingCallersCutIsNotHeldUpByASlowDnsLookup() throws Exception {
    // A refill in flight at a hung endpoint is cut at the share of a caller
    // that starts waiting with a deadline, so that it fails over in time
    // to an endpoint that serves, even while a re-resolution of a DNS name
    // (a system lookup can take seconds) is under way.
    CountDownLatch release = new CountDownLatch(1);
    java.util.concurrent.atomic.AtomicInteger lookups = new java.util.concurrent.atomic.AtomicInteger();
    try (FakeNode hung = new FakeNode(1); FakeNode good = new FakeNode(1L << 40)) {
      hung.hang = true;
      String port = good.addr().substring(good.addr().lastIndexOf(':') + 1);
      try (FirnClient c = FirnClient.builder().endpoints(hung.addr(), good.addr(), "dns:///firn.test:" + port)
          .healthCheck(false).callTimeout(Duration.ofSeconds(30)).resolveInterval(Duration.ofMillis(100))
          .resolver(host -> {
            if (lookups.incrementAndGet() > 1) { // the re-resolutions hang
              try {
                release.await(60, TimeUnit.SECONDS);
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
            }
            return List.of("127.0.0.1"); // the good node's address: no new endpoint
          })
          .build()) {
        try {
          while (lookups.get() < 2) {
            Thread.sleep(5); // a re-resolution is under way
          }
          // A caller without a deadline starts a refill: its attempt at the
          // hung endpoint (tried first) has the call timeout, 30 s; then the
          // caller leaves.
          Thread patient = new Thread(() -> {
            try {
              c.next();
            } catch (FirnException e) {
              // interrupted
            }
          });
          patient.start();
          while (hung.rangeCalls.get() == 0) {
            Thread.sleep(5);
          }
          patient.interrupt();
          patient.join();
          // A caller with 3 s: the refill is cut at its share (1.5 s) and
          // fails over to the good endpoint.
          long id;
          try {
            id = c.next(Duration.ofSeconds(3));
          } catch (FirnException e) {
            throw new AssertionError(e.reason() + ": " + e.getMessage() + ", though " + good.addr() + " serves", e);
          }
          assertTrue(id >= 1L << 40);
        } finally {
          release.countDown();
        }
      }
    } finally {
      release.countDown();
    }
  }

  // A refill whose answer reached the client as close runs, before the
  // refiller delivered it, is never handed out: its IDs are counted
  // dropped, as the buffered ones are (every ID fetched is handed out once
  // or counted), as the Go client does.
  @Test
  public void refillAnsweredAsCloseRunsIsCountedDropped() throws Exception {
    try (FakeNode node = new FakeNode(1000)) {
      node.delayMs = 300; // the refill is in flight a while
      FirnClient c = FirnClient.builder().endpoints(node.addr()).healthCheck(false)
          .maxAge(Duration.ofMinutes(1)).build();
      java.lang.reflect.Field muF = FirnClient.class.getDeclaredField("mu");
      java.lang.reflect.Field execF = FirnClient.class.getDeclaredField("exec");
      java.lang.reflect.Field refillF = FirnClient.class.getDeclaredField("refillThread");
      muF.setAccessible(true);
      execF.setAccessible(true);
      refillF.setAccessible(true);
      Object mu = muF.get(c);
      AtomicLong handedOut = new AtomicLong();
      Thread caller = new Thread(() -> {
        try {
          c.next(Duration.ofSeconds(30));
          handedOut.incrementAndGet();
        } catch (FirnException e) {
          // closed
        }
      });
      caller.start();
      while (node.rangeCalls.get() == 0) { // the refill's attempt has started
        Thread.sleep(1);
      }
      synchronized (mu) {
        // The answer arrives; the fetch thread then waits for the lock to
        // end its attempt, and close runs before the refiller delivers.
        for (;;) {
          boolean blocked = false;
          for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.getName().startsWith("firn-client-fetch-") && t.getState() == Thread.State.BLOCKED) {
              blocked = true;
            }
          }
          if (blocked) {
            break;
          }
          Thread.sleep(1);
        }
        c.close();
      }
      caller.join();
      ((Thread) refillF.get(c)).join();
      assertTrue(((java.util.concurrent.ExecutorService) execF.get(c)).awaitTermination(30, TimeUnit.SECONDS));
      long fetched = node.counter.get() - 1000;
      assertTrue("the refill fetched nothing", fetched > 0);
      assertEquals("after close: fetched " + fetched + ", handed out " + handedOut.get() + ": " + c.stats(),
          fetched, handedOut.get() + (Long) c.stats().get("dropped"));
    }
  }

  private static FirnException expect(Reason want, Runnable r) {
    try {
      r.run();
    } catch (FirnException e) {
      if (want != null) {
        assertEquals(e.getMessage(), want, e.reason());
      }
      return e;
    }
    fail("no error");
    return null;
  }
}
