// Runs of consecutive IDs, and the buffer's batches.

/** count consecutive IDs: first, first+1, …, first+count-1. */
export interface Run {
  first: bigint;
  count: bigint;
}

/** Sorts runs by first and merges runs that touch. */
export function sortRuns(runs: Run[]): Run[] {
  runs.sort((a, b) => (a.first < b.first ? -1 : a.first > b.first ? 1 : 0));
  const out: Run[] = [];
  for (const r of runs) {
    const k = out.length - 1;
    if (k >= 0 && out[k].first + out[k].count === r.first && r.first !== 0n) {
      out[k] = { first: out[k].first, count: out[k].count + r.count };
      continue;
    }
    out.push({ first: r.first, count: r.count });
  }
  return out;
}

/** IDs (increasing or not) as runs of consecutive IDs, in their order. */
export function runsOf(ids: bigint[]): Run[] {
  const runs: Run[] = [];
  for (const id of ids) {
    const k = runs.length - 1;
    if (k >= 0 && id !== 0n && runs[k].first + runs[k].count === id) {
      runs[k].count++;
      continue;
    }
    runs.push({ first: id, count: 1n });
  }
  return runs;
}

export function countOf(runs: Run[]): bigint {
  let n = 0n;
  for (const r of runs) n += r.count;
  return n;
}

/**
 * A batch is one run in the buffer, and its claim counter pos: a take
 * claims the indexes [pos, pos+k) by moving pos, and each index below n
 * belongs to its taker alone. JavaScript runs one take at a time, so
 * claims never interleave; a batch is retired by pushing pos to n.
 */
export class Batch {
  /** The ID at index pos (kept beside pos: one bigint add per take). */
  nextId: bigint;
  pos = 0;
  retired = false;
  constructor(
    readonly first: bigint,
    readonly n: number,
    /** The index whose taker wakes the refiller; -1: none. */
    readonly half: number,
    /** The last monotonic reading (ms) at which its IDs may be handed out. */
    readonly expire: number,
    /** The endpoint it came from (an opaque tag). */
    readonly ep: unknown,
    /** The refills delivered when its refill was launched. */
    readonly born: number,
    /** The refills delivered when it was delivered. */
    readonly dseq: number,
  ) {
    this.nextId = first;
  }

  served(): number {
    return Math.min(this.pos, this.n);
  }

  remaining(): number {
    return this.n - this.served();
  }

  /** Claims up to need IDs: the run claimed, or undefined when none is left. */
  claim(need: number): Run | undefined {
    const start = this.pos;
    if (start >= this.n) return undefined;
    const hi = Math.min(start + need, this.n);
    this.pos = hi;
    const first = this.nextId;
    this.nextId = first + BigInt(hi - start);
    return { first, count: BigInt(hi - start) };
  }

  /** Retires the batch: no later take gets any of its IDs. Returns the IDs served. */
  retire(): number {
    const served = this.served();
    this.retired = true;
    this.pos = this.n;
    return served;
  }
}

/** An empty batch that never expires: the buffer's state with no IDs. */
export function emptyBatch(): Batch {
  const b = new Batch(0n, 0, -1, Number.POSITIVE_INFINITY, undefined, 0, 0);
  b.retired = true;
  return b;
}
