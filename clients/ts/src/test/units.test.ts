import { test } from "node:test";
import * as assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { fnv1a64, sectionOf } from "../fnv";
import { Batch, sortRuns, runsOf } from "../runs";
import { FirnError, decodeDetails, fromGrpc } from "../errors";
import { protos } from "../proto";
import { firnError } from "./fake";
import { keepingKnown } from "../client";

test("fnv1a64 matches the Go seq package's Hash", () => {
  // Printed by seq.Hash (seq/seq.go) for these keys, with Hash % 8.
  const vectors: [Uint8Array, bigint, number][] = [
    [Buffer.from(""), 14695981039346656037n, 5],
    [Buffer.from("a"), 12638187200555641996n, 4],
    [Buffer.from("chat:1"), 17504670429736252214n, 6],
    [Buffer.from("chat:2"), 17504669330224624003n, 3],
    [Uint8Array.of(0x00, 0xff, 0x10), 15475503120500903760n, 0],
    [Buffer.from("foobar"), 9625390261332436968n, 0],
  ];
  for (const [k, h, s] of vectors) {
    assert.equal(fnv1a64(k), h);
    assert.equal(sectionOf(k, 8), s);
  }
});

test("a batch's claims never overlap and stay exact above 2^53", () => {
  const first = (1n << 63n) + 12345n; // far above 2^53, near the top of uint64
  const b = new Batch(first, 1000, 500, Infinity, undefined, 0, 0);
  const seen = new Set<bigint>();
  let n = 0;
  for (;;) {
    const r = b.claim(7);
    if (!r) break;
    for (let i = 0n; i < r.count; i++) {
      const id = r.first + i;
      assert.ok(!seen.has(id));
      seen.add(id);
      n++;
    }
  }
  assert.equal(n, 1000);
  assert.ok(seen.has(first) && seen.has(first + 999n) && !seen.has(first + 1000n));
  assert.equal(b.claim(1), undefined);
  // 2^53 + 1 is not a JS number: the bigint path keeps it.
  const x = (1n << 53n) + 1n;
  assert.equal(String(x), "9007199254740993");
  assert.equal(BigInt("18446744073709551615"), (1n << 64n) - 1n);
});

test("retiring a batch leaves nothing to claim", () => {
  const b = new Batch(10n, 10, -1, Infinity, undefined, 0, 0);
  b.claim(3);
  assert.equal(b.retire(), 3);
  assert.equal(b.claim(1), undefined);
});

test("sortRuns sorts and merges touching runs; runsOf groups consecutive IDs", () => {
  const r = sortRuns([{ first: 20n, count: 5n }, { first: 10n, count: 10n }, { first: 40n, count: 1n }]);
  assert.deepEqual(r, [{ first: 10n, count: 15n }, { first: 40n, count: 1n }]);
  assert.deepEqual(runsOf([5n, 6n, 7n, 9n]), [{ first: 5n, count: 3n }, { first: 9n, count: 1n }]);
});

test("error details decode: ErrorInfo reason and metadata, RetryInfo delay", () => {
  const e = firnError(grpc.status.RESOURCE_EXHAUSTED, "overloaded", "OVERLOADED", 1250, { limit: "1000" });
  const d = decodeDetails(e.metadata.get("grpc-status-details-bin")[0] as Buffer);
  assert.equal(d.reason, "OVERLOADED");
  assert.equal(d.domain, "firn.v1.IDService");
  assert.equal(d.metadata.limit, "1000");
  assert.equal(d.retryAfterMs, 1250);
  const f = fromGrpc(e, "h:1");
  assert.ok(f instanceof FirnError);
  assert.equal(f.reason, "OVERLOADED");
  assert.equal(f.code, grpc.status.RESOURCE_EXHAUSTED);
  assert.equal(f.codeName, "RESOURCE_EXHAUSTED");
  assert.equal(f.retryAfterMs, 1250);
  assert.equal(f.endpoint, "h:1");
});

test("an error without details has no reason; another domain's reason is not firn's", () => {
  const plain = fromGrpc({ code: grpc.status.UNAVAILABLE, details: "down", metadata: new grpc.Metadata() });
  assert.equal(plain.reason, "ERROR_REASON_UNSPECIFIED");
  assert.equal(plain.retryAfterMs, undefined);
  const p = protos();
  const md = new grpc.Metadata();
  const info = p.errorInfo.encode(p.errorInfo.fromObject({ reason: "OVERLOADED", domain: "other" })).finish();
  md.set("grpc-status-details-bin", Buffer.from(p.status.encode(p.status.fromObject({ code: 8, details: [{ type_url: "type.googleapis.com/google.rpc.ErrorInfo", value: info }] })).finish()));
  assert.equal(fromGrpc({ code: 8, details: "x", metadata: md }).reason, "ERROR_REASON_UNSPECIFIED");
});

test("a section map read again keeps an owner it does not name", () => {
  // An owner learned from WRONG_NODE survives a map read from a node that
  // names no owner of that section; an owner the read names wins; a map of
  // another shape replaces the old one whole.
  const old = { sections: 3, owners: ["a:1", "b:1", ""] };
  const read = { sections: 3, owners: ["", "c:1", ""] };
  assert.deepEqual(keepingKnown(read, old).owners, ["a:1", "c:1", ""]);
  assert.deepEqual(read.owners, ["", "c:1", ""]);
  const other = { sections: 2, owners: ["", ""] };
  assert.equal(keepingKnown(other, old), other);
  assert.equal(keepingKnown(read, undefined), read);
});
