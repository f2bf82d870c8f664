package io.github.firnid.firn.client;

import com.google.protobuf.Any;
import com.google.protobuf.ByteString;
import com.google.protobuf.CodedOutputStream;
import com.google.rpc.RetryInfo;
import io.github.firnid.firn.client.internal.health.HealthCheckRequest;
import io.github.firnid.firn.client.internal.health.HealthCheckResponse;
import io.github.firnid.firn.client.internal.health.HealthGrpc;
import io.github.firnid.firn.v1.GeneratorInfo;
import io.github.firnid.firn.v1.IDServiceGrpc;
import io.github.firnid.firn.v1.InfoRequest;
import io.github.firnid.firn.v1.InfoResponse;
import io.github.firnid.firn.v1.NextIDsRequest;
import io.github.firnid.firn.v1.NextIDsResponse;
import io.github.firnid.firn.v1.NextRangeRequest;
import io.github.firnid.firn.v1.NextRangeResponse;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.netty.NettyServerBuilder;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * An in-process stand-in for a firn node on a loopback port, for the unit
 * tests and the benchmark's client-only mode: IDs from a counter, and
 * switches to shed (OVERLOADED with RetryInfo), refuse with a reason, or
 * hang.
 */
public final class FakeNode implements AutoCloseable {
  final AtomicLong counter;
  final AtomicLong calls = new AtomicLong();
  volatile boolean shed;
  volatile Duration shedRetry = Duration.ofMillis(200);
  volatile String refuseReason; // UNAVAILABLE with this reason when set
  volatile boolean hang;
  /** Runs as a call is refused (refuseReason), just before the refusal is sent, with the count
   * asked for (NextRange, NextIDs; 0 for Info). */
  volatile java.util.function.LongConsumer beforeRefusal;
  /** Info is refused as NextRange is (refuseReason) while set. */
  volatile boolean refuseInfo;
  /** Info gets no answer while set; infoCalls counts the Info calls. */
  volatile boolean hangInfo;
  final AtomicLong infoCalls = new AtomicLong();
  /** NextRange and NextIDs answer after this many milliseconds. */
  volatile long delayMs;
  volatile boolean noRange;
  /** The max_range Info reports. */
  volatile long infoMaxRange = 1L << 24;
  /** A NextRange asking for at least slowCount IDs answers after slowMs more. */
  volatile long slowCount = Long.MAX_VALUE;
  volatile long slowMs;
  volatile long rangeAnswers = Long.MAX_VALUE; // NextRange calls past this many are refused UNAVAILABLE (LEASE_LOST)
  /** A sequence generator "chats" with one section: its owner's address (null: this node), how many
   * calls answer SECTION_MOVING first, and whether Info names the owner. */
  volatile String seqOwner;
  final java.util.concurrent.atomic.AtomicInteger moving = new java.util.concurrent.atomic.AtomicInteger();
  volatile boolean mapNamesOwner;
  final AtomicLong seqValue = new AtomicLong();
  final AtomicLong seqCalls = new AtomicLong(); // NextRange answers UNIMPLEMENTED (a node of an older version)
  final AtomicLong rangeCalls = new AtomicLong();
  final AtomicLong idsCalls = new AtomicLong();
  private final Server server;

  public FakeNode(long firstId) throws IOException {
    counter = new AtomicLong(firstId);
    server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
        .addService(new Ids())
        .addService(new Health())
        .build()
        .start();
  }

  public String addr() {
    return "127.0.0.1:" + server.getPort();
  }

  @Override
  public void close() throws InterruptedException {
    server.shutdownNow();
    server.awaitTermination(5, TimeUnit.SECONDS);
  }

  static Any errorInfo(String reason, String... kv) {
    try {
      ByteArrayOutputStream bo = new ByteArrayOutputStream();
      CodedOutputStream out = CodedOutputStream.newInstance(bo);
      out.writeString(1, reason);
      out.writeString(2, FirnException.DOMAIN);
      for (int i = 0; i + 1 < kv.length; i += 2) {
        ByteArrayOutputStream eo = new ByteArrayOutputStream();
        CodedOutputStream e = CodedOutputStream.newInstance(eo);
        e.writeString(1, kv[i]);
        e.writeString(2, kv[i + 1]);
        e.flush();
        out.writeBytes(3, ByteString.copyFrom(eo.toByteArray()));
      }
      out.flush();
      return Any.newBuilder().setTypeUrl("type.googleapis.com/google.rpc.ErrorInfo")
          .setValue(ByteString.copyFrom(bo.toByteArray())).build();
    } catch (IOException e) {
      throw new AssertionError(e);
    }
  }

  /** Whether the call was refused (the observer then has its error). */
  private boolean refused(StreamObserver<?> obs) {
    return refused(obs, 0);
  }

