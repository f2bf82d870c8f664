// FirnError: every failure the client reports, with the node's reason
// (google.rpc.ErrorInfo, domain DOMAIN) and RetryInfo decoded from the
// grpc-status-details-bin trailer.
import * as grpc from "@grpc/grpc-js";
import { protos } from "./proto";

/** The domain of the node's google.rpc.ErrorInfo: the service's name. */
export const DOMAIN = "firn.v1.IDService";

/**
 * The reasons a FirnError carries: the names of firn.v1.ErrorReason, and
 * the client's own CLOSED (the client was closed), DEADLINE (the caller's
 * deadline ran out, or its signal aborted), UNAVAILABLE (every endpoint
 * failed, none with a reason) and INVALID_ARGUMENT (refused before any
 * request: a bad count or key). A reason the client does not know (a
 * newer node's) is passed on as the node named it.
 */
export type Reason =
  | "ERROR_REASON_UNSPECIFIED" | "CLOCK_ROLLBACK" | "CLOCK_STEP" | "CLOCK_RANGE" | "NTP_OFFSET"
  | "NTP_UNREACHABLE" | "PEER_SKEW" | "COORDINATOR_UNAVAILABLE" | "LEASE_LOST"
  | "RESERVATION_EXHAUSTED" | "RESTORE_DETECTED" | "INSTANCE_CONFLICT" | "OPERATOR_HOLD"
  | "DRAINING" | "STARTING" | "NOT_FOUND" | "BAD_REQUEST" | "OVERLOADED" | "CLOCK_UNCHECKED"
  | "WRONG_NODE" | "SECTION_MOVING" | "PERMISSION_DENIED"
  | "CLOSED" | "DEADLINE" | "UNAVAILABLE" | "INVALID_ARGUMENT"
  | (string & {});

/** gRPC status code names by number. */
const codeNames: Record<number, string> = {};
for (const [name, num] of Object.entries(grpc.status)) {
  if (typeof num === "number") codeNames[num] = name;
}

/** The name of a gRPC status code ("UNAVAILABLE"), or "" for none. */
export function codeName(code: number | undefined): string {
  return code === undefined ? "" : codeNames[code] ?? String(code);
}

export interface FirnErrorInit {
  reason: Reason;
  code?: number;
  retryAfterMs?: number;
  endpoint?: string;
  metadata?: Record<string, string>;
  /** The node's reason when the client's error wraps a node's refusal. */
  cause?: FirnError;
}

/** The error of every failed client call. */
export class FirnError extends Error {
  /** The node's ErrorReason name, or the client's own (see Reason). */
  readonly reason: Reason;
  /** The gRPC status code (grpc.status), when a node answered one. */
  readonly code: number | undefined;
  /** The RetryInfo delay, in milliseconds, when the refusal carried one. */
  readonly retryAfterMs: number | undefined;
  /** The endpoint whose answer this is, when one is. */
  readonly endpoint: string | undefined;
  /** ErrorInfo's metadata (owner for WRONG_NODE, limit, measured, ...). */
  readonly metadata: Record<string, string>;
  declare readonly cause: FirnError | undefined;

  constructor(message: string, init: FirnErrorInit) {
    super(message, init.cause ? { cause: init.cause } : undefined);
    this.name = "FirnError";
    this.reason = init.reason;
    this.code = init.code;
    this.retryAfterMs = init.retryAfterMs;
    this.endpoint = init.endpoint;
    this.metadata = init.metadata ?? {};
  }

  /** The gRPC status code's name ("RESOURCE_EXHAUSTED"), or "". */
  get codeName(): string {
    return codeName(this.code);
  }
}

/** The reason, retry delay and metadata in a google.rpc.Status's bytes. */
export interface Details {
  reason?: string;
  domain?: string;
  metadata: Record<string, string>;
  retryAfterMs?: number;
}

/** Decodes a grpc-status-details-bin trailer (a google.rpc.Status). */
export function decodeDetails(bin: Uint8Array): Details {
  const p = protos();
  const out: Details = { metadata: {} };
  const st = p.status.toObject(p.status.decode(bin), { longs: String, defaults: true }) as any;
  for (const any of st.details ?? []) {
    const url: string = any.type_url ?? "";
    const value: Uint8Array = any.value ?? new Uint8Array();
    if (url.endsWith("/google.rpc.ErrorInfo")) {
      const info = p.errorInfo.toObject(p.errorInfo.decode(value), { defaults: true }) as any;
      out.reason = info.reason;
      out.domain = info.domain;
      out.metadata = { ...(info.metadata ?? {}) };
    } else if (url.endsWith("/google.rpc.RetryInfo")) {
      const ri = p.retryInfo.toObject(p.retryInfo.decode(value), { longs: String, defaults: true }) as any;
      const d = ri.retry_delay;
      if (d) out.retryAfterMs = Number(d.seconds ?? 0) * 1000 + Number(d.nanos ?? 0) / 1e6;
    }
  }
  return out;
}

/** A grpc-js error as a FirnError, its details decoded. */
export function fromGrpc(err: grpc.ServiceError | any, endpoint?: string): FirnError {
  if (err instanceof FirnError) return err;
  const code: number = typeof err?.code === "number" ? err.code : grpc.status.UNKNOWN;
  let d: Details = { metadata: {} };
  const bins = err?.metadata instanceof grpc.Metadata ? err.metadata.get("grpc-status-details-bin") : [];
  if (bins.length > 0 && bins[0] instanceof Uint8Array) {
    try {
      d = decodeDetails(bins[0] as Uint8Array);
    } catch {
      // undecodable details: the code alone
    }
  }
  const reason = d.reason && d.domain === DOMAIN ? d.reason : "ERROR_REASON_UNSPECIFIED";
  const msg = `${endpoint ? `endpoint ${endpoint}: ` : ""}${codeName(code)}: ${err?.details ?? err?.message ?? String(err)}`;
  return new FirnError(msg, { reason, code, retryAfterMs: d.retryAfterMs, endpoint, metadata: d.metadata });
}

export function closedError(): FirnError {
  return new FirnError("firn client: closed", { reason: "CLOSED" });
}

export function deadlineError(last?: FirnError): FirnError {
  const msg = last ? `firn client: the caller's deadline ran out: ${last.message}` : "firn client: the caller's deadline ran out";
  return new FirnError(msg, { reason: "DEADLINE", code: grpc.status.DEADLINE_EXCEEDED, cause: last });
}

export function invalidArgument(message: string): FirnError {
  return new FirnError(`firn client: ${message}`, { reason: "INVALID_ARGUMENT", code: grpc.status.INVALID_ARGUMENT });
}

/**
 * The error of a failover round in which no endpoint served: the last
 * endpoint's reason (and code and retry delay) when it gave one, else
 * UNAVAILABLE.
 */
export function unavailable(message: string, last?: FirnError): FirnError {
  const has = last && last.reason !== "ERROR_REASON_UNSPECIFIED";
  return new FirnError(last ? `firn client: ${message}: ${last.message}` : `firn client: ${message}`, {
    reason: has ? last!.reason : "UNAVAILABLE",
    code: last?.code ?? grpc.status.UNAVAILABLE,
    retryAfterMs: last?.retryAfterMs,
    endpoint: last?.endpoint,
    metadata: last?.metadata,
    cause: last,
  });
}
