import { test } from "node:test";
import * as assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { FirnClient, FirnError } from "../index";
import { sectionOf } from "../fnv";
import { FakeNode, firnError } from "./fake";

async function withNodes(n: number, f: (nodes: FakeNode[]) => Promise<void>): Promise<void> {
  const nodes: FakeNode[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const node = new FakeNode();
      await node.start();
      nodes.push(node);
    }
    await f(nodes);
  } finally {
    for (const node of nodes) node.stop();
  }
}

async function rejects(p: Promise<unknown>): Promise<FirnError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof FirnError, `not a FirnError: ${e}`);
    return e;
  }
  assert.fail("did not fail");
}

test("many concurrent callers: no ID twice, each caller's IDs increase, exact above 2^53", async () => {
  await withNodes(1, async ([a]) => {
    const c = new FirnClient({ endpoints: [a.addr] });
    try {
      const callers = 64, calls = 2000;
      const per = await Promise.all(
        Array.from({ length: callers }, async () => {
          const ids: bigint[] = [];
          for (let i = 0; i < calls; i++) ids.push(await c.next({ deadlineMs: 5000 }));
          return ids;
        }),
      );
      const all = new Set<bigint>();
      for (const ids of per) {
        for (let i = 0; i < ids.length; i++) {
          assert.ok(ids[i] > 1n << 53n);
          if (i > 0) assert.ok(ids[i] > ids[i - 1], "a caller's IDs increase");
          assert.ok(!all.has(ids[i]), `ID ${ids[i]} twice`);
          all.add(ids[i]);
        }
      }
      assert.equal(all.size, callers * calls);
      // nextN and nextRange: exact counts, distinct from the rest.
      const n = await c.nextN(1000);
      assert.equal(n.length, 1000);
      for (const id of n) assert.ok(!all.has(id)), all.add(id);
      const runs = await c.nextRange(250000);
      let total = 0n;
      for (const r of runs) {
        total += r.count;
        assert.ok(!all.has(r.first));
      }
      assert.equal(total, 250000n);
      // tryNext: synchronous, from the buffer.
      await c.next();
      const t = c.tryNext();
      assert.ok(t === undefined || typeof t === "bigint");
    } finally {
      await c.close();
    }
  });
});

test("fails over to the next endpoint; the node's reason reaches the caller when all fail", async () => {
  await withNodes(2, async ([a, b]) => {
    a.handlers.NextRange = () => { throw firnError(grpc.status.UNAVAILABLE, "not serving", "LEASE_LOST"); };
    const c = new FirnClient({ endpoints: [a.addr, b.addr], health: false });
    try {
      const id = await c.next({ deadlineMs: 3000 });
      assert.ok(id >= b.next - 100000n);
      assert.ok((b.calls.NextRange ?? 0) > 0);
      assert.ok(c.stats().failovers >= 1);
      b.handlers.NextRange = () => { throw firnError(grpc.status.UNAVAILABLE, "not serving", "CLOCK_ROLLBACK"); };
      await c.close();
      const d = new FirnClient({ endpoints: [a.addr, b.addr], health: false });
      const e = await rejects(d.next({ deadlineMs: 3000 }));
      assert.ok(e.reason === "CLOCK_ROLLBACK" || e.reason === "LEASE_LOST", e.reason);
      assert.equal(e.code, grpc.status.UNAVAILABLE);
      await d.close();
    } finally {
      await c.close();
    }
  });
});

