// FirnClient: a prefetch buffer of runs of IDs that a background refill
// keeps filled from a list of endpoints, with failover, health watches,
// deadline shares, RetryInfo and load shedding honoured; and sequence
// calls routed to each key's owner. The Go client (client/ in the
// repository) is the reference; doc.go there explains the design.
import * as dns from "node:dns";
import * as fs from "node:fs";
import * as net from "node:net";
import { performance } from "node:perf_hooks";
import * as grpc from "@grpc/grpc-js";

import { protos } from "./proto";
import {
  FirnError, fromGrpc, closedError, deadlineError, invalidArgument, unavailable,
} from "./errors";
import { Batch, Run, emptyBatch, countOf, runsOf, sortRuns } from "./runs";
import { sectionOf } from "./fnv";

/** TLS material: PEM as Buffers, or paths of PEM files. */
export interface TlsOptions {
  ca?: Buffer | string;
  cert?: Buffer | string;
  key?: Buffer | string;
}

export interface FirnClientOptions {
  /** host:port, or dns:///name:port (each address the name resolves to is an endpoint). */
  endpoints: string[];
  /** The generator's name; "" (default) is the node's default generator. */
  generator?: string;
  /** Absent: plain text. ca alone: TLS; with cert and key: mTLS. */
  tls?: TlsOptions | null;
  /**
   * The longest any one attempt at an endpoint may take (default 1000 ms).
   * Until an endpoint has answered once, the round's last attempt at it
   * gets 10 s if callTimeoutMs is shorter: its connection, TLS handshake
   * and first calls are inside that attempt, and a process starting on a
   * loaded machine can take seconds over them (the caller's deadline still
   * cuts it).
   */
  callTimeoutMs?: number;
  /** No buffered ID is handed out later than this after its fetch began (default 100 ms). */
  maxAgeMs?: number;
  /** The resolver hook for dns:/// names (default dns.promises.lookup with all: true). */
  lookup?: (host: string) => Promise<string[]>;
  /** How often dns:/// names are resolved again (default 5000 ms). */
  resolveEveryMs?: number;
  /** The smallest and largest refill (default 16 and 100 000 IDs). */
  minBatch?: number;
  maxBatch?: number;
  /** The demand window a refill is sized for (default 10 ms). */
  batchWindowMs?: number;
  /** Follow grpc.health.v1 per endpoint (default true). */
  health?: boolean;
  /** Where the client logs what it does (default: nothing). */
  log?: (msg: string) => void;
}

/** A call's own bounds. */
export interface CallOptions {
  /** The call's deadline, in milliseconds from its start (0 or less: already passed; left out: none). */
  deadlineMs?: number;
  /** Aborting ends the call (reason DEADLINE). */
  signal?: AbortSignal;
}

export interface ClientStats {
  buffered: number;
  batchSize: number;
  rate: number;
  fetches: number;
  fetchedIds: bigint;
  fetchErrors: number;
  failovers: number;
  dropped: number;
  seqCalls: number;
  seqRedirects: number;
  seqRetries: number;
  seqMapRefreshes: number;
  endpoint: string;
}

export const MAX_NEXT_N = 1 << 24;
export const MAX_NEXT_RANGE = 1 << 24;
export const MAX_SEQ_KEY = 256;
export const MAX_SEQ_COUNT = 10000;

const now = () => performance.now();

// Constants, as the Go client's.
const DOWN_FOR = 1000;
const MIN_ATTEMPT = 10;
// Bounds, in place of a shorter callTimeout, the last attempt of a round
// at an endpoint that has not answered yet: its connection, TLS handshake
// and first calls are inside it, and a process starting on a loaded
// machine can take seconds over them. A caller's deadline still cuts it.
const FIRST_ANSWER_TIMEOUT = 10000;
const WATCH_RETRY_MIN = 100;
const WATCH_RETRY_MAX = 5000;
const MAX_RETRY_WAIT = 5000;
const LACKING_FOR = 30000;
const RANGE_RETRY = 60000;
const MAX_IN_FLIGHT = 1; // two in flight to one node come back interleaved, and the order rule drops a fifth of the IDs (as in the Go client)
const RATE_KEEP = 0.7;
const MIN_BACKOFF = 50;
const MAX_BACKOFF = 1000;
const MIN_RESOLVE_GAP = 1000;
const SEQ_REFRESH_EVERY = 3000;
const SEQ_REFRESH_GAP = 250;
const SEQ_RETRY_FOR = 10000;
const SEQ_BACKOFF_MIN = 25;
const SEQ_BACKOFF_MAX = 1000;
const MAX_SEQ_HOPS = 3;

const HEALTH_UNKNOWN = 0;
const HEALTH_SERVING = 1;
const HEALTH_NOT_SERVING = 2;

const S = grpc.status;

/** A monotonic deadline (performance.now() ms) as grpc-js's wall-clock one. */
function wall(mono: number): number {
  return Date.now() + (mono - now());
}

function readPem(v: Buffer | string | undefined): Buffer | null {
  if (v === undefined || v === null) return null;
  if (Buffer.isBuffer(v)) return v;
  return fs.readFileSync(v);
}

/** One try at one endpoint in a failover round: its calls share one deadline. */
class Attempt {
  readonly calls = new Set<{ cancel(): void }>();
  cause: null | "cut" | "closed" | "caller" = null;
  cutAt: number;
  timer: NodeJS.Timeout | undefined;
  /** Removes the caller's abort listener (direct calls). */
  unhook: (() => void) | undefined;
  constructor(
    readonly start: number,
    /** The deadline its RPCs carry (monotonic ms). */
    readonly sent: number,
    /** No endpoint follows in the round: a caller's deadline never cuts it. */
    readonly last: boolean,
    readonly refill: boolean,
  ) {
    this.cutAt = sent;
  }

  abort(cause: "cut" | "closed" | "caller"): void {
    if (this.cause) return;
    this.cause = cause;
    for (const c of this.calls) c.cancel();
  }
}

/** What has answered or not: an endpoint, or an owner's connection (see FIRST_ANSWER_TIMEOUT). */
interface Answered {
  answered: boolean;
}

/** A connection to a section owner that is not an endpoint. */
interface OwnerConn extends Answered {
  client: any;
}

class Endpoint {
  status = HEALTH_UNKNOWN;
  /** An attempt at it succeeded (see FIRST_ANSWER_TIMEOUT). */
  answered = false;
  heard = false;
  noHealth = false;
  downUntil = 0;
  retryUntil = 0;
  probing = false;
  refusal: FirnError | undefined;
  maxBatch = 0;
  maxRange = 0;
  noRangeUntil = 0;
  stopped = false;
  watch: grpc.ClientReadableStream<any> | undefined;
  watchTimer: NodeJS.Timeout | undefined;
  constructor(
    readonly addr: string,
    readonly from: string,
    readonly ids: any,
    readonly health: any,
  ) {}

  usable(t: number): boolean {
    if (this.status === HEALTH_NOT_SERVING) return false;
    if (t < this.downUntil) return false;
    return (this.ids as grpc.Client).getChannel().getConnectivityState(false) !== grpc.connectivityState.TRANSIENT_FAILURE;
  }

  served(): void {
    this.retryUntil = 0;
    this.answered = true;
  }

  stop(): void {
    this.stopped = true;
    if (this.watchTimer) clearTimeout(this.watchTimer);
    this.watch?.cancel();
    (this.ids as grpc.Client).close();
    (this.health as grpc.Client).close();
  }
}

interface Target {
  raw: string;
  host?: string; // set for a DNS name
  port?: string;
}

function parseTarget(s: string): Target {
  if (!s.startsWith("dns:")) return { raw: s };
  const rest = s.slice(4);
  if (!rest.startsWith("///")) throw invalidArgument(`endpoint ${JSON.stringify(s)}: a DNS name is dns:///host:port (a DNS server authority is not supported)`);
  const hp = splitHostPort(rest.slice(3));
  if (!hp || !hp.host || !hp.port) throw invalidArgument(`endpoint ${JSON.stringify(s)}: a DNS name is dns:///host:port with both parts`);
  return { raw: s, host: hp.host, port: hp.port };
}

function splitHostPort(s: string): { host: string; port: string } | undefined {
  if (s.startsWith("[")) {
    const end = s.indexOf("]");
    if (end < 0 || s[end + 1] !== ":") return undefined;
    return { host: s.slice(1, end), port: s.slice(end + 2) };
  }
  const i = s.lastIndexOf(":");
  if (i < 0 || s.indexOf(":") !== i) return undefined;
  return { host: s.slice(0, i), port: s.slice(i + 1) };
}

function joinHostPort(host: string, port: string): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

/** An address a client can dial: host:port, the host not a wildcard. */
function dialable(addr: string): boolean {
  const hp = splitHostPort(addr);
  if (!hp || !hp.host || !hp.port) return false;
  return !(net.isIP(hp.host) && (hp.host === "0.0.0.0" || hp.host === "::"));
}