  private boolean refused(StreamObserver<?> obs, long count) {
    calls.incrementAndGet();
    if (hang) {
      return true; // never answers
    }
    long delay = delayMs;
    if (delay > 0) {
      try {
        Thread.sleep(delay);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    if (shed) {
      Duration d = shedRetry;
      obs.onError(StatusProto.toStatusRuntimeException(com.google.rpc.Status.newBuilder()
          .setCode(Status.Code.RESOURCE_EXHAUSTED.value()).setMessage("shed")
          .addDetails(errorInfo("OVERLOADED"))
          .addDetails(Any.pack(RetryInfo.newBuilder().setRetryDelay(com.google.protobuf.Duration.newBuilder()
              .setSeconds(d.getSeconds()).setNanos(d.getNano())).build()))
          .build()));
      return true;
    }
    String r = refuseReason;
    if (r != null) {
      java.util.function.LongConsumer before = beforeRefusal;
      if (before != null) {
        before.accept(count);
      }
      obs.onError(StatusProto.toStatusRuntimeException(com.google.rpc.Status.newBuilder()
          .setCode(Status.Code.UNAVAILABLE.value()).setMessage("not serving: " + r)
          .addDetails(errorInfo(r)).build()));
      return true;
    }
    return false;
  }

  private final class Ids extends IDServiceGrpc.IDServiceImplBase {
    @Override
    public void nextRange(NextRangeRequest req, StreamObserver<NextRangeResponse> obs) {
      if (rangeCalls.incrementAndGet() > rangeAnswers) {
        obs.onError(StatusProto.toStatusRuntimeException(com.google.rpc.Status.newBuilder()
            .setCode(Status.Code.UNAVAILABLE.value()).setMessage("not serving: LEASE_LOST")
            .addDetails(errorInfo("LEASE_LOST")).build()));
        return;
      }
      if (noRange) {
        obs.onError(Status.UNIMPLEMENTED.withDescription("unknown method NextRange").asRuntimeException());
        return;
      }
      if (refused(obs, req.getCount())) {
        return;
      }
      if (req.getCount() >= slowCount) {
        try {
          Thread.sleep(slowMs);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      long n = req.getCount();
      long first = counter.getAndAdd(n);
      obs.onNext(NextRangeResponse.newBuilder()
          .addRuns(io.github.firnid.firn.v1.Run.newBuilder().setFirst(first).setCount(n)).build());
      obs.onCompleted();
    }

    @Override
    public void nextIDs(NextIDsRequest req, StreamObserver<NextIDsResponse> obs) {
      idsCalls.incrementAndGet();
      if (refused(obs)) {
        return;
      }
      long first = counter.getAndAdd(req.getCount());
      NextIDsResponse.Builder b = NextIDsResponse.newBuilder();
      for (int i = 0; i < req.getCount(); i++) {
        b.addIds(first + i);
      }
      obs.onNext(b.build());
      obs.onCompleted();
    }

    @Override
    public void info(InfoRequest req, StreamObserver<InfoResponse> obs) {
      infoCalls.incrementAndGet();
      if (hangInfo) {
        return; // never answers
      }
      if (refuseInfo && refused(obs)) {
        return;
      }
      String owner = seqOwner == null ? addr() : seqOwner;
      GeneratorInfo.Builder chats = GeneratorInfo.newBuilder().setName("chats").setKind("seq").setSections(1);
      if (mapNamesOwner) {
        chats.addSectionOwners(io.github.firnid.firn.v1.SectionOwner.newBuilder().setSection(0).setAddress(owner).setServing(true));
      }
      obs.onNext(InfoResponse.newBuilder().setNodeName("fake")
          .addGenerators(GeneratorInfo.newBuilder().setName("default").setIsDefault(true).setServing(true)
              .setMaxBatch(1_000_000).setMaxRange(infoMaxRange).setKind("snowflake"))
          .addGenerators(chats)
          .build());
      obs.onCompleted();
    }

    @Override
    public void nextSeq(io.github.firnid.firn.v1.NextSeqRequest req,
        StreamObserver<io.github.firnid.firn.v1.NextSeqResponse> obs) {
      seqCalls.incrementAndGet();
      String owner = seqOwner;
      if (owner != null) {
        obs.onError(StatusProto.toStatusRuntimeException(com.google.rpc.Status.newBuilder()
            .setCode(Status.Code.FAILED_PRECONDITION.value()).setMessage("wrong node")
            .addDetails(errorInfo("WRONG_NODE", "owner", owner, "section", "0")).build()));
        return;
      }
      if (moving.getAndUpdate(v -> Math.max(v - 1, 0)) > 0) {
        obs.onError(StatusProto.toStatusRuntimeException(com.google.rpc.Status.newBuilder()
            .setCode(Status.Code.UNAVAILABLE.value()).setMessage("section moving")
            .addDetails(errorInfo("SECTION_MOVING"))
            .addDetails(Any.pack(RetryInfo.newBuilder().setRetryDelay(
                com.google.protobuf.Duration.newBuilder().setNanos(50_000_000)).build()))
            .build()));
        return;
      }
      int n = Math.max(req.getCount(), 1);
      long first = seqValue.getAndAdd(n) + 1;
      obs.onNext(io.github.firnid.firn.v1.NextSeqResponse.newBuilder().setFirst(first).setCount(n).build());
      obs.onCompleted();
    }
  }

  private static final class Health extends HealthGrpc.HealthImplBase {
    @Override
    public void watch(HealthCheckRequest req, StreamObserver<HealthCheckResponse> obs) {
      obs.onNext(HealthCheckResponse.newBuilder().setStatus(HealthCheckResponse.ServingStatus.SERVING).build());
      // The stream stays open.
    }
  }
}