test("OVERLOADED with RetryInfo: the refusal and its delay reach the caller; the endpoint is not asked again until then", async () => {
  await withNodes(1, async ([a]) => {
    a.handlers.NextRange = () => { throw firnError(grpc.status.RESOURCE_EXHAUSTED, "shed", "OVERLOADED", 300); };
    const c = new FirnClient({ endpoints: [a.addr], health: false });
    try {
      const e = await rejects(c.nextN(5000, { deadlineMs: 1000 }));
      assert.equal(e.reason, "OVERLOADED");
      assert.equal(e.codeName, "RESOURCE_EXHAUSTED");
      assert.ok(e.retryAfterMs !== undefined && e.retryAfterMs > 0);
      const asked = a.calls.NextRange;
      const t0 = performance.now();
      const e2 = await rejects(c.nextN(5000, { deadlineMs: 1000 }));
      assert.ok(performance.now() - t0 < 100, "refused at once");
      assert.equal(e2.reason, "OVERLOADED");
      assert.ok(e2.retryAfterMs! <= 300);
      assert.equal(a.calls.NextRange, asked, "not asked while it said to wait");
    } finally {
      await c.close();
    }
  });
});

test("a hung endpoint is left within the caller's deadline", async () => {
  await withNodes(2, async ([a, b]) => {
    a.handlers.NextRange = () => new Promise(() => {}); // never answers
    const c = new FirnClient({ endpoints: [a.addr, b.addr], health: false, callTimeoutMs: 5000 });
    try {
      const t0 = performance.now();
      const id = await c.next({ deadlineMs: 1000 });
      assert.ok(typeof id === "bigint");
      assert.ok(performance.now() - t0 < 1000);
    } finally {
      await c.close();
    }
  });
});

test("close ends waiting callers with CLOSED at once; calls after close fail CLOSED", async () => {
  await withNodes(1, async ([a]) => {
    a.handlers.NextRange = () => new Promise(() => {});
    const c = new FirnClient({ endpoints: [a.addr], health: false });
    const waiting = Array.from({ length: 4 }, () => rejects(c.next()));
    await new Promise((r) => setTimeout(r, 200));
    const t0 = performance.now();
    await c.close();
    for (const e of await Promise.all(waiting)) assert.equal(e.reason, "CLOSED");
    assert.ok(performance.now() - t0 < 500);
    assert.equal((await rejects(c.next())).reason, "CLOSED");
    assert.equal((await rejects(c.nextSeq("k", 1))).reason, "CLOSED");
  });
});

test("a caller's deadline: DEADLINE when nothing answered", async () => {
  await withNodes(1, async ([a]) => {
    a.handlers.NextRange = () => new Promise(() => {});
    const c = new FirnClient({ endpoints: [a.addr], health: false });
    try {
      const e = await rejects(c.next({ deadlineMs: 100 }));
      assert.equal(e.reason, "DEADLINE");
    } finally {
      await c.close();
    }
  });
});

test("bad arguments are refused before any request", async () => {
  await withNodes(1, async ([a]) => {
    const c = new FirnClient({ endpoints: [a.addr], health: false });
    try {
      assert.equal((await rejects(c.nextN(0))).reason, "INVALID_ARGUMENT");
      assert.equal((await rejects(c.nextRange(0))).reason, "INVALID_ARGUMENT");
      assert.equal((await rejects(c.nextSeq("", 1))).reason, "INVALID_ARGUMENT");
      assert.equal((await rejects(c.nextSeq("k", 0))).reason, "INVALID_ARGUMENT");
      assert.equal((await rejects(c.currentSeq(new Uint8Array(257)))).reason, "INVALID_ARGUMENT");
      assert.equal(a.calls.NextRange ?? 0, 0);
    } finally {
      await c.close();
    }
    assert.throws(() => new FirnClient({ endpoints: [] }), FirnError);
    assert.throws(() => new FirnClient({ endpoints: ["dns://x/y:1"] }), FirnError);
  });
});