interface Waiter {
  deadline: number | undefined;
  resolve: () => void;
  reject: (e: FirnError) => void;
  timer: NodeJS.Timeout | undefined;
  onAbort: (() => void) | undefined;
  signal: AbortSignal | undefined;
}

interface Fetched {
  runs: Run[];
  ep: Endpoint;
  start: number;
}

export interface SeqMap {
  sections: number; // 0: not known to be a sequence generator
  owners: string[]; // section → owner's gRPC address ("" unknown)
}

/**
 * m, but where it names no owner of a section that old (of as many
 * sections) names, old's: an owner a WRONG_NODE named (seqHint) is not
 * forgotten by a map read from a node that does not know it. (Exported for
 * the unit tests; not part of the package's API.)
 */
export function keepingKnown(m: SeqMap, old: SeqMap | undefined): SeqMap {
  if (!old || old.sections !== m.sections) return m;
  if (!m.owners.some((o, i) => o === "" && old.owners[i] !== "")) return m;
  return { sections: m.sections, owners: m.owners.map((o, i) => (o === "" ? old.owners[i] : o)) };
}

/** The caller's bounds, in monotonic time. */
interface Bound {
  deadline: number | undefined;
  signal: AbortSignal | undefined;
}

function boundOf(o: CallOptions | undefined): Bound {
  const d = o?.deadlineMs;
  // A deadline of 0 ms or less has already passed (as a Go context's, or
  // the Java and Python clients' zero timeout): never "no deadline".
  return { deadline: d !== undefined && d !== null ? now() + Math.max(d, 0) : undefined, signal: o?.signal };
}

function boundDone(b: Bound): boolean {
  return (b.deadline !== undefined && now() >= b.deadline) || !!b.signal?.aborted;
}

/** Resolves when p settles, the caller's deadline passes or its signal aborts, whichever is first. */
function waitWithin(p: Promise<unknown>, b: Bound): Promise<void> {
  if (boundDone(b)) return Promise.resolve();
  return new Promise<void>((resolve) => {
    let t: NodeJS.Timeout | undefined;
    const done = () => {
      if (t) clearTimeout(t);
      b.signal?.removeEventListener("abort", done);
      resolve();
    };
    if (b.deadline !== undefined) t = setTimeout(done, Math.max(0, b.deadline - now()));
    b.signal?.addEventListener("abort", done, { once: true });
    p.then(done, done);
  });
}

/**
 * The firn client. One instance serves any number of concurrent callers:
 * JavaScript runs one take at a time, and a take claims its IDs from the
 * current batch before it yields, so no ID reaches two callers.
 */
export class FirnClient {
  private cur: Batch = emptyBatch();
  private readonly empty = this.cur;
  private queue: Batch[] = [];
  private last: Batch | undefined;
  private retired = 0;
  private starved = 0;
  private waiters = new Set<Waiter>();
  private lastErr: FirnError | undefined;
  private closed = false;
  private closeP: Promise<void> | undefined;
  /** Resolves when close() begins: ends what waits on no attempt of its own (the first DNS resolution). */
  private readonly closing: Promise<void>;
  private markClosing!: () => void;

  // The refiller.
  private kicked = false;
  private inFlight = 0;
  private inFlightIds = 0;
  private delivered = 0;
  private rateV = 0;
  private batch: number;
  private lastMono: number;
  private lastTotal = 0;
  private lastStarved = 0;
  private overloads = 0;
  private lastOverloads = 0;
  private backoff = 0;
  private retryAt = 0;
  /** Ends the backoff: the round after a failed one starts at retryAt, not at the tick after it (maxAge / 8 may be far longer). */
  private wake: NodeJS.Timeout | undefined;
  private ticker: NodeJS.Timeout | undefined;
  private directAbove: number;

  private readonly attempts = new Set<Attempt>();
  private readonly directAttempts = new Set<Attempt>();

  // Endpoints.
  private readonly targets: Target[];
  private eps: Endpoint[] = [];
  private active: Endpoint | undefined;
  private readonly hasNames: boolean;
  private resolvedP: Promise<void>;
  private resolveTimer: NodeJS.Timeout | undefined;
  private lastResolve = 0;
  private resolving: Promise<void> | undefined;

  // Sequences.
  private seqMap: SeqMap | undefined;
  private seqConns = new Map<string, OwnerConn>();
  private seqLoading: Promise<void> | undefined;
  private seqLastLoad = 0;
  private seqTimer: NodeJS.Timeout | undefined;
  private seqUses = 0;
  private seqSeen = 0;
  private seqRefreshing = false;
  private seqLastRefresh = 0;
  private seqKickTimer: NodeJS.Timeout | undefined;

  private readonly st = {
    fetches: 0, fetchedIds: 0n, fetchErrors: 0, failovers: 0, dropped: 0,
    seqCalls: 0, seqRedirects: 0, seqRetries: 0, seqRefreshes: 0,
  };

  private readonly generator: string;
  private readonly callTimeout: number;
  private readonly maxAge: number;
  private readonly tickLen: number;
  private readonly minBatch: number;
  private readonly maxBatch: number;
  private readonly batchWindow: number;
  private readonly health: boolean;
  private readonly lookup: (host: string) => Promise<string[]>;
  private readonly resolveEvery: number;
  private readonly creds: grpc.ChannelCredentials;
  private readonly log: (msg: string) => void;

  /** Makes a client; it contacts no node until the first call. Throws a FirnError (INVALID_ARGUMENT) for a bad option. */
  constructor(o: FirnClientOptions) {
    if (!o || !Array.isArray(o.endpoints) || o.endpoints.length === 0) throw invalidArgument("no endpoints");
    const seen = new Set<string>();
    this.targets = o.endpoints.map((e, i) => {
      if (typeof e !== "string" || e === "") throw invalidArgument(`endpoints[${i}] is empty`);
      if (seen.has(e)) throw invalidArgument(`endpoints[${i}] ${JSON.stringify(e)} given twice`);
      seen.add(e);
      const t = parseTarget(e);
      if (!t.host && !splitHostPort(e)) throw invalidArgument(`endpoints[${i}] ${JSON.stringify(e)} is not host:port`);
      return t;
    });
    this.generator = o.generator ?? "";
    this.callTimeout = o.callTimeoutMs || 1000;
    this.maxAge = o.maxAgeMs || 100;
    this.minBatch = o.minBatch ?? 16;
    this.maxBatch = o.maxBatch ?? 100_000;
    this.batchWindow = o.batchWindowMs ?? 10;
    this.health = o.health ?? true;
    this.resolveEvery = o.resolveEveryMs ?? 5000;
    this.log = o.log ?? (() => {});
    this.lookup = o.lookup ?? (async (host) => (await dns.promises.lookup(host, { all: true })).map((a) => a.address));
    if (this.callTimeout < 10 || this.callTimeout > 300_000) throw invalidArgument(`callTimeoutMs ${this.callTimeout} outside [10, 300000]`);
    if (this.maxAge < 8 || this.maxAge > 3_600_000) throw invalidArgument(`maxAgeMs ${this.maxAge} outside [8, 3600000]`);
    if (this.minBatch < 1 || this.maxBatch > 1_000_000 || this.minBatch > this.maxBatch) throw invalidArgument(`batch bounds [${this.minBatch}, ${this.maxBatch}] invalid`);
    if (this.batchWindow <= 0 || this.batchWindow > this.maxAge / 2) throw invalidArgument(`batchWindowMs ${this.batchWindow} outside (0, maxAgeMs/2]`);
    if (this.resolveEvery < 100) throw invalidArgument(`resolveEveryMs ${this.resolveEvery} below 100`);
    this.tickLen = this.maxAge / 8;
    this.closing = new Promise<void>((r) => (this.markClosing = r));
    this.batch = this.minBatch;
    this.directAbove = this.minBatch;
    this.lastMono = now();

    if (o.tls) {
      try {
        const cert = readPem(o.tls.cert), key = readPem(o.tls.key);
        if (!!cert !== !!key) throw invalidArgument("TLS client certificate and key go together");
        this.creds = grpc.credentials.createSsl(readPem(o.tls.ca), key, cert);
      } catch (e) {
        if (e instanceof FirnError) throw e;
        throw invalidArgument(`TLS: ${(e as Error).message}`);
      }
    } else {
      this.creds = grpc.credentials.createInsecure();
    }
    protos(); // fail here, not at the first call, when the protos are missing

    this.hasNames = this.targets.some((t) => t.host);
    this.eps = this.targets.filter((t) => !t.host).map((t) => {
      try {
        return this.dialEndpoint(t.raw, t);
      } catch (e) {
        for (const ep of this.eps) ep.stop();
        throw invalidArgument(`endpoint ${JSON.stringify(t.raw)}: ${(e as Error).message}`);
      }
    });
    if (this.hasNames) {
      this.resolvedP = this.resolveNow();
      this.resolveTimer = setInterval(() => void this.resolveNow(), this.resolveEvery);
      this.resolveTimer.unref();
    } else {
      this.resolvedP = Promise.resolve();
    }
  }

