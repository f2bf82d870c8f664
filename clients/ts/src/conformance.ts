// The conformance runner (test/conformance/README.md): reads commands,
// one JSON object a line, from standard input, carries each out with the
// client and answers each with one JSON line on standard output.
import * as readline from "node:readline";
import { performance } from "node:perf_hooks";
import { FirnClient, FirnError, codeName } from "./index";

interface ErrObj {
  at: number;
  reason: string;
  code: string;
  retry_ms: number | null;
  message: string;
}

interface CallerOut {
  ids: string[];
  runs: [string, string][];
  errors: ErrObj[];
}

let client: FirnClient | undefined;

function errObj(at: number, e: unknown): ErrObj {
  if (e instanceof FirnError) {
    return {
      at,
      reason: e.reason,
      code: e.codeName,
      retry_ms: e.retryAfterMs === undefined ? null : Math.round(e.retryAfterMs),
      message: e.message,
    };
  }
  return { at, reason: "ERROR_REASON_UNSPECIFIED", code: "", retry_ms: null, message: String((e as Error)?.message ?? e) };
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function keyOf(cmd: any): string | Uint8Array {
  if (typeof cmd.key_base64 === "string") return new Uint8Array(Buffer.from(cmd.key_base64, "base64"));
  if (typeof cmd.key === "string") return cmd.key;
  throw new Error("key or key_base64 required");
}

async function open(cmd: any): Promise<any> {
  if (client) {
    await client.close();
    client = undefined;
  }
  const resolve: Record<string, string[]> | null | undefined = cmd.resolve;
  const tls = cmd.tls ? { ca: cmd.tls.ca || undefined, cert: cmd.tls.cert || undefined, key: cmd.tls.key || undefined } : undefined;
  try {
    client = new FirnClient({
      endpoints: cmd.endpoints ?? [],
      generator: cmd.generator ?? "",
      tls,
      callTimeoutMs: cmd.call_timeout_ms || undefined,
      maxAgeMs: cmd.max_age_ms || undefined,
      lookup: resolve
        ? async (host: string) => {
            const a = resolve[host];
            if (!a) throw new Error(`no such host ${host}`);
            return a;
          }
        : undefined,
      log: (m) => process.stderr.write(`firn-client: ${m}\n`),
    });
  } catch (e) {
    return { ok: false, error: (e as Error).message };
  }
  return { ok: true };
}

async function calls(cmd: any): Promise<any> {
  const c = client;
  if (!c) return { ok: false, error: "no client open" };
  const op: string = cmd.op;
  const callers: number = cmd.callers ?? 1;
  const n: number = cmd.n ?? 1;
  const count: number = cmd.count ?? 1;
  const deadlineMs: number | undefined = cmd.deadline_ms || undefined;
  const pause: number = cmd.pause_ms ?? 0;
  const forMs: number | undefined = cmd.for_ms || undefined;
  const nCalls: number = cmd.calls ?? 1;
  let key: string | Uint8Array = "";
  if (op === "next_seq" || op === "current_seq") key = keyOf(cmd);
  const start = performance.now();
  const opts = { deadlineMs };

  async function caller(): Promise<CallerOut> {
    const out: CallerOut = { ids: [], runs: [], errors: [] };
    for (let i = 0; ; i++) {
      if (forMs !== undefined ? performance.now() - start >= forMs : i >= nCalls) break;
      if (i > 0 && pause > 0) await sleep(pause);
      try {
        switch (op) {
          case "next":
            out.ids.push(String(await c!.next(opts)));
            break;
          case "next_n":
            for (const id of await c!.nextN(n, opts)) out.ids.push(String(id));
            break;
          case "next_range":
            for (const r of await c!.nextRange(n, opts)) out.runs.push([String(r.first), String(r.count)]);
            break;
          case "next_seq": {
            const r = await c!.nextSeq(key, count, opts);
            out.runs.push([String(r.first), String(r.count)]);
            break;
          }
          case "current_seq":
            out.runs.push([String(await c!.currentSeq(key, opts)), "0"]);
            break;
        }
      } catch (e) {
        out.errors.push(errObj(i, e));
        // A refusal can come back without any I/O (an endpoint that asked
        // to wait): let timers and sockets run before the next call.
        await new Promise<void>((r) => setImmediate(r));
      }
    }
    return out;
  }
  const ps: Promise<CallerOut>[] = [];
  for (let k = 0; k < callers; k++) ps.push(caller());
  return { ok: true, callers: await Promise.all(ps) };
}

async function closeWhileWaiting(cmd: any): Promise<any> {
  const c = client;
  if (!c) return { ok: false, error: "no client open" };
  const deadlineMs: number | undefined = cmd.deadline_ms || undefined;
  const ps: Promise<CallerOut>[] = [];
  for (let k = 0; k < (cmd.callers ?? 1); k++) {
    ps.push(
      c.next({ deadlineMs }).then(
        (id) => ({ ids: [String(id)], runs: [], errors: [] }),
        (e) => ({ ids: [], runs: [], errors: [errObj(0, e)] }),
      ),
    );
  }
  await sleep(cmd.wait_ms ?? 0);
  const t0 = performance.now();
  await c.close();
  const outs = await Promise.all(ps);
  const closeMs = Math.round(performance.now() - t0);
  return { ok: true, close_ms: closeMs, callers: outs };
}

// bench: callers loop on await next() for warm_ms uncounted, then for
// for_ms counted. Each caller lets the event loop run every 1000 calls:
// refills are I/O on the same loop (README, Concurrency).
async function bench(cmd: any): Promise<any> {
  const c = client;
  if (!c) return { ok: false, error: "no client open" };
  let counting = false;
  let stop = false;
  let ids = 0;
  let errors = 0;
  async function caller(): Promise<void> {
    while (!stop) {
      for (let k = 0; k < 1000; k++) {
        try {
          await c!.next();
          if (counting) ids++;
        } catch {
          errors++;
        }
      }
      await new Promise<void>((r) => setImmediate(r));
    }
  }
  const ps: Promise<void>[] = [];
  for (let k = 0; k < (cmd.callers ?? 1); k++) ps.push(caller());
  await sleep(cmd.warm_ms ?? 0);
  counting = true;
  const t0 = performance.now();
  await sleep(cmd.for_ms ?? 1000);
  counting = false;
  const seconds = (performance.now() - t0) / 1000;
  stop = true;
  await Promise.all(ps);
  return { ok: true, ids, errors, seconds };
}

async function handle(line: string): Promise<any> {
  let cmd: any;
  try {
    cmd = JSON.parse(line);
  } catch (e) {
    return { ok: false, error: `bad JSON: ${(e as Error).message}` };
  }
  try {
    switch (cmd.op) {
      case "open":
        return await open(cmd);
      case "next":
      case "next_n":
      case "next_range":
      case "next_seq":
      case "current_seq":
        return await calls(cmd);
      case "close_while_waiting":
        return await closeWhileWaiting(cmd);
      case "bench":
        return await bench(cmd);
      case "close":
        if (client) await client.close();
        return { ok: true };
      case "stats": {
        if (!client) return { ok: true };
        const s = client.stats();
        return { ok: true, failovers: s.failovers, seq_redirects: s.seqRedirects };
      }
      default:
        return { ok: false, error: `unknown op ${JSON.stringify(cmd.op)}` };
    }
  } catch (e) {
    return { ok: false, error: String((e as Error)?.message ?? e) };
  }
}

async function main(): Promise<void> {
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    if (line.trim() === "") continue;
    const ans = await handle(line);
    await new Promise<void>((r) => process.stdout.write(JSON.stringify(ans) + "\n", () => r()));
  }
  if (client) await client.close();
  process.exit(0);
}

void main();