test("nextSeq goes to the key's owner by the section map, and follows WRONG_NODE", async () => {
  await withNodes(2, async ([a, b]) => {
    const gen = (owner0: string, owner1: string) => [{
      name: "chats", kind: "seq", sections: 2,
      section_owners: [{ section: 0, address: owner0, serving: true }, { section: 1, address: owner1, serving: true }],
    }];
    a.generators = gen(a.addr, b.addr);
    b.generators = gen(a.addr, b.addr);
    let av = 100n, bv = 200n;
    a.handlers.NextSeq = (req) => {
      if (sectionOf(req.key, 2) !== 0) throw firnError(grpc.status.FAILED_PRECONDITION, "wrong node", "WRONG_NODE", undefined, { owner: b.addr });
      const f = av; av += BigInt(req.count); return { first: f.toString(), count: req.count };
    };
    b.handlers.NextSeq = (req) => {
      if (sectionOf(req.key, 2) !== 1) throw firnError(grpc.status.FAILED_PRECONDITION, "wrong node", "WRONG_NODE", undefined, { owner: a.addr });
      const f = bv; bv += BigInt(req.count); return { first: f.toString(), count: req.count };
    };
    // Keys of each section.
    const keys = ["chat:1", "chat:2", "chat:3", "chat:4", "x", "y"];
    const c = new FirnClient({ endpoints: [a.addr], generator: "chats", health: false });
    try {
      for (const k of keys) {
        const r = await c.nextSeq(k, 2, { deadlineMs: 3000 });
        assert.equal(r.count, 2);
        const s = sectionOf(Buffer.from(k), 2);
        assert.ok(s === 0 ? r.first >= 100n && r.first < 200n : r.first >= 200n, `${k} → ${r.first}`);
      }
      assert.equal(c.stats().seqRedirects, 0, "the map routed every key");
      // The map goes stale: the owners swap; WRONG_NODE is followed.
      a.generators = gen(b.addr, a.addr);
      a.handlers.NextSeq = (req) => {
        if (sectionOf(req.key, 2) !== 1) throw firnError(grpc.status.FAILED_PRECONDITION, "wrong node", "WRONG_NODE", undefined, { owner: b.addr });
        const f = av; av += 1n; return { first: f.toString(), count: req.count };
      };
      b.handlers.NextSeq = (req) => {
        if (sectionOf(req.key, 2) !== 0) throw firnError(grpc.status.FAILED_PRECONDITION, "wrong node", "WRONG_NODE", undefined, { owner: a.addr });
        const f = bv; bv += 1n; return { first: f.toString(), count: req.count };
      };
      for (const k of keys) await c.nextSeq(k, 1, { deadlineMs: 3000 });
      assert.ok(c.stats().seqRedirects > 0);
      // SECTION_MOVING with RetryInfo: retried until it serves.
      let moving = 2;
      b.handlers.CurrentSeq = () => {
        if (moving-- > 0) throw firnError(grpc.status.UNAVAILABLE, "moving", "SECTION_MOVING", 20);
        return { value: "300" };
      };
      a.handlers.CurrentSeq = b.handlers.CurrentSeq;
      assert.equal(await c.currentSeq("chat:1", { deadlineMs: 3000 }), 300n);
      // A wait past the deadline fails at once with the node's reason.
      b.handlers.CurrentSeq = () => { throw firnError(grpc.status.UNAVAILABLE, "moving", "SECTION_MOVING", 2000); };
      a.handlers.CurrentSeq = b.handlers.CurrentSeq;
      const e = await rejects(c.currentSeq("chat:1", { deadlineMs: 500 }));
      assert.equal(e.reason, "SECTION_MOVING");
      assert.ok(e.retryAfterMs !== undefined);
    } finally {
      await c.close();
    }
  });
});

test("dns:/// names: every address is an endpoint, through the lookup hook", async () => {
  await withNodes(1, async ([a]) => {
    const port = a.addr.split(":")[1];
    const c = new FirnClient({ endpoints: [`dns:///firn.test:${port}`], lookup: async (h) => (h === "firn.test" ? ["127.0.0.1"] : []), health: false });
    try {
      assert.equal(typeof (await c.next({ deadlineMs: 2000 })), "bigint");
    } finally {
      await c.close();
    }
  });
});