  // ---------------------------------------------------------------- IDs

  /**
   * One ID from the buffer, synchronously, or undefined when the buffer
   * holds no fresh ID (next() then waits for a refill). It never waits.
   */
  tryNext(): bigint | undefined {
    const b = this.cur;
    const i = b.pos;
    if (i < b.n && now() <= b.expire) {
      b.pos = i + 1;
      const id = b.nextId;
      b.nextId = id + 1n;
      if (i === b.half) this.kick();
      return id;
    }
    return undefined;
  }

  /**
   * One ID. From the buffer while it holds fresh IDs (a resolved
   * promise: see tryNext for the synchronous form); else it waits for a
   * refill until its deadline, or until a whole failover round failed.
   */
  next(opts?: CallOptions): Promise<bigint> {
    const id = this.tryNext();
    if (id !== undefined) return Promise.resolve(id);
    return this.nextSlow(boundOf(opts));
  }

  private async nextSlow(b: Bound): Promise<bigint> {
    for (;;) {
      await this.waitBatch(b);
      const id = this.tryNext();
      if (id !== undefined) return id;
    }
  }

  /** n distinct IDs (1 ≤ n ≤ 2^24), increasing. */
  async nextN(n: number, opts?: CallOptions): Promise<bigint[]> {
    if (!Number.isInteger(n) || n < 1 || n > MAX_NEXT_N) throw invalidArgument(`n ${n} outside [1, ${MAX_NEXT_N}]`);
    const runs = await this.collect(n, boundOf(opts));
    const out: bigint[] = new Array(n);
    let k = 0;
    for (const r of runs) {
      let id = r.first;
      for (let i = 0n; i < r.count; i++) out[k++] = id++;
    }
    return out;
  }

  /** n distinct IDs (1 ≤ n ≤ 2^24) as increasing runs of consecutive IDs. */
  async nextRange(n: number | bigint, opts?: CallOptions): Promise<Run[]> {
    const nn = typeof n === "bigint" ? Number(n) : n;
    if (!Number.isInteger(nn) || nn < 1 || nn > MAX_NEXT_RANGE) throw invalidArgument(`n ${n} outside [1, ${MAX_NEXT_RANGE}]`);
    return this.collect(nn, boundOf(opts));
  }

  /**
   * n IDs from the buffer and direct fetches, as sorted, merged runs. A run
   * taken from the buffer was fresh when taken; should the call then wait
   * (for a refill, or a direct fetch of the rest), a run whose batch
   * expired meanwhile is dropped (counted) and taken again, so the
   * freshness bound holds when the call returns. Runs fetched directly are
   * handed out as the call returns.
   */
  private async collect(n: number, b: Bound): Promise<Run[]> {
    if (this.closed) throw closedError();
    let out: { run: Run; expire: number }[] = [];
    let got = 0;
    try {
      for (;;) {
        let waited = false;
        while (got < n) {
          const need = n - got;
          const t = this.take(need);
          if (t) {
            out.push(t);
            got += Number(t.run.count);
            continue;
          }
          waited = true;
          if (need > this.directAbove) {
            const runs = await this.fetchDirect(need, b);
            for (const run of runs) out.push({ run, expire: Infinity });
            got += Number(countOf(runs));
            continue;
          }
          await this.waitBatch(b);
        }
        if (!waited) break;
        const t = now();
        const kept: { run: Run; expire: number }[] = [];
        for (const x of out) {
          if (t > x.expire) {
            // stale while the call waited
            got -= Number(x.run.count);
            this.st.dropped += Number(x.run.count);
          } else kept.push(x);
        }
        out = kept;
        if (got === n) break;
      }
    } catch (e) {
      // The IDs taken for a call that fails are never handed out: counted
      // dropped, as buffered ones are at close.
      this.st.dropped += got;
      throw e;
    }
    if (this.closed) {
      this.st.dropped += got;
      throw closedError();
    }
    return sortRuns(out.map((x) => x.run));
  }

  /** Claims up to need IDs of cur: the run and when its batch expires. */
  private take(need: number): { run: Run; expire: number } | undefined {
    const b = this.cur;
    if (now() > b.expire) return undefined;
    const start = b.pos;
    const r = b.claim(need);
    if (!r) return undefined;
    if (start <= b.half && b.half < b.pos) this.kick();
    return { run: r, expire: b.expire };
  }

  /**
   * n IDs straight from the endpoints, in as many fetches as their bounds
   * take. When a later fetch fails, the IDs the earlier ones brought are
   * never handed out: counted dropped here, since the caller never sees
   * them.
   */
  private async fetchDirect(n: number, b: Bound): Promise<Run[]> {
    if (this.closed) throw closedError();
    const out: Run[] = [];
    let got = 0;
    try {
      while (got < n) {
        const f = await this.fetch(n - got, false, b);
        out.push(...f.runs);
        got += Number(countOf(f.runs));
      }
    } catch (e) {
      this.st.dropped += got;
      throw e;
    }
    return out;
  }

