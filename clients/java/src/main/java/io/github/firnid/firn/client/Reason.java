package io.github.firnid.firn.client;

/**
 * Why a call failed: the names of {@code firn.v1.ErrorReason} (the cause a
 * node gave in its google.rpc.ErrorInfo, domain "firn.v1.IDService"), then the client's
 * own causes.
 */
public enum Reason {
  /** No cause known: a network error, a node of another version, an unknown reason name. */
  ERROR_REASON_UNSPECIFIED,
  CLOCK_ROLLBACK,
  CLOCK_STEP,
  CLOCK_RANGE,
  NTP_OFFSET,
  NTP_UNREACHABLE,
  PEER_SKEW,
  COORDINATOR_UNAVAILABLE,
  LEASE_LOST,
  RESERVATION_EXHAUSTED,
  RESTORE_DETECTED,
  INSTANCE_CONFLICT,
  OPERATOR_HOLD,
  DRAINING,
  STARTING,
  NOT_FOUND,
  BAD_REQUEST,
  OVERLOADED,
  CLOCK_UNCHECKED,
  WRONG_NODE,
  SECTION_MOVING,
  PERMISSION_DENIED,
  /** The client was closed (before or during the call). */
  CLOSED,
  /** The caller's own deadline ran out. */
  DEADLINE,
  /** Every endpoint failed in one failover round, none with a reason. */
  UNAVAILABLE,
  /** Refused before any request: a count or key out of bounds. */
  INVALID_ARGUMENT;

  /** Whether the reason is one a node gives (not one of the client's own). */
  public boolean fromNode() {
    return ordinal() <= PERMISSION_DENIED.ordinal();
  }

  /** The node reason of that name; ERROR_REASON_UNSPECIFIED for an unknown one. */
  static Reason ofNodeName(String name) {
    if (name == null || name.isEmpty()) {
      return ERROR_REASON_UNSPECIFIED;
    }
    try {
      Reason r = Reason.valueOf(name);
      return r.fromNode() ? r : ERROR_REASON_UNSPECIFIED;
    } catch (IllegalArgumentException e) {
      return ERROR_REASON_UNSPECIFIED;
    }
  }
}