test("max age: a buffered ID older than maxAgeMs is not handed out", async () => {
  await withNodes(1, async ([a]) => {
    const c = new FirnClient({ endpoints: [a.addr], health: false, maxAgeMs: 20 });
    try {
      const first = await c.next();
      const fetches = a.calls.NextRange;
      await new Promise((r) => setTimeout(r, 60));
      const second = await c.next();
      assert.ok(a.calls.NextRange > fetches, "a stale buffer is refilled");
      assert.ok(second > first);
      assert.ok(c.stats().dropped > 0);
    } finally {
      await c.close();
    }
  });
});

test("a node without NextRange (UNIMPLEMENTED) is asked NextIDs", async () => {
  await withNodes(1, async ([a]) => {
    a.handlers.NextRange = () => { throw firnError(grpc.status.UNIMPLEMENTED, "unknown method"); };
    const c = new FirnClient({ endpoints: [a.addr], health: false });
    try {
      const ids = await c.nextN(50, { deadlineMs: 2000 });
      assert.equal(new Set(ids).size, 50);
      assert.ok((a.calls.NextIDs ?? 0) > 0);
    } finally {
      await c.close();
    }
  });
});

test("an aborted signal ends a waiting call (DEADLINE) and a direct fetch", async () => {
  await withNodes(1, async ([a]) => {
    a.handlers.NextRange = () => new Promise(() => {});
    const c = new FirnClient({ endpoints: [a.addr], health: false });
    try {
      const ac = new AbortController();
      const p1 = rejects(c.next({ signal: ac.signal }));
      const p2 = rejects(c.nextRange(1_000_000, { signal: ac.signal }));
      setTimeout(() => ac.abort(), 50);
      assert.equal((await p1).reason, "DEADLINE");
      assert.equal((await p2).reason, "DEADLINE");
    } finally {
      await c.close();
    }
  });
});

// As the Go client's TestSlowFirstAnswerWithinCallersDeadline: an endpoint
// whose first answer takes longer than callTimeoutMs (as a cold connection
// and TLS handshake on a loaded machine do) serves a caller whose deadline
// has room: until the endpoint has answered once, the round's last attempt
// is not bounded by callTimeoutMs. Once it has answered, an answer slower
// than callTimeoutMs fails the attempt as before.
for (const [name, call] of [
  ["nextN", (c: FirnClient) => c.nextN(5000, { deadlineMs: 3000 })],
  ["next", (c: FirnClient) => c.next({ deadlineMs: 3000 })],
] as const) {
  test(`a slow first answer within the caller's deadline (${name})`, async () => {
    await withNodes(1, async ([a]) => {
      a.delayMs = 700;
      const c = new FirnClient({ endpoints: [a.addr], callTimeoutMs: 300, maxAgeMs: 5000 });
      try {
        const t0 = performance.now();
        try {
          await call(c);
        } catch (e) {
          assert.fail(`first call, ${Math.round(performance.now() - t0)}ms after it began: ${e} (the endpoint's first answer takes 700ms, the caller allows 3s)`);
        }
        // Answered: the next fetch is bounded by callTimeoutMs again.
        const e = await rejects(c.nextN(1 << 20, { deadlineMs: 3000 }));
        assert.match(e.message, /no answer within/, `a 700ms answer after the first, callTimeoutMs 300: ${e.message}`);
      } finally {
        await c.close();
      }
    });
  });
}

test("IDs a nextN took before it failed are counted dropped, never handed out", async () => {
  await withNodes(1, async ([a]) => {
    let answers = 0;
    a.handlers.NextRange = (req: any) => {
      if (answers++ > 0) throw firnError(grpc.status.UNAVAILABLE, "not serving", "LEASE_LOST");
      const n = BigInt(req.count);
      const first = a.next;
      a.next += n;
      return { runs: [{ first: first.toString(), count: n.toString() }] };
    };
    const c = new FirnClient({ endpoints: [a.addr], health: false, maxAgeMs: 60000 });
    try {
      await c.next({ deadlineMs: 3000 });
      const fetched = Number(c.stats().fetchedIds);
      assert.ok(fetched > 1, `fetched ${fetched}`);
      const e = await rejects(c.nextN(1_000_000, { deadlineMs: 500 }));
      assert.equal(c.stats().dropped, fetched - 1, `after ${e.message}`);
    } finally {
      await c.close();
    }
  });
});