  /**
   * Resolves once cur may hold fresh IDs, after waiting for a refill if
   * need be; rejects with CLOSED, DEADLINE, or the error of a failover
   * round that failed while it waited.
   */
  private waitBatch(b: Bound): Promise<void> {
    if (this.closed) return Promise.reject(closedError());
    if (this.install()) return Promise.resolve();
    if (boundDone(b)) return Promise.reject(deadlineError(this.lastErr));
    // Every endpoint asked the client to wait (RetryInfo) for longer than
    // this caller would: no refill comes in its time, and it is refused at
    // once with the refusal that said so (the endpoint's free first, with
    // the time still left), not left to its deadline — whichever call met
    // that refusal.
    if (b.deadline !== undefined) {
      const t = now();
      const first = this.heldFirst(t);
      if (first && first.retryUntil > b.deadline) return Promise.reject(this.heldError(first, this.eps.length, t));
      // The refiller backs off after a failed round (no round starts before
      // retryAt): a caller whose deadline ends first gets no refill in its
      // time either, and is refused at once with that round's refusal (the
      // node's reason), not left to fail DEADLINE with no cause.
      if (this.lastErr && this.inFlight === 0 && this.retryAt > b.deadline) {
        return Promise.reject(unavailable(`no refill before the caller's deadline (the next round in ${Math.round(this.retryAt - t)}ms, after a failed one)`, this.lastErr));
      }
    }
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = {
        deadline: b.deadline, signal: b.signal, timer: undefined, onAbort: undefined,
        resolve: () => { this.unwait(w); resolve(); },
        reject: (e) => { this.unwait(w); reject(e); },
      };
      this.waiters.add(w);
      this.starved++;
      if (b.deadline !== undefined) {
        w.timer = setTimeout(() => w.reject(deadlineError()), Math.max(0, b.deadline - now()));
      }
      if (b.signal) {
        w.onAbort = () => w.reject(deadlineError());
        b.signal.addEventListener("abort", w.onAbort, { once: true });
      }
      // With another endpoint to fail over to, the waiting callers'
      // deadlines bound the refill's attempts: the share of the most
      // patient one. A caller that gives up cuts nothing.
      if (this.multi()) {
        const share = this.waitShare(now());
        if (share !== undefined) this.cutAttempts(share);
      }
      this.kick();
    });
  }

  private unwait(w: Waiter): void {
    this.waiters.delete(w);
    if (w.timer) clearTimeout(w.timer);
    if (w.onAbort) w.signal!.removeEventListener("abort", w.onAbort);
  }

  private multi(): boolean {
    return this.eps.length > 1 || this.hasNames;
  }

  /** Makes cur a batch with fresh IDs if the buffer has one; reports whether it did. */
  private install(): boolean {
    const t = now();
    const b = this.cur;
    if (b.expire >= t && b.pos < b.n) return true;
    this.retire(b);
    while (this.queue.length > 0) {
      const nb = this.queue.shift()!;
      if (nb.expire < t || this.behind(nb)) {
        this.st.dropped += nb.n;
        continue;
      }
      this.cur = nb;
      this.last = nb;
      return true;
    }
    this.cur = this.empty;
    return false;
  }

  /**
   * Whether nb's IDs are below those of the last batch installed from the
   * same endpoint whose refill was in flight with nb's: handing it out
   * would give a caller a lower ID next. It is dropped.
   */
  private behind(nb: Batch): boolean {
    const l = this.last;
    return l !== undefined && nb.ep === l.ep && nb.born < l.dseq && nb.first < l.first;
  }

  /** Queues nb behind the others, but before its endpoint's queued batches with higher IDs. */
  private enqueue(nb: Batch): void {
    let i = this.queue.length;
    for (let j = this.queue.length - 1; j >= 0; j--) {
      const q = this.queue[j];
      if (q.ep === nb.ep) {
        if (q.first < nb.first) break;
        i = j;
      }
    }
    this.queue.splice(i, 0, nb);
  }

  private retire(b: Batch): void {
    if (b.retired) return;
    const served = b.retire();
    this.retired += served;
    this.st.dropped += b.n - served;
  }

  private buffered(): number {
    const t = now();
    let n = 0;
    if (this.cur.expire >= t) n += this.cur.remaining();
    for (const b of this.queue) if (b.expire >= t) n += b.n;
    return n;
  }

  private kick(): void {
    if (this.kicked || this.closed) return;
    this.kicked = true;
    queueMicrotask(() => {
      this.kicked = false;
      this.pump();
    });
  }

  /** The refiller's step: measure demand, launch refills, keep the tick running while needed. */
  private pump(): void {
    if (this.closed) return;
    const t = now();
    const [buffered, waiters] = this.measure(t);
    this.launch(t, buffered, waiters);
    const need = buffered > 0 || this.inFlight > 0 || waiters > 0 || this.rateV * (this.tickLen / 1000) >= 1;
    if (need && !this.ticker) {
      this.ticker = setInterval(() => this.pump(), this.tickLen);
      this.ticker.unref();
    } else if (!need && this.ticker) {
      clearInterval(this.ticker);
      this.ticker = undefined;
    }
  }

  private measure(t: number): [number, number] {
    if (this.cur.expire < t && this.cur !== this.empty) this.install();
    const kept: Batch[] = [];
    for (const b of this.queue) {
      if (b.expire < t) this.st.dropped += b.n;
      else kept.push(b);
    }
    this.queue = kept;
    let total = this.retired;
    if (!this.cur.retired) total += this.cur.served();
    const starved = this.starved;
    const buffered = this.buffered();
    const waiters = this.waiters.size;

    const dt = t - this.lastMono;
    if (dt < this.tickLen / 2) return [buffered, waiters];
    const inst = ((total - this.lastTotal) / dt) * 1000;
    this.rateV = inst >= this.rateV ? inst : RATE_KEEP * this.rateV + (1 - RATE_KEEP) * inst;
    if (this.rateV < 1e-3) this.rateV = 0;
    this.lastMono = t;
    this.lastTotal = total;

    let size = (this.rateV * this.batchWindow) / 1000;
    if (starved !== this.lastStarved) size = Math.max(size, Math.min(2 * this.batch, (this.rateV * this.maxAge) / 1000));
    this.lastStarved = starved;
    this.directAbove = Math.floor(Math.min(Math.max(size, this.minBatch), this.maxBatch));
    if (this.overloads !== this.lastOverloads) {
      this.lastOverloads = this.overloads;
      size = Math.min(size, this.batch / 2);
    }
    this.batch = Math.floor(Math.min(Math.max(size, this.minBatch), this.maxBatch));
    return [buffered, waiters];
  }

  private launch(t: number, buffered: number, waiters: number): void {
    if (t < this.retryAt) return;
    const proactive = (this.rateV * this.maxAge) / 1000 >= this.batch;
    while (this.inFlight < MAX_IN_FLIGHT) {
      const have = buffered + this.inFlightIds;
      if (!(waiters > 0 && have === 0) && !(proactive && have < 2 * this.batch)) return;
      this.inFlight++;
      const count = this.batch;
      this.inFlightIds += count;
      const born = this.delivered;
      this.fetch(count, true, { deadline: undefined, signal: undefined }).then(
        (f) => this.deliver(count, born, f, undefined),
        (e) => this.deliver(count, born, undefined, e instanceof FirnError ? e : fromGrpc(e)),
      );
    }
  }

  private deliver(count: number, born: number, f: Fetched | undefined, err: FirnError | undefined): void {
    this.inFlight--;
    this.inFlightIds -= count;
    if (this.closed) {
      // A refill answered as close ran is never handed out: counted
      // dropped, as the buffered IDs are at close.
      if (f) this.st.dropped += Number(countOf(f.runs));
      return;
    }
    const t = now();
    if (err || !f) {
      this.backoff = Math.min(Math.max(2 * this.backoff, MIN_BACKOFF), MAX_BACKOFF);
      this.retryAt = t + this.backoff;
      const held = this.heldUntil(t);
      if (held !== undefined) this.retryAt = Math.max(this.retryAt, held);
      if (this.wake) clearTimeout(this.wake);
      // A millisecond late at most: a timer may fire up to one early
      // by performance.now(), and launch starts nothing before retryAt.
      this.wake = setTimeout(() => { this.wake = undefined; this.pump(); }, Math.max(0, Math.ceil(this.retryAt - t)) + 1);
      this.wake.unref();
      this.lastErr = err;
      for (const w of [...this.waiters]) {
        if (this.install()) w.resolve();
        else w.reject(err!);
      }
    } else {
      this.backoff = 0;
      this.delivered++;
      const total = Number(countOf(f.runs));
      const mid = Math.floor(total / 2);
      let off = 0;
      for (const run of f.runs) {
        const n = Number(run.count);
        const half = off <= mid && mid < off + n ? mid - off : -1;
        off += n;
        this.enqueue(new Batch(run.first, n, half, f.start + this.maxAge, f.ep, born, this.delivered));
      }
      this.install();
      for (const w of [...this.waiters]) w.resolve();
    }
    this.pump();
  }

  // ---------------------------------------------------------- endpoints

  private dialEndpoint(addr: string, t: Target): Endpoint {
    const p = protos();
    const options: grpc.ChannelOptions = {
      "grpc.max_receive_message_length": 16 << 20,
      "grpc.keepalive_time_ms": 20000,
      "grpc.keepalive_timeout_ms": 5000,
      "grpc.use_local_subchannel_pool": 1,
    };
    if (t.host) {
      options["grpc.default_authority"] = joinHostPort(t.host, t.port!);
      options["grpc.ssl_target_name_override"] = t.host;
    }
    const ids = new p.IDService(addr, this.creds, options);
    // The health client shares the IDService client's channel.
    const health = new p.Health(addr, this.creds, { ...options, channelOverride: ids.getChannel() } as any);
    const ep = new Endpoint(addr, t.raw, ids, health);
    if (this.health) this.watchHealth(ep, WATCH_RETRY_MIN, true);
    return ep;
  }

  /** Follows ep's grpc.health.v1 Watch for the generator, reconnecting with backoff. */
  private watchHealth(ep: Endpoint, retry: number, first: boolean): void {
    if (ep.stopped || this.closed) return;
    let got = false;
    const call: grpc.ClientReadableStream<any> = ep.health.Watch({ service: this.generator });
    ep.watch = call;
    call.on("data", (resp: any) => {
      got = true;
      this.setHealth(ep, healthOf(resp.status));
    });
    call.on("error", (e: grpc.ServiceError) => {
      if (ep.stopped || this.closed) return;
      if (e.code === S.UNIMPLEMENTED) {
        ep.noHealth = true;
        this.setHealth(ep, HEALTH_UNKNOWN);
        return;
      }
      this.setHealth(ep, HEALTH_UNKNOWN);
      const next = got ? WATCH_RETRY_MIN : first ? retry : Math.min(2 * retry, WATCH_RETRY_MAX);
      ep.watchTimer = setTimeout(() => this.watchHealth(ep, next, false), next);
    });
    call.on("end", () => {});
  }

  private setHealth(ep: Endpoint, s: number): void {
    ep.heard = s !== HEALTH_UNKNOWN;
    if (ep.status !== s) {
      const names = ["unknown", "serving", "not-serving"];
      this.log(`endpoint ${ep.addr} health ${names[s]} (was ${names[ep.status]})`);
    }
    ep.status = s;
  }

  private resolveNow(): Promise<void> {
    if (this.resolving) return this.resolving;
    this.lastResolve = now();
    this.resolving = this.resolve().finally(() => (this.resolving = undefined));
    return this.resolving;
  }

  private askResolve(): void {
    if (!this.hasNames || this.closed) return;
    if (now() - this.lastResolve >= MIN_RESOLVE_GAP) void this.resolveNow();
  }

  /** Resolves the DNS names again: endpoints for new addresses, gone ones stopped. */
  private async resolve(): Promise<void> {
    const want: [string, Target][] = [];
    const seen = new Set<string>();
    for (const t of this.targets) {
      if (!t.host) {
        if (!seen.has(t.raw)) want.push([t.raw, t]);
        seen.add(t.raw);
        continue;
      }
      let addrs: string[] | undefined;
      try {
        addrs = await this.lookup(t.host);
        if (!addrs || addrs.length === 0) throw new Error("no addresses");
      } catch (e) {
        this.log(`cannot resolve ${t.raw}; keeping its endpoints: ${(e as Error).message}`);
        addrs = undefined;
      }
      if (this.closed) return;
      if (!addrs) {
        for (const ep of this.eps) if (ep.from === t.raw && !seen.has(ep.addr)) { want.push([ep.addr, t]); seen.add(ep.addr); }
        continue;
      }
      for (const a of [...addrs].sort()) {
        const addr = joinHostPort(a, t.port!);
        if (!seen.has(addr)) { want.push([addr, t]); seen.add(addr); }
      }
    }
    if (this.closed) return;
    const byAddr = new Map(this.eps.map((e) => [e.addr, e]));
    const next: Endpoint[] = [];
    for (const [addr, t] of want) {
      const ep = byAddr.get(addr);
      if (ep) {
        next.push(ep);
        byAddr.delete(addr);
        continue;
      }
      try {
        next.push(this.dialEndpoint(addr, t));
        this.log(`endpoint ${addr} added (from ${t.raw})`);
      } catch (e) {
        this.log(`cannot use endpoint ${addr}: ${(e as Error).message}`);
      }
    }
    this.eps = next;
    for (const ep of byAddr.values()) {
      this.log(`endpoint ${ep.addr} removed (from ${ep.from})`);
      ep.stop();
    }
  }

  private async awaitResolved(b: Bound): Promise<void> {
    if (this.eps.length > 0) return;
    // Close ends the wait too (as the Go client's c.ctx): a lookup that
    // hangs must not hold a caller past close().
    await waitWithin(Promise.race([this.resolvedP, this.closing]), b);
    if (this.closed) throw closedError();
    // The caller gave up (its deadline, or its signal) before any address came.
    if (this.eps.length === 0 && !this.closed && boundDone(b)) throw deadlineError();
  }

  /**
   * The endpoints a round tries: the active one first, then the others
   * in turn, usable ones before the rest. An endpoint that asked the
   * client to wait (RetryInfo) is left out until then, and then asked by
   * one round at a time until it answers. Returns the held error when
   * every endpoint asked to wait.
   */
  private order(t: number): { eps: Endpoint[]; probes: Endpoint[]; held?: FirnError } {
    const all = this.eps;
    const n = all.length;
    const first = Math.max(this.active ? all.indexOf(this.active) : 0, 0);
    const eps: Endpoint[] = [];
    const later: Endpoint[] = [];
    const probes: Endpoint[] = [];
    let wait: Endpoint | undefined;
    for (let i = 0; i < n; i++) {
      const ep = all[(first + i) % n];
      const until = ep.retryUntil;
      if (until > t || (until !== 0 && ep.probing)) {
        if (!wait || until < wait.retryUntil) wait = ep;
        continue;
      }
      if (until !== 0) {
        ep.probing = true;
        probes.push(ep);
      }
      if (ep.usable(t)) eps.push(ep);
      else later.push(ep);
    }
    eps.push(...later);
    if (eps.length === 0 && wait) return { eps, probes, held: this.heldError(wait, n, t) };
    return { eps, probes };
  }

  private heldError(ep: Endpoint, n: number, t: number): FirnError {
    const left = Math.max(ep.retryUntil - t, 10);
    const r = ep.refusal;
    const last = new FirnError(r ? r.message : `endpoint ${ep.addr}: asked to wait`, {
      reason: r?.reason ?? "ERROR_REASON_UNSPECIFIED", code: r?.code ?? S.UNAVAILABLE,
      retryAfterMs: left, endpoint: ep.addr, metadata: r?.metadata,
    });
    return unavailable(`no endpoint serves (${n} endpoints, each asked the client to wait; none asked, the first free in ${Math.round(left)}ms)`, last);
  }

  private heldUntil(t: number): number | undefined {
    return this.heldFirst(t)?.retryUntil;
  }

  /** When every endpoint asked the client to wait, the one free first. */
  private heldFirst(t: number): Endpoint | undefined {
    let first: Endpoint | undefined;
    for (const ep of this.eps) {
      if (ep.retryUntil <= t) return undefined;
      if (!first || ep.retryUntil < first.retryUntil) first = ep;
    }
    return first;
  }

  private markDown(ep: Endpoint, err: FirnError, why: string): void {
    const t = now();
    let down = DOWN_FOR;
    if (err.retryAfterMs !== undefined) {
      down = Math.min(Math.max(err.retryAfterMs, 10), MAX_RETRY_WAIT);
      ep.refusal = err;
      ep.retryUntil = t + down;
    }
    if (err.reason === "OVERLOADED") {
      this.overloads++;
      this.kick();
    }
    ep.downUntil = t + down;
    this.log(`endpoint ${ep.addr} failed (${why}) for ${down}ms: ${err.message}`);
  }

  private markLacking(ep: Endpoint, err: FirnError): void {
    ep.downUntil = now() + LACKING_FOR;
    this.log(`endpoint ${ep.addr} does not run generator ${JSON.stringify(this.generator)}: ${err.message}`);
  }

  /**
   * Starts an attempt: its deadline CallTimeout, or the caller's share
   * while another endpoint follows. fresh says the endpoint has not
   * answered yet: the round's last attempt then gets FIRST_ANSWER_TIMEOUT
   * if CallTimeout is shorter.
   */
  private startAttempt(b: Bound, last: boolean, refill: boolean, fresh: boolean): Attempt {
    const t = now();
    let end = t + (fresh && last ? Math.max(this.callTimeout, FIRST_ANSWER_TIMEOUT) : this.callTimeout);
    if (b.deadline !== undefined) {
      if (!last) end = Math.min(end, shareEnd(t, b.deadline));
      end = Math.min(end, b.deadline);
    }
    if (refill && !last) {
      const share = this.waitShare(t);
      if (share !== undefined) end = Math.min(end, share);
    }
    const a = new Attempt(t, end, last, refill);
    if (refill) this.attempts.add(a);
    else {
      this.directAttempts.add(a);
      if (b.signal) {
        const s = b.signal;
        if (s.aborted) a.abort("caller");
        else {
          const onAbort = () => a.abort("caller");
          s.addEventListener("abort", onAbort, { once: true });
          a.unhook = () => s.removeEventListener("abort", onAbort);
        }
      }
    }
    if (this.closed) a.abort("closed");
    return a;
  }

  /** Ends an attempt; err is how it failed, if it did. */
  private endAttempt(a: Attempt, err?: FirnError): { ran: number; missed: boolean; cut: boolean } {
    this.attempts.delete(a);
    this.directAttempts.delete(a);
    if (a.timer) clearTimeout(a.timer);
    a.unhook?.();
    const t = now();
    const cut = a.cause === "cut";
    // grpc-js times the deadline sent against the event loop's cached
    // clock, so it can end the call a few ms before a.sent: a
    // DEADLINE_EXCEEDED that nothing of the client's caused is that
    // deadline running out.
    const missed = !cut && a.cause !== "closed" && a.cause !== "caller" &&
      (t >= a.sent - 1 || (!a.cause && err?.code === S.DEADLINE_EXCEEDED));
    if (!a.cause) a.cause = "caller"; // ended: later cuts do nothing
    return { ran: t - a.start, missed, cut };
  }

  /** The latest cut-off the waiting callers allow an attempt started at t; undefined when one waits without a deadline. */
  private waitShare(t: number): number | undefined {
    if (this.waiters.size === 0) return undefined;
    let end = -Infinity;
    for (const w of this.waiters) {
      if (w.deadline === undefined) return undefined;
      end = Math.max(end, shareEnd(t, w.deadline));
    }
    return end;
  }

  private cutAttempts(at0: number): void {
    for (const a of this.attempts) {
      if (a.last || a.cause) continue;
      const at = Math.max(at0, a.start + MIN_ATTEMPT);
      if (at >= a.cutAt) continue;
      a.cutAt = at;
      if (a.timer) clearTimeout(a.timer);
      a.timer = setTimeout(() => a.abort("cut"), Math.max(0, at - now()));
    }
  }

  /** A unary call under an attempt: its deadline, and its abort. */
  private unary<T>(client: any, method: string, req: any, a: Attempt, addr: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (a.cause) {
        reject(new FirnError(`endpoint ${addr}: attempt ended (${a.cause})`, { reason: "ERROR_REASON_UNSPECIFIED", code: S.CANCELLED, endpoint: addr }));
        return;
      }
      const call = client[method](req, { deadline: wall(a.sent) }, (err: any, resp: T) => {
        a.calls.delete(call);
        if (err) reject(fromGrpc(err, addr));
        else resolve(resp);
      });
      a.calls.add(call);
    });
  }

  /**
   * count IDs (fewer if an endpoint's bound is lower) from the first
   * endpoint that serves them, each tried at most once.
   */
  private async fetch(count: number, refill: boolean, b: Bound): Promise<Fetched> {
    await this.awaitResolved(b);
    if (this.closed) throw closedError();
    const r = this.order(now());
    try {
      if (r.held) throw r.held;
      let last: FirnError | undefined;
      let notFound = 0;
      // Whether the last attempt ran until the caller's own deadline: its
      // miss is then the caller's deadline running out (DEADLINE).
      let callersTime = false;
      for (let i = 0; i < r.eps.length; i++) {
        const ep = r.eps[i];
        if (i > 0) this.st.failovers++;
        const a = this.startAttempt(b, i === r.eps.length - 1, refill, !ep.answered);
        callersTime = b.deadline !== undefined && a.sent >= b.deadline;
        let runs: Run[] | undefined, start = 0, err: FirnError | undefined;
        try {
          [runs, start] = await this.fetchFrom(a, ep, count);
        } catch (e) {
          err = e instanceof FirnError ? e : fromGrpc(e, ep.addr);
        }
        const { ran, missed, cut } = this.endAttempt(a, err);
        if (!err) {
          ep.served();
          if (this.active !== ep) {
            if (this.active) this.log(`serving from ${ep.addr} (was ${this.active.addr})`);
            this.active = ep;
          }
          this.st.fetches++;
          this.st.fetchedIds += countOf(runs!);
          return { runs: runs!, ep, start };
        }
        if (this.closed) throw closedError();
        this.st.fetchErrors++;
        const f = this.failed(b, ep, err, ran, missed, cut);
        if (f.notFound) notFound++;
        last = f.last;
        if (f.stop) throw stopError(b, last);
      }
      if (notFound > 0 && notFound === r.eps.length) throw last!;
      this.askResolve();
      if (r.eps.length === 0) throw unavailable("no endpoint: the DNS names given resolved to no address yet");
      if (callersTime && last && last.code === S.DEADLINE_EXCEEDED && last.reason === "ERROR_REASON_UNSPECIFIED") {
        throw deadlineError(last);
      }
      throw unavailable(`no endpoint serves (${r.eps.length} endpoints tried)`, last);
    } finally {
      for (const ep of r.probes) ep.probing = false;
    }
  }

  /** Handles a failed attempt: whether the round stops here, and the error to report. */
  private failed(b: Bound, ep: Endpoint, err: FirnError, ran: number, missed: boolean, cut: boolean): { stop: boolean; last: FirnError; notFound?: boolean } {
    if (boundDone(b)) {
      if (countsAgainst(err, missed)) this.markDown(ep, err, "no answer by the deadline sent");
      return { stop: true, last: err };
    }
    if (err.reason !== "ERROR_REASON_UNSPECIFIED") {
      // The node answered with its reason (a shed, a generator that does
      // not serve), if only as the deadline passed: that answer, not the
      // deadline, is what the caller is told.
      missed = cut = false;
    }
    if (cut || missed) {
      err = new FirnError(`endpoint ${ep.addr}: no answer within ${Math.round(ran)}ms: ${err.message}`, {
        reason: "ERROR_REASON_UNSPECIFIED", code: S.DEADLINE_EXCEEDED, endpoint: ep.addr,
      });
    }
    if (err.code === S.NOT_FOUND) {
      this.markLacking(ep, err);
      return { stop: false, last: err, notFound: true };
    }
    if (!failover(err, b)) return { stop: true, last: err };
    if (countsAgainst(err, missed)) this.markDown(ep, err, "failing over");
    else this.log(`endpoint ${ep.addr} cut short for a waiting caller after ${Math.round(ran)}ms; trying the next`);
    return { stop: false, last: err };
  }

  /** Asks one endpoint for count IDs under an attempt: NextRange, or NextIDs from a node without it. */
  private async fetchFrom(a: Attempt, ep: Endpoint, count: number): Promise<[Run[], number]> {
    if (this.health && !ep.heard && !ep.noHealth) await this.check(a, ep);
    if (ep.maxBatch === 0) await this.learnBounds(a, ep);
    for (;;) {
      const t = now();
      const useRange = t >= ep.noRangeUntil;
      if (!useRange) count = Math.min(count, this.maxBatch);
      const bound = useRange ? ep.maxRange : ep.maxBatch;
      if (bound > 0) count = Math.min(count, bound);
      try {
        const runs = useRange ? await this.callRange(a, ep, count) : await this.callIds(a, ep, count);
        return [runs, t];
      } catch (e) {
        const err = e as FirnError;
        if (useRange && err.code === S.UNIMPLEMENTED) {
          ep.noRangeUntil = t + RANGE_RETRY;
          this.log(`endpoint ${ep.addr} does not know NextRange; asking NextIDs`);
          continue;
        }
        const tooLarge = err.code === S.INVALID_ARGUMENT || (err.code === S.RESOURCE_EXHAUSTED && err.reason !== "OVERLOADED");
        if (tooLarge && count > 1) {
          if (useRange) ep.maxRange = Math.floor(count / 2);
          else ep.maxBatch = Math.floor(count / 2);
          this.log(`endpoint ${ep.addr} refused a batch of ${count}; halving`);
          continue;
        }
        throw err;
      }
    }
  }

  private async callRange(a: Attempt, ep: Endpoint, count: number): Promise<Run[]> {
    const resp: any = await this.unary(ep.ids, "NextRange", { generator: this.generator, count: String(count) }, a, ep.addr);
    const runs: Run[] = [];
    let left = BigInt(count);
    for (const r of resp.runs ?? []) {
      let n = BigInt(r.count);
      if (n > left) n = left;
      if (n === 0n) continue;
      const first = BigInt(r.first);
      if (first + n - 1n > 0xffffffffffffffffn) throw internal(ep, `NextRange answered a run of ${n} from ${first}, past the largest ID`);
      const k = runs.length - 1;
      if (k >= 0 && first <= runs[k].first + runs[k].count - 1n) throw internal(ep, `NextRange answered runs out of order (${first} after ${runs[k].first})`);
      runs.push({ first, count: n });
      left -= n;
      if (left === 0n) break;
    }
    if (runs.length === 0) throw internal(ep, "NextRange answered no IDs");
    return runs;
  }

  private async callIds(a: Attempt, ep: Endpoint, count: number): Promise<Run[]> {
    const resp: any = await this.unary(ep.ids, "NextIDs", { generator: this.generator, count }, a, ep.addr);
    const ids: bigint[] = (resp.ids ?? []).map((s: string) => BigInt(s));
    if (ids.length === 0) throw internal(ep, "NextIDs answered no IDs");
    return runsOf(ids);
  }

  /**
   * Asks ep's health service once. NOT_SERVING fails the attempt, except
   * on the round's last endpoint: there the ID call is made anyway, so
   * that the caller gets the node's reason (CLOCK_ROLLBACK, ...).
   */
  private async check(a: Attempt, ep: Endpoint): Promise<void> {
    let resp: any;
    try {
      resp = await this.unary(ep.health, "Check", { service: this.generator }, a, ep.addr);
    } catch (e) {
      const err = e as FirnError;
      if (err.code === S.UNIMPLEMENTED) {
        ep.noHealth = true;
        return;
      }
      if (err.code === S.NOT_FOUND) return;
      throw err;
    }
    const s = healthOf(resp.status);
    if (!ep.heard) this.setHealth(ep, s);
    if (s === HEALTH_NOT_SERVING && !a.last) {
      throw new FirnError(`endpoint ${ep.addr}: health check: NOT_SERVING`, { reason: "ERROR_REASON_UNSPECIFIED", code: S.UNAVAILABLE, endpoint: ep.addr });
    }
  }

  private async learnBounds(a: Attempt, ep: Endpoint): Promise<void> {
    let info: any;
    try {
      info = await this.unary(ep.ids, "Info", {}, a, ep.addr);
    } catch (e) {
      const err = e as FirnError;
      if (a.cause || failover(err, { deadline: undefined, signal: undefined })) throw err;
      if (ep.maxRange === 0) ep.maxRange = -1;
      if (ep.maxBatch === 0) ep.maxBatch = -1;
      return;
    }
    let mr = -1, mb = -1;
    for (const g of info.generators ?? []) {
      if ((this.generator === "" && g.is_default) || (this.generator !== "" && g.name === this.generator)) {
        const r = Number(g.max_range ?? 0);
        if (r > 0) mr = r;
        if (g.max_batch > 0) mb = g.max_batch;
        break;
      }
    }
    if (ep.maxRange === 0) ep.maxRange = mr;
    if (ep.maxBatch === 0) ep.maxBatch = mb;
  }

  /** Runs call against the endpoints in order until one answers without an error that fails over. */
  private async each<T>(b: Bound, call: (a: Attempt, ep: Endpoint) => Promise<T>): Promise<T> {
    if (this.closed) throw closedError();
    await this.awaitResolved(b);
    const r = this.order(now());
    try {
      if (r.held) throw r.held;
      let last: FirnError | undefined;
      let notFound = 0;
      for (let i = 0; i < r.eps.length; i++) {
        const ep = r.eps[i];
        const a = this.startAttempt(b, i === r.eps.length - 1, false, !ep.answered);
        let v: T | undefined, err: FirnError | undefined;
        try {
          v = await call(a, ep);
        } catch (e) {
          err = e instanceof FirnError ? e : fromGrpc(e, ep.addr);
        }
        const { ran, missed, cut } = this.endAttempt(a, err);
        if (!err) {
          ep.served();
          return v as T;
        }
        if (this.closed) throw closedError();
        const f = this.failed(b, ep, err, ran, missed, cut);
        if (f.notFound) notFound++;
        last = f.last;
        if (f.stop) throw stopError(b, last);
      }
      if (notFound > 0 && notFound === r.eps.length) throw last!;
      this.askResolve();
      throw unavailable(`no endpoint serves (${r.eps.length} endpoints tried)`, last);
    } finally {
      for (const ep of r.probes) ep.probing = false;
    }
  }

  /** The Info of the first endpoint that answers (as proto-loader decodes it: 64-bit fields as strings). */
  async info(opts?: CallOptions): Promise<any> {
    const b = boundOf(opts);
    const v = await this.each(b, (a, ep) => this.unary<any>(ep.ids, "Info", {}, a, ep.addr));
    if (this.closed) throw closedError();
    return v;
  }

  // ---------------------------------------------------------- sequences

  /** The next count values of key's sequence: first … first+count-1. Routed to the key's owner. */
  async nextSeq(key: string | Uint8Array, count = 1, opts?: CallOptions): Promise<{ first: bigint; count: number }> {
    const k = keyBytes(key);
    checkSeq(k, count);
    let out: { first: bigint; count: number } | undefined;
    await this.seqDo(k, boundOf(opts), async (client, a, addr) => {
      const resp: any = await this.unary(client, "NextSeq", { generator: this.generator, key: k, count }, a, addr);
      if (Number(resp.count) !== count) throw internal(undefined, `NextSeq answered ${resp.count} values, asked ${count}`, addr);
      out = { first: BigInt(resp.first), count };
    });
    if (this.closed) throw closedError();
    return out!;
  }

  /** A value at or above every value handed out for key, handing out none. */
  async currentSeq(key: string | Uint8Array, opts?: CallOptions): Promise<bigint> {
    const k = keyBytes(key);
    checkSeq(k, 1);
    let v = 0n;
    await this.seqDo(k, boundOf(opts), async (client, a, addr) => {
      const resp: any = await this.unary(client, "CurrentSeq", { generator: this.generator, key: k }, a, addr);
      v = BigInt(resp.value);
    });
    if (this.closed) throw closedError();
    return v;
  }

  private async seqDo(key: Buffer, b: Bound, call: (client: any, a: Attempt, addr: string) => Promise<void>): Promise<void> {
    if (this.closed) throw closedError();
    this.st.seqCalls++;
    this.seqUses++;
    this.seqStartRefresher();
    await this.seqEnsureMap(b);
    const end = b.deadline ?? now() + SEQ_RETRY_FOR;
    let hint = "", hops = 0, backoff = 0, anyN = 0;
    let refused: FirnError | undefined; // the last refusal a node answered this call with, its reason named
    for (;;) {
      if (this.closed) throw closedError();
      const addr = this.seqRoute(key, hint, anyN);
      let err: FirnError | undefined;
      if (addr === "") {
        err = new FirnError("no endpoint: the DNS names given resolved to no address yet", { reason: "ERROR_REASON_UNSPECIFIED", code: S.UNAVAILABLE });
      } else {
        const o = this.seqConn(addr);
        // The round's last attempt: nothing follows a section's owner.
        const a = this.startAttempt(b, true, false, !o.owner.answered);
        try {
          await call(o.client, a, addr);
        } catch (e) {
          err = e instanceof FirnError ? e : fromGrpc(e, addr);
        }
        this.endAttempt(a);
        if (!err) {
          o.owner.answered = true;
          return;
        }
      }
      if (this.closed) throw closedError();
      // The deadline ran out: DEADLINE when no answer came; the owner's own
      // refusal when it answered with its reason, if only as the deadline
      // passed (as the ID calls: stopError); a WRONG_NODE answers nothing.
      if (boundDone(b)) {
        const stop = err.reason === "WRONG_NODE" ? deadlineError(err) : stopError(b, err);
        // The attempt the deadline cut says nothing new: the owner's last
        // refusal, when it named its reason, says why (as the Go client).
        if (stop.reason === "DEADLINE" && refused) throw unavailable("the caller's deadline ran out retrying", refused);
        throw stop;
      }
      if (err.reason !== "ERROR_REASON_UNSPECIFIED" && err.reason !== "WRONG_NODE") refused = err;
      const next = seqClassify(err, b);
      if (next === "redirect") {
        this.st.seqRedirects++;
        this.seqKick();
        const owner = err.metadata.owner ?? "";
        if (!dialable(owner)) {
          throw new FirnError(`firn client: the section's owner gives an address a client cannot dial (${JSON.stringify(owner)}): ${err.message}`, {
            reason: err.reason, code: err.code, endpoint: err.endpoint, metadata: err.metadata, cause: err,
          });
        }
        this.seqHint(key, owner);
        hops++;
        if (hops <= MAX_SEQ_HOPS && owner !== addr) {
          hint = owner;
          continue;
        }
      } else if (next === "final") {
        throw err;
      }
      this.st.seqRetries++;
      this.seqKick();
      if (hint === "" && this.seqOwner(key) === "") anyN++;
      hint = "";
      hops = 0;
      let wait: number;
      if (err.retryAfterMs !== undefined) {
        wait = Math.min(Math.max(err.retryAfterMs, 10), MAX_RETRY_WAIT);
      } else {
        if (backoff === 0) backoff = SEQ_BACKOFF_MIN;
        wait = (backoff * 3) / 4 + Math.random() * (backoff / 2);
        backoff = Math.min(2 * backoff, SEQ_BACKOFF_MAX);
      }
      if (now() + wait > end) {
        // An attempt that ended unanswered (grpc-js may end one a few ms
        // before the deadline it was sent) says nothing new: the owner's
        // last refusal that named its reason, if any, says why.
        const why = err.reason === "ERROR_REASON_UNSPECIFIED" && refused ? refused : err;
        throw unavailable(`the section's owner cannot answer now, and the wait it asks (${Math.round(wait)}ms) would pass the deadline`, why);
      }
      await this.seqSleep(wait, b);
    }
  }

  private seqSleep(ms: number, b: Bound): Promise<void> {
    return new Promise<void>((resolve) => {
      const t = setTimeout(done, ms);
      const onAbort = () => done();
      b.signal?.addEventListener("abort", onAbort, { once: true });
      this.seqSleepers.add(done);
      const self = this;
      function done() {
        clearTimeout(t);
        b.signal?.removeEventListener("abort", onAbort);
        self.seqSleepers.delete(done);
        resolve();
      }
    });
  }

  private seqSleepers = new Set<() => void>();

  private seqOwner(key: Uint8Array): string {
    const m = this.seqMap;
    if (!m || m.sections === 0) return "";
    return m.owners[sectionOf(key, m.sections)] ?? "";
  }

  private seqRoute(key: Uint8Array, hint: string, n: number): string {
    if (hint) return hint;
    const o = this.seqOwner(key);
    if (o) return o;
    const all = this.eps;
    if (all.length === 0) return "";
    const t = now();
    const first = Math.max(this.active ? all.indexOf(this.active) : 0, 0);
    const usable: Endpoint[] = [], rest: Endpoint[] = [];
    for (let i = 0; i < all.length; i++) {
      const ep = all[(first + i) % all.length];
      (ep.usable(t) ? usable : rest).push(ep);
    }
    const order = [...usable, ...rest];
    return order[n % order.length].addr;
  }

  private seqHint(key: Uint8Array, addr: string): void {
    const m = this.seqMap;
    if (!m || m.sections === 0) return;
    const s = sectionOf(key, m.sections);
    if (m.owners[s] === addr) return;
    const owners = [...m.owners];
    owners[s] = addr;
    this.seqMap = { sections: m.sections, owners };
  }

  /**
   * The client for addr: an endpoint's, or an owner's dialled on demand;
   * and whether that endpoint or connection has answered yet.
   */
  private seqConn(addr: string): { client: any; owner: Answered } {
    for (const ep of this.eps) if (ep.addr === addr) return { client: ep.ids, owner: ep };
    let oc = this.seqConns.get(addr);
    if (!oc) {
      const p = protos();
      const client = new p.IDService(addr, this.creds, {
        "grpc.max_receive_message_length": 16 << 20,
        "grpc.keepalive_time_ms": 20000,
        "grpc.keepalive_timeout_ms": 5000,
      });
      oc = { client, answered: false };
      this.seqConns.set(addr, oc);
    }
    return { client: oc.client, owner: oc };
  }

  private async seqEnsureMap(b: Bound): Promise<void> {
    if (this.seqMap) return;
    if (this.seqLoading) {
      await waitWithin(this.seqLoading, b);
      return;
    }
    if (this.seqLastLoad !== 0 && now() - this.seqLastLoad < 1000) return;
    this.seqLastLoad = now();
    this.seqLoading = this.seqRefresh(b).catch((e) => {
      if (!this.closed) this.log(`sequence section map not read; routing by refusals: ${(e as Error).message}`);
    }).finally(() => (this.seqLoading = undefined));
    await this.seqLoading;
  }

  /** Reads the section map from an endpoint's Info (or, failing that, a known owner's). */
  private async seqRefresh(b: Bound): Promise<void> {
    let info: any;
    try {
      info = await this.each(b, (a, ep) => this.unary<any>(ep.ids, "Info", {}, a, ep.addr));
    } catch (e) {
      if (this.closed) throw e;
      let got = false;
      for (const [addr, oc] of this.seqConns) {
        // Under b, as the Go client: the caller's deadline cuts a fresh owner's 10 s.
        const a = this.startAttempt(b, true, false, !oc.answered);
        try {
          info = await this.unary<any>(oc.client, "Info", {}, a, addr);
          oc.answered = true;
          got = true;
        } catch {
          // the next
        }
        this.endAttempt(a);
        if (got) break;
      }
      if (!got) throw e;
    }
    if (this.closed) return;
    const m: SeqMap = { sections: 0, owners: [] };
    for (const g of info.generators ?? []) {
      if ((this.generator === "" && !g.is_default) || (this.generator !== "" && g.name !== this.generator)) continue;
      if (g.kind === "seq" && g.sections > 0) {
        m.sections = g.sections;
        m.owners = new Array(g.sections).fill("");
        for (const o of g.section_owners ?? []) {
          if (o.section < m.sections && dialable(o.address ?? "")) m.owners[o.section] = o.address;
        }
      }
      break;
    }
    this.seqMap = keepingKnown(m, this.seqMap);
    this.st.seqRefreshes++;
    // Owners the map no longer names: their connections go.
    const named = new Set(this.seqMap.owners);
    for (const [addr, oc] of this.seqConns) {
      if (!named.has(addr)) {
        oc.client.close();
        this.seqConns.delete(addr);
      }
    }
  }

  /** While sequence calls are made, the map is read again every 3 s. */
  private seqStartRefresher(): void {
    if (this.seqTimer || this.closed) return;
    this.seqSeen = this.seqUses;
    this.seqTimer = setInterval(() => {
      if (this.seqUses === this.seqSeen) {
        clearInterval(this.seqTimer);
        this.seqTimer = undefined;
        return;
      }
      this.seqSeen = this.seqUses;
      this.seqRefreshSoon();
    }, SEQ_REFRESH_EVERY);
    this.seqTimer.unref();
  }

  private seqKick(): void {
    this.seqRefreshSoon();
  }

  private seqRefreshSoon(): void {
    if (this.closed || this.seqRefreshing || this.seqKickTimer) return;
    const wait = Math.max(0, this.seqLastRefresh + SEQ_REFRESH_GAP - now());
    this.seqKickTimer = setTimeout(() => {
      this.seqKickTimer = undefined;
      if (this.closed) return;
      this.seqRefreshing = true;
      this.seqRefresh({ deadline: now() + 2 * this.callTimeout, signal: undefined })
        .catch((e) => { if (!this.closed) this.log(`sequence section map not read: ${(e as Error).message}`); })
        .finally(() => {
          this.seqRefreshing = false;
          this.seqLastRefresh = now();
        });
    }, wait);
    this.seqKickTimer.unref();
  }

  // ---------------------------------------------------------- close, stats

  /**
   * Closes the client: waiting callers and calls in flight end with
   * CLOSED, buffered IDs are dropped, health watches and connections
   * end. Calls after close fail with CLOSED.
   */
  close(): Promise<void> {
    if (this.closeP) return this.closeP;
    this.closed = true;
    this.markClosing();
    this.retire(this.cur);
    this.cur = this.empty;
    for (const b of this.queue) this.st.dropped += b.n;
    this.queue = [];
    const err = closedError();
    for (const w of [...this.waiters]) w.reject(err);
    for (const a of [...this.attempts, ...this.directAttempts]) a.abort("closed");
    for (const s of [...this.seqSleepers]) s();
    if (this.ticker) clearInterval(this.ticker);
    if (this.wake) clearTimeout(this.wake);
    if (this.resolveTimer) clearInterval(this.resolveTimer);
    if (this.seqTimer) clearInterval(this.seqTimer);
    if (this.seqKickTimer) clearTimeout(this.seqKickTimer);
    for (const ep of this.eps) ep.stop();
    for (const oc of this.seqConns.values()) oc.client.close();
    this.seqConns.clear();
    this.closeP = Promise.resolve();
    return this.closeP;
  }

  /** What the client counts. */
  stats(): ClientStats {
    return {
      buffered: this.buffered(),
      batchSize: this.batch,
      rate: this.rateV,
      fetches: this.st.fetches,
      fetchedIds: this.st.fetchedIds,
      fetchErrors: this.st.fetchErrors,
      failovers: this.st.failovers,
      dropped: this.st.dropped,
      seqCalls: this.st.seqCalls,
      seqRedirects: this.st.seqRedirects,
      seqRetries: this.st.seqRetries,
      seqMapRefreshes: this.st.seqRefreshes,
      endpoint: this.active?.addr ?? this.eps[0]?.addr ?? "",
    };
  }
}

