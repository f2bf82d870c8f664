"""A small benchmark of next(): `python3 -m firn_client.bench ENDPOINT
[--seconds S] [--threads N]`. It warms the buffer (the refill thread
sizes batches from the demand it measures), then counts the IDs next()
returns in S seconds from one thread and from N threads, and prints IDs/s.
Every ID is checked for repeats. Under 20 s with the defaults."""

import argparse
import sys
import threading
import time

from .client import FirnClient


def run(c, threads, seconds):
    stop = time.monotonic() + seconds
    counts = [0] * threads
    seen = [set() for _ in range(threads)]

    def loop(i):
        nxt = c.next
        n = 0
        s = seen[i]
        add = s.add
        while True:
            for _ in range(1000):
                add(nxt(5))
            n += 1000
            if time.monotonic() >= stop:
                break
        counts[i] = n

    ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.monotonic() - t0
    total = sum(counts)
    union = set().union(*seen)
    if len(union) != total:
        raise SystemExit("bench: %d IDs repeated" % (total - len(union)))
    return total / dt


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m firn_client.bench")
    ap.add_argument("endpoint", nargs="+")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--generator", default="")
    a = ap.parse_args(argv)
    with FirnClient(a.endpoint, generator=a.generator) as c:
        run(c, 1, 1.0)  # warm: the refiller learns the demand
        one = run(c, 1, a.seconds)
        many = run(c, a.threads, a.seconds)
        st = c.stats()
    print("next(), 1 thread:   %12.0f IDs/s" % one)
    print("next(), %d threads: %12.0f IDs/s (all threads together)" % (a.threads, many))
    print("batch size %d, fetches %d, dropped %d (stale), python %s"
          % (st["batch_size"], st["fetches"], st["dropped"], sys.version.split()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