test("IDs of an earlier fetch of a nextRange that failed are counted dropped", async () => {
  await withNodes(1, async ([a]) => {
    // A nextRange above the node's max_range takes several NextRange calls;
    // the second is refused.
    a.generators = [{ name: "default", is_default: true, max_batch: 100000, max_range: "400", kind: "snowflake" }];
    let answers = 0;
    let fetched = 0n;
    a.handlers.NextRange = (req: any) => {
      if (answers++ > 0) throw firnError(grpc.status.UNAVAILABLE, "not serving: LEASE_LOST", "LEASE_LOST");
      const n = BigInt(req.count);
      const first = a.next;
      a.next += n;
      fetched += n;
      return { runs: [{ first: first.toString(), count: n.toString() }] };
    };
    const c = new FirnClient({ endpoints: [a.addr], health: false, maxAgeMs: 60000 });
    try {
      const e = await rejects(c.nextRange(1000, { deadlineMs: 500 }));
      assert.ok(e instanceof FirnError && e.reason === "LEASE_LOST", `not the node's refusal: ${e}`);
      assert.equal(fetched, 400n);
      assert.equal(c.stats().dropped, 400, "IDs taken for the failed call, never handed out");
    } finally {
      await c.close();
    }
  });
});

test("a nextN that waits takes again what went stale meanwhile, never handing it out", async () => {
  await withNodes(1, async ([a]) => {
    const range = (req: any) => {
      const n = BigInt(req.count);
      const first = a.next;
      a.next += n;
      return { runs: [{ first: first.toString(), count: n.toString() }] };
    };
    // The direct fetch of the rest (a large count) takes longer than maxAge.
    a.handlers.NextRange = (req: any) =>
      Number(req.count) >= 50_000 ? new Promise((r) => setTimeout(() => r(range(req)), 600)) : range(req);
    const c = new FirnClient({ endpoints: [a.addr], health: false, maxAgeMs: 300 });
    try {
      const first = await c.next({ deadlineMs: 3000 });
      const fetchedUpTo = a.next; // the first batch's IDs lie below
      const ids = await c.nextN(100_000, { deadlineMs: 10_000 });
      assert.equal(ids.length, 100_000);
      for (const id of ids) {
        assert.ok(!(id > first && id < fetchedUpTo), `ID ${id} of the batch fetched 600ms before (maxAge 300ms) was handed out`);
      }
      assert.ok(c.stats().dropped >= Number(fetchedUpTo - first) - 1, "the stale IDs are counted dropped");
    } finally {
      await c.close();
    }
  });
});

test("a caller refused because the endpoint asked to wait gets the standing refusal, not an older error", async () => {
  await withNodes(1, async ([a]) => {
    let mode = "lease";
    const range = (req: any) => {
      if (mode === "lease") throw firnError(grpc.status.UNAVAILABLE, "not serving: LEASE_LOST", "LEASE_LOST");
      if (mode === "shed") throw firnError(grpc.status.RESOURCE_EXHAUSTED, "shed", "OVERLOADED", 3000);
      const n = BigInt(req.count);
      const first = a.next;
      a.next += n;
      return { runs: [{ first: first.toString(), count: n.toString() }] };
    };
    a.handlers.NextRange = range;
    const c = new FirnClient({ endpoints: [a.addr], health: false, maxAgeMs: 100 });
    try {
      assert.equal((await rejects(c.next({ deadlineMs: 2000 }))).reason, "LEASE_LOST");
      mode = "serve";
      await c.next({ deadlineMs: 5000 });
      await new Promise((r) => setTimeout(r, 150)); // the buffer goes stale
      mode = "shed";
      assert.equal((await rejects(c.nextN(100_000, { deadlineMs: 2000 }))).reason, "OVERLOADED");
      const t0 = performance.now();
      const e = await rejects(c.next({ deadlineMs: 1000 }));
      assert.ok(performance.now() - t0 < 500, "refused at once");
      assert.equal(e.reason, "OVERLOADED", `refused with ${e.message}`);
      assert.ok(e.retryAfterMs !== undefined && e.retryAfterMs > 1000 && e.retryAfterMs <= 3000, `retryAfterMs ${e.retryAfterMs}`);
    } finally {
      await c.close();
    }
  });
});