/**
 * The error of a round that stopped early: the caller's deadline when it
 * ran out with no answer in hand (DEADLINE); the node's own refusal (an
 * OVERLOADED with its RetryInfo, say) when one came back, even if the
 * deadline passed meanwhile.
 */
function stopError(b: Bound, last: FirnError): FirnError {
  if (boundDone(b) && (last.code === S.DEADLINE_EXCEEDED || last.code === S.CANCELLED || last.reason === "ERROR_REASON_UNSPECIFIED")) {
    return deadlineError(last);
  }
  return last;
}

function shareEnd(t: number, d: number): number {
  return t + Math.max((d - t) / 2, MIN_ATTEMPT);
}

function healthOf(s: string | number): number {
  if (s === "SERVING" || s === 1) return HEALTH_SERVING;
  if (s === "NOT_SERVING" || s === 2) return HEALTH_NOT_SERVING;
  return HEALTH_UNKNOWN;
}

/** Whether err from one endpoint sends the request on to the next. */
function failover(err: FirnError, b: Bound): boolean {
  switch (err.code) {
    case S.UNAVAILABLE:
      return true;
    case S.RESOURCE_EXHAUSTED:
      return err.reason === "OVERLOADED";
    case S.DEADLINE_EXCEEDED:
    case S.CANCELLED:
      return !boundDone(b);
  }
  return false;
}

