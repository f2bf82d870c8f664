package io.github.firnid.firn.client;

import com.google.protobuf.Any;
import com.google.protobuf.ByteString;
import com.google.protobuf.CodedInputStream;
import com.google.rpc.RetryInfo;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.io.IOException;
import java.time.Duration;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;

/**
 * The error of every failed client call.
 *
 * <p>It is unchecked (a {@link RuntimeException}): an ID call fails only
 * when the whole service is unreachable for the caller's deadline, the
 * client was closed, or an argument was out of bounds — conditions most
 * callers cannot handle where they call {@code next()}, and that would
 * otherwise clutter every lambda and stream taking IDs. Callers that can
 * act on a cause branch on {@link #reason()}: for example
 * {@code DRAINING} and {@code LEASE_LOST} pass on their own, while
 * {@code RESTORE_DETECTED} needs an operator; {@link #retryAfter()} says
 * how long the node expected to stay unable to serve, when it knew.
 */
public final class FirnException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The domain of the node's google.rpc.ErrorInfo: the service's name. */
  public static final String DOMAIN = "firn.v1.IDService";

  private final Reason reason;
  private final transient Status.Code code;
  private final Duration retryAfter;
  private final Map<String, String> metadata;

  FirnException(Reason reason, Status.Code code, Duration retryAfter, Map<String, String> metadata,
      String message, Throwable cause) {
    super(message, cause);
    this.reason = reason;
    this.code = code;
    this.retryAfter = retryAfter;
    this.metadata = metadata == null ? Map.of() : Collections.unmodifiableMap(metadata);
  }

  /** A client-side error without a gRPC status. */
  static FirnException local(Reason reason, String message) {
    return new FirnException(reason, null, null, null, message, null);
  }

  /**
   * The cause: the node's {@code firn.v1.ErrorReason} name when it gave
   * one (for a failed failover round, the last endpoint's), else one of
   * the client's own (CLOSED, DEADLINE, UNAVAILABLE, INVALID_ARGUMENT), or
   * ERROR_REASON_UNSPECIFIED.
   */
  public Reason reason() {
    return reason;
  }

  /** The gRPC status code of the failure, when there was one (empty for the client's own errors). */
  public Optional<Status.Code> code() {
    return Optional.ofNullable(code);
  }

  /** The node's RetryInfo delay: how long it expected to stay unable to serve, when it knew. */
  public Optional<Duration> retryAfter() {
    return Optional.ofNullable(retryAfter);
  }

  /** The ErrorInfo metadata of the node's refusal (generator, limit, measured, owner, …). */
  public Map<String, String> metadata() {
    return metadata;
  }

  /** What a gRPC failure says: its code, and the ErrorInfo and RetryInfo in its details. */
  static final class Details {
    final Status.Code code;
    final Reason reason; // ERROR_REASON_UNSPECIFIED when none
    final Duration retryAfter; // null when none
    final Map<String, String> metadata;
    final String message;
    final Throwable cause;
    final com.google.rpc.Status proto; // null when the status had no details

    Details(Status.Code code, Reason reason, Duration retryAfter, Map<String, String> metadata, String message,
        Throwable cause, com.google.rpc.Status proto) {
      this.code = code;
      this.reason = reason;
      this.retryAfter = retryAfter;
      this.metadata = metadata;
      this.message = message;
      this.cause = cause;
      this.proto = proto;
    }

    boolean overloaded() {
      return code == Status.Code.RESOURCE_EXHAUSTED && reason == Reason.OVERLOADED;
    }

    FirnException toException(String prefix) {
      return new FirnException(reason, code, retryAfter, metadata, prefix + code + ": " + message, cause);
    }

    /** The same refusal, with its RetryInfo replaced by {@code left}. */
    Details withRetry(Duration left, String why) {
      return new Details(code, reason, left, metadata, why + " (" + message + ")", cause, proto);
    }
  }

  /** Reads a gRPC failure (StatusRuntimeException / StatusException, or anything else as UNKNOWN). */
  static Details details(Throwable t) {
    Status st = Status.fromThrowable(t);
    com.google.rpc.Status proto = StatusProto.fromThrowable(t);
    Reason reason = Reason.ERROR_REASON_UNSPECIFIED;
    Duration retry = null;
    Map<String, String> md = null;
    if (proto != null) {
      for (Any any : proto.getDetailsList()) {
        String url = any.getTypeUrl();
        if (url.endsWith("/google.rpc.ErrorInfo")) {
          ErrorInfo info = ErrorInfo.parse(any.getValue());
          if (info != null && DOMAIN.equals(info.domain)) {
            reason = Reason.ofNodeName(info.reason);
            md = info.metadata;
          }
        } else if (url.endsWith("/google.rpc.RetryInfo")) {
          try {
            RetryInfo ri = RetryInfo.parseFrom(any.getValue());
            if (ri.hasRetryDelay()) {
              retry = Duration.ofSeconds(ri.getRetryDelay().getSeconds(), ri.getRetryDelay().getNanos());
            }
          } catch (IOException e) {
            // a malformed detail says nothing
          }
        }
      }
    }
    String msg = st.getDescription() != null ? st.getDescription() : (st.getCause() != null ? String.valueOf(st.getCause()) : "");
    Status.Code code = st.getCode();
    if (code == Status.Code.UNKNOWN && md == null && connectionLost(st)) {
      // gRPC-Java reports a connection that broke under a call (a node
      // killed mid-call) as UNKNOWN "channel closed": it is the transport's
      // failure, UNAVAILABLE as gRPC's other clients say.
      code = Status.Code.UNAVAILABLE;
    }
    return new Details(code, reason, retry, md, msg, t, proto);
  }

  private static boolean connectionLost(Status st) {
    for (Throwable c = st.getCause(); c != null; c = c.getCause()) {
      if (c instanceof java.io.IOException) {
        return true;
      }
    }
    String d = st.getDescription();
    return d != null && d.toLowerCase(java.util.Locale.ROOT).contains("channel closed");
  }

  /**
   * google.rpc.ErrorInfo, read from its wire form (reason = 1, domain = 2,
   * metadata = 3 as map entries): the Debian build of the common protos
   * predates the message, so the client reads its three fields itself.
   */
  static final class ErrorInfo {
    String reason = "";
    String domain = "";
    final Map<String, String> metadata = new HashMap<>();

    static ErrorInfo parse(ByteString bytes) {
      try {
        ErrorInfo info = new ErrorInfo();
        CodedInputStream in = bytes.newCodedInput();
        for (int tag; (tag = in.readTag()) != 0; ) {
          switch (tag) {
            case (1 << 3) | 2 -> info.reason = in.readStringRequireUtf8();
            case (2 << 3) | 2 -> info.domain = in.readStringRequireUtf8();
            case (3 << 3) | 2 -> {
              CodedInputStream entry = in.readBytes().newCodedInput();
              String k = "", v = "";
              for (int et; (et = entry.readTag()) != 0; ) {
                switch (et) {
                  case (1 << 3) | 2 -> k = entry.readStringRequireUtf8();
                  case (2 << 3) | 2 -> v = entry.readStringRequireUtf8();
                  default -> entry.skipField(et);
                }
              }
              info.metadata.put(k, v);
            }
            default -> in.skipField(tag);
          }
        }
        return info;
      } catch (IOException e) {
        return null;
      }
    }
  }
}