/** What p settles to within ms: its value, its error, or "still waiting". */
function within<T>(p: Promise<T>, ms: number): Promise<T | unknown> {
  let t: NodeJS.Timeout | undefined;
  const timer = new Promise((r) => { t = setTimeout(() => r("still waiting"), ms); });
  return Promise.race([p.then((v) => v, (e) => e), timer]).finally(() => clearTimeout(t));
}

test("an aborted signal ends a sequence call that waits for another call's section map load", async () => {
  await withNodes(1, async ([a]) => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    a.handlers.Info = async () => { await held; return { node_name: "fake", generators: a.generators }; };
    // callTimeoutMs 300 s: the first call's load (its Info attempt) lasts until the test releases it.
    const c = new FirnClient({ endpoints: [a.addr], generator: "chats", health: false, callTimeoutMs: 300_000 });
    try {
      const first = c.nextSeq("chat:1").catch((e) => e);
      while ((a.calls.Info ?? 0) === 0) await new Promise((r) => setTimeout(r, 5));
      const ac = new AbortController();
      const second = c.nextSeq("chat:2", 1, { signal: ac.signal });
      ac.abort();
      const got = await within(second, 10_000);
      assert.ok(got instanceof FirnError, `the aborted call: ${String(got)} (the other call's map load is still under way)`);
      assert.equal(got.reason, "DEADLINE");
      release();
      await first;
    } finally {
      release();
      await c.close();
    }
  });
});

test("an aborted signal ends a direct fetch that waits for the first DNS resolution", async () => {
  await withNodes(1, async ([a]) => {
    const port = a.addr.split(":")[1];
    let release!: (v: string[]) => void;
    const held = new Promise<string[]>((r) => (release = r));
    const c = new FirnClient({ endpoints: [`dns:///firn.test:${port}`], lookup: () => held, health: false });
    try {
      const ac = new AbortController();
      const p = c.nextRange(1_000_000, { signal: ac.signal });
      ac.abort();
      const got = await within(p, 10_000);
      assert.ok(got instanceof FirnError, `the aborted call: ${String(got)} (the first resolution is still under way)`);
      assert.equal(got.reason, "DEADLINE");
    } finally {
      release(["127.0.0.1"]);
      await c.close();
    }
  });
});

test("a deadline of 0 ms (or less) has already passed: a call that would wait fails DEADLINE at once", async () => {
  await withNodes(1, async ([a]) => {
    a.handlers.NextRange = () => new Promise(() => {}); // no refill ever answers
    // callTimeoutMs 300 s: the refill's attempt does not end by itself during the test.
    const c = new FirnClient({ endpoints: [a.addr], health: false, callTimeoutMs: 300_000 });
    try {
      for (const deadlineMs of [0, -5]) {
        let t: NodeJS.Timeout | undefined;
        const timer = new Promise((r) => { t = setTimeout(() => r("still waiting"), 10_000); });
        const got = await Promise.race([c.next({ deadlineMs }).then((v) => v, (e) => e), timer]).finally(() => clearTimeout(t));
        assert.ok(got instanceof FirnError, `next({ deadlineMs: ${deadlineMs} }) with an empty buffer: ${String(got)}`);
        assert.equal(got.reason, "DEADLINE");
      }
    } finally {
      await c.close();
    }
  });
});