/** Whether a failed attempt counts against its endpoint. */
function countsAgainst(err: FirnError, missed: boolean): boolean {
  switch (err.code) {
    case S.UNAVAILABLE:
      return true;
    case S.RESOURCE_EXHAUSTED:
      return err.reason === "OVERLOADED";
    case S.DEADLINE_EXCEEDED:
    case S.CANCELLED:
      return missed;
  }
  return false;
}

function seqClassify(err: FirnError, b: Bound): "final" | "redirect" | "retry" {
  if (err.reason === "WRONG_NODE") return "redirect";
  switch (err.code) {
    case S.UNAVAILABLE:
      return "retry";
    case S.RESOURCE_EXHAUSTED:
      return err.reason === "OVERLOADED" ? "retry" : "final";
    case S.DEADLINE_EXCEEDED:
    case S.CANCELLED:
      return boundDone(b) ? "final" : "retry";
  }
  return "final";
}

function internal(ep: Endpoint | undefined, msg: string, addr?: string): FirnError {
  const a = ep?.addr ?? addr;
  return new FirnError(`endpoint ${a}: ${msg}`, { reason: "ERROR_REASON_UNSPECIFIED", code: S.INTERNAL, endpoint: a });
}

function keyBytes(key: string | Uint8Array): Buffer {
  if (typeof key === "string") return Buffer.from(key, "utf8");
  if (key instanceof Uint8Array) return Buffer.from(key.buffer, key.byteOffset, key.byteLength);
  throw invalidArgument("a key is a string or a Uint8Array");
}

function checkSeq(key: Uint8Array, count: number): void {
  if (key.length < 1 || key.length > MAX_SEQ_KEY) throw invalidArgument(`key is ${key.length} bytes: a key is 1 to ${MAX_SEQ_KEY} bytes`);
  if (!Number.isInteger(count) || count < 1 || count > MAX_SEQ_COUNT) throw invalidArgument(`count ${count} outside [1, ${MAX_SEQ_COUNT}]`);
}
