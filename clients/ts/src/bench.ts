// bench: next() from a warm buffer, one caller and many, in IDs/s.
//   node dist/bench.js [ENDPOINT] [SECONDS_PER_CASE]   (default 127.0.0.1:7300, 3)
// ENDPOINT "fake" runs a fake node (dist/test/fake.js) in a child process
// that answers at once with one run per request: the client's own cost,
// without a real node's limits (a snowflake node hands out at most 4096
// IDs a millisecond per worker, in runs that end at each millisecond).
import { fork, ChildProcess } from "node:child_process";
import * as path from "node:path";
import { performance } from "node:perf_hooks";
import { FirnClient } from "./index";

const yieldLoop = () => new Promise<void>((r) => setImmediate(r));

async function run(c: FirnClient, callers: number, ms: number): Promise<number> {
  const end = performance.now() + ms;
  let total = 0;
  await Promise.all(
    Array.from({ length: callers }, async () => {
      let n = 0;
      while (performance.now() < end) {
        // 1000 calls between clock reads: the loop's own cost stays small.
        for (let i = 0; i < 1000; i++) await c.next();
        n += 1000;
        // Let the event loop run, as a program that does I/O does: the
        // refills' answers land there (a loop of resolved awaits alone
        // never yields, and the buffer then refills only once empty).
        await yieldLoop();
      }
      total += n;
    }),
  );
  return total;
}

async function runSync(c: FirnClient, ms: number): Promise<number> {
  const end = performance.now() + ms;
  let n = 0;
  while (performance.now() < end) {
    for (let i = 0; i < 1000; i++) {
      if (c.tryNext() === undefined) await c.next();
    }
    n += 1000;
    await yieldLoop();
  }
  return n;
}

async function main(): Promise<void> {
  let ep = process.argv[2] ?? "127.0.0.1:7300";
  let child: ChildProcess | undefined;
  if (ep === "fake") {
    const ch = fork(path.join(__dirname, "fakeserve.js"));
    child = ch;
    ep = await new Promise<string>((res) => ch.once("message", (m: any) => res(m.addr)));
  }
  const secs = Number(process.argv[3] ?? 3);
  const c = new FirnClient({ endpoints: [ep] });
  try {
    // Warm up: the buffer, the connection, the demand measure, the JIT.
    await run(c, 1, 500);
    const cases: [string, () => Promise<number>][] = [
      ["await next(), 1 caller", () => run(c, 1, secs * 1000)],
      ["await next(), 64 callers", () => run(c, 64, secs * 1000)],
      ["tryNext() ?? await next(), 1 caller", () => runSync(c, secs * 1000)],
    ];
    for (const [name, f] of cases) {
      const t0 = performance.now();
      const n = await f();
      const s = (performance.now() - t0) / 1000;
      console.log(`${name.padEnd(40)} ${(n / s / 1e6).toFixed(2)} M IDs/s (${n} in ${s.toFixed(2)} s)`);
    }
    const st = c.stats();
    console.log(`fetches ${st.fetches}, fetched ${st.fetchedIds}, batch ${st.batchSize}, dropped (stale or out of order) ${st.dropped}, fetch errors ${st.fetchErrors}`);
  } finally {
    await c.close();
    child?.kill();
  }
}

void main().catch((e) => {
  console.error(e);
  process.exit(1);
});