test("close ends a direct fetch and a sequence call that wait for the first DNS resolution (CLOSED)", async () => {
  await withNodes(1, async ([a]) => {
    const port = a.addr.split(":")[1];
    let release!: (v: string[]) => void;
    const held = new Promise<string[]>((r) => (release = r));
    const c = new FirnClient({ endpoints: [`dns:///firn.test:${port}`], lookup: () => held, health: false });
    const seqs = new FirnClient({ endpoints: [`dns:///firn.test:${port}`], generator: "chats", lookup: () => held, health: false });
    try {
      // No deadline: only close ends them while the lookup is under way.
      const p = within(c.nextRange(1_000_000), 10_000);
      const q = within(seqs.nextSeq("chat:1"), 10_000);
      await c.close();
      await seqs.close();
      for (const [name, call] of [["nextRange", p], ["nextSeq", q]] as [string, Promise<unknown>][]) {
        const got = await call;
        assert.ok(got instanceof FirnError, `${name} after close: ${String(got)} (the first resolution is still under way)`);
        assert.equal(got.reason, "CLOSED", `${name} after close: ${got.message}`);
      }
    } finally {
      release(["127.0.0.1"]);
      await c.close();
      await seqs.close();
    }
  });
});

// As the Go client's TestCloseCountsARefillInFlight: a refill whose answer
// arrives as close runs is never handed out; its IDs are counted dropped, as
// the buffered ones are (every ID fetched is handed out once or counted).
test("a refill answered as close runs is counted dropped", async () => {
  await withNodes(2, async ([a, b]) => {
    let c!: FirnClient;
    // close() begins after the refill's answer came back, before the client
    // delivers it: here from the log line the fetch writes as it switches
    // to b, between the two.
    c = new FirnClient({
      endpoints: [a.addr, b.addr], health: false, maxAgeMs: 60000,
      log: (m) => { if (m.startsWith("serving from")) void c.close(); },
    });
    try {
      const ids = await c.nextN(1000, { deadlineMs: 5000 }); // fetched directly from a: a is the active endpoint
      a.handlers.NextRange = () => { throw firnError(grpc.status.UNAVAILABLE, "not serving", "LEASE_LOST"); };
      const e = await rejects(c.next({ deadlineMs: 5000 })); // the refill fails over to b, whose answer meets close
      assert.equal(e.reason, "CLOSED");
      const st = c.stats();
      assert.ok(st.fetchedIds > BigInt(ids.length), `the refill fetched nothing (fetched ${st.fetchedIds})`);
      assert.equal(BigInt(ids.length + st.dropped), st.fetchedIds,
        `after close: fetched ${st.fetchedIds}, handed out ${ids.length}, dropped ${st.dropped}: ${st.fetchedIds - BigInt(ids.length + st.dropped)} IDs lost uncounted`);
    } finally {
      await c.close();
    }
  });
});

