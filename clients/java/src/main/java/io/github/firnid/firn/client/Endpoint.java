package io.github.firnid.firn.client;

import io.github.firnid.firn.client.internal.health.HealthGrpc;
import io.github.firnid.firn.v1.IDServiceGrpc;
import io.grpc.ConnectivityState;
import io.grpc.Context;
import io.grpc.ManagedChannel;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/** One address the client asks: its channel, health, and what it told the client. */
final class Endpoint {
  static final int HEALTH_UNKNOWN = 0;
  static final int HEALTH_SERVING = 1;
  static final int HEALTH_NOT_SERVING = 2;

  final String addr;
  /** The target it came from (a DNS name, or addr itself). */
  final String from;
  final ManagedChannel channel;
  final IDServiceGrpc.IDServiceBlockingStub ids;
  final HealthGrpc.HealthStub health;
  /** Ends the health watch when the endpoint leaves the list or the client closes. */
  final Context.CancellableContext watchCtx = Context.ROOT.withCancellation();

  volatile int status = HEALTH_UNKNOWN;
  volatile boolean noHealth;
  volatile boolean stopped;
  /** Mono ns: tried after the others until then. */
  final AtomicLong downUntil = new AtomicLong(Long.MIN_VALUE);
  /**
   * Mono ns: the endpoint said (RetryInfo) it would serve again then; no
   * round asks it before, and after it one round at a time (probing) until
   * it answers. 0: not asked to wait.
   */
  final AtomicLong retryUntil = new AtomicLong();
  final AtomicBoolean probing = new AtomicBoolean();
  /** An attempt at it succeeded: see FirnClient's FIRST_ANSWER_TIMEOUT. */
  final AtomicBoolean answered = new AtomicBoolean();
  volatile FirnException.Details refusal;
  /** Largest NextIDs / NextRange counts: 0 not learnt, -1 unknown. */
  final AtomicLong maxBatch = new AtomicLong();
  final AtomicLong maxRange = new AtomicLong();
  /** Mono ns: NextIDs is asked instead of NextRange until then (UNIMPLEMENTED). */
  final AtomicLong noRangeUntil = new AtomicLong(Long.MIN_VALUE);

  Endpoint(String addr, String from, ManagedChannel channel) {
    this.addr = addr;
    this.from = from;
    this.channel = channel;
    this.ids = IDServiceGrpc.newBlockingStub(channel);
    this.health = HealthGrpc.newStub(channel);
  }

  /** Whether the endpoint is worth trying in a round's first pass. */
  boolean usable(long mono) {
    if (status == HEALTH_NOT_SERVING) {
      return false;
    }
    if (mono < downUntil.get()) {
      return false;
    }
    return channel.getState(false) != ConnectivityState.TRANSIENT_FAILURE;
  }

  /** It answered: whatever it asked the client to wait for is over. */
  void served() {
    retryUntil.set(0);
    answered.set(true);
  }

  void stop() {
    stopped = true;
    watchCtx.cancel(null);
    channel.shutdownNow();
  }

  @Override
  public String toString() {
    return addr;
  }
}