// As the Java and Python clients, and as the ID calls here (stopError): a
// sequence call whose owner refused with its reason as the caller's deadline
// ran out reports that refusal, not DEADLINE (README: DEADLINE is the
// deadline running out "with no node's answer in hand"). The client's
// clock is moved an hour ahead as the node refuses (the call's gRPC
// deadline, on the real clock, is a minute away): the refusal arrives after
// the caller's deadline, deterministically.
test("a sequence refusal that arrives after the caller's deadline keeps the node's reason", async () => {
  await withNodes(1, async ([a]) => {
    a.generators = [{ name: "chats", kind: "seq", sections: 1, section_owners: [{ section: 0, address: a.addr, serving: true }] }];
    const realNow = performance.now.bind(performance);
    let ahead = 0;
    performance.now = () => realNow() + ahead;
    const c = new FirnClient({ endpoints: [a.addr], generator: "chats", health: false, callTimeoutMs: 60_000 });
    try {
      assert.equal((await c.nextSeq("chat:1", 1, { deadlineMs: 60_000 })).first, 1n); // the map is read, the owner answered
      const refusals: [string, () => grpc.ServiceError][] = [
        ["PERMISSION_DENIED", () => firnError(grpc.status.PERMISSION_DENIED, "generator chats serves named callers only", "PERMISSION_DENIED")],
        ["SECTION_MOVING", () => firnError(grpc.status.UNAVAILABLE, "section 0 moving", "SECTION_MOVING", 200)],
      ];
      for (const [reason, refusal] of refusals) {
        a.handlers.NextSeq = () => { ahead += 3_600_000; throw refusal(); };
        const e = await rejects(c.nextSeq("chat:1", 1, { deadlineMs: 60_000 }));
        assert.equal(e.reason, reason, `a ${reason} refusal that arrived after the deadline: ${e.reason}: ${e.message}`);
      }
    } finally {
      performance.now = realNow;
      await c.close();
    }
  });
});

// A node that refuses without RetryInfo (LEASE_LOST): the refiller backs
// off after each failed round (50 ms, doubling to 1 s). A caller whose
// deadline ends before the next round may start gets no IDs in its time:
// it is refused at once with the last round's refusal, the node's reason,
// not left to its deadline to fail DEADLINE with no cause.
// With a long maxAge the refiller's tick is long too (maxAge / 8): the
// round after the backoff must start when the backoff ends, not at the
// next tick, or a caller whose deadline falls between the two waits it out.
for (const maxAgeMs of [undefined, 4000]) test(`a caller whose deadline ends within the refiller's backoff gets the last refusal at once (maxAgeMs ${maxAgeMs})`, async () => {
  await withNodes(1, async ([a]) => {
    a.handlers.NextRange = () => { throw firnError(grpc.status.UNAVAILABLE, "generator default not serving: lease lost", "LEASE_LOST"); };
    const c = new FirnClient({ endpoints: [a.addr], health: false, maxAgeMs });
    try {
      // Connected: the first round's refusal, with a patient deadline.
      assert.equal((await rejects(c.next({ deadlineMs: 10_000 }))).reason, "LEASE_LOST");
      const got: string[] = [];
      for (let i = 0; i < 10; i++) {
        const e = await rejects(c.next({ deadlineMs: 300 }));
        got.push(e.reason);
      }
      assert.deepEqual(got, Array(10).fill("LEASE_LOST"), `the reasons of 10 calls in a row: ${got.join(" ")}`);
    } finally {
      await c.close();
    }
  });
});

// As the Go client (TestSeqDeadlineKeepsLastRefusal) and the Python one: the
// owner refused SECTION_MOVING with a short RetryInfo, then did not answer
// the retry before the caller's deadline. The caller is told the owner's
// last refusal, not a bare DEADLINE: every refusal says why.
test("a sequence call whose retry the deadline cuts keeps the owner's last refusal", async () => {
  await withNodes(1, async ([a]) => {
    a.generators = [{ name: "chats", kind: "seq", sections: 1, section_owners: [{ section: 0, address: a.addr, serving: true }] }];
    let calls = 0;
    a.handlers.NextSeq = () => {
      calls++;
      if (calls === 1) throw firnError(grpc.status.UNAVAILABLE, "section 0 moves", "SECTION_MOVING", 20);
      return new Promise(() => {}); // no answer: the caller's deadline ends the attempt
    };
    const c = new FirnClient({ endpoints: [a.addr], generator: "chats", health: false, callTimeoutMs: 5000 });
    try {
      const e = await rejects(c.nextSeq("chat:42", 1, { deadlineMs: 500 }));
      assert.ok(calls >= 2, `owner asked ${calls} times, want the refusal retried`);
      assert.equal(e.reason, "SECTION_MOVING", `want the owner's last refusal, got ${e.reason}: ${e.message}`);
    } finally {
      await c.close();
    }
  });
});
