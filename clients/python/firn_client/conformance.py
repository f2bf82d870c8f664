"""The conformance runner: reads commands (one JSON object a line) on
standard input and answers each with one JSON line on standard output, as
test/conformance/README.md describes. Run it as
`python3 -m firn_client.conformance` (clients/python/runner does)."""

import base64
import json
import sys
import threading
import time
import traceback

from . import errors as E
from .client import TLS, FirnClient
from .errors import FirnError

_client = None


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def error_obj(at, err):
    if isinstance(err, FirnError):
        return {"at": at, "reason": err.reason, "code": err.code.name if err.code is not None else "",
                "retry_ms": None if err.retry_after is None else int(round(err.retry_after * 1000)),
                "message": str(err)}
    return {"at": at, "reason": E.UNSPECIFIED, "code": "", "retry_ms": None, "message": repr(err)}


def op_open(cmd):
    global _client
    if _client is not None:
        _client.close()
        _client = None
    tls = None
    t = cmd.get("tls")
    if t:
        tls = TLS(ca=t.get("ca") or None, cert=t.get("cert") or None, key=t.get("key") or None)
    lookup = None
    resolve = cmd.get("resolve")
    if resolve:
        table = {k: list(v) for k, v in resolve.items()}

        def lookup(host):
            if host in table:
                return table[host]
            from .client import _system_lookup
            return _system_lookup(host)
    ct = cmd.get("call_timeout_ms") or 0
    ma = cmd.get("max_age_ms") or 0
    _client = FirnClient(cmd.get("endpoints") or [], generator=cmd.get("generator") or "", tls=tls,
                         call_timeout=ct / 1000 if ct else None, max_age=ma / 1000 if ma else None,
                         lookup=lookup)
    return {"ok": True}


def _key(cmd):
    if "key_base64" in cmd and cmd["key_base64"] is not None:
        return base64.b64decode(cmd["key_base64"])
    return cmd.get("key", "").encode("utf-8")


def op_calls(cmd):
    c = _client
    if c is None:
        return {"ok": False, "error": "no open client"}
    op = cmd["op"]
    callers = int(cmd.get("callers") or 1)
    calls = cmd.get("calls")
    for_ms = cmd.get("for_ms")
    if calls is None and not for_ms:
        calls = 1
    deadline_ms = cmd.get("deadline_ms") or 0
    timeout = deadline_ms / 1000 if deadline_ms else None
    pause = (cmd.get("pause_ms") or 0) / 1000
    n = cmd.get("n")
    count = cmd.get("count") or 1
    key = _key(cmd) if op in ("next_seq", "current_seq") else None
    if op in ("next_n", "next_range") and not isinstance(n, int):
        return {"ok": False, "error": "%s needs n" % op}
    arrived = time.monotonic()
    stop_at = arrived + for_ms / 1000 if for_ms else None
    results = [None] * callers

    def caller(k):
        ids, runs, errs = [], [], []
        i = 0
        while True:
            if stop_at is not None:
                if time.monotonic() >= stop_at:
                    break
            elif i >= calls:
                break
            try:
                if op == "next":
                    ids.append(str(c.next(timeout)))
                elif op == "next_n":
                    ids.extend(str(x) for x in c.next_n(n, timeout))
                elif op == "next_range":
                    runs.extend([str(r.first), str(r.count)] for r in c.next_range(n, timeout))
                elif op == "next_seq":
                    r = c.next_seq(key, count, timeout)
                    runs.append([str(r.first), str(r.count)])
                elif op == "current_seq":
                    runs.append([str(c.current_seq(key, timeout)), "0"])
            except Exception as e:  # failures are data
                if not isinstance(e, FirnError):
                    log("caller %d call %d: %s" % (k, i, traceback.format_exc()))
                errs.append(error_obj(i, e))
            i += 1
            if pause:
                time.sleep(pause)
        results[k] = {"ids": ids, "runs": runs, "errors": errs}

    threads = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"ok": True, "callers": results}


def op_close_while_waiting(cmd):
    global _client
    c = _client
    if c is None:
        return {"ok": False, "error": "no open client"}
    callers = int(cmd.get("callers") or 1)
    deadline_ms = cmd.get("deadline_ms") or 0
    timeout = deadline_ms / 1000 if deadline_ms else None
    results = [None] * callers

    def caller(k):
        try:
            results[k] = {"ids": [str(c.next(timeout))], "errors": []}
        except Exception as e:
            results[k] = {"ids": [], "errors": [error_obj(0, e)]}

    threads = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(callers)]
    for t in threads:
        t.start()
    time.sleep((cmd.get("wait_ms") or 0) / 1000)
    t0 = time.monotonic()
    c.close()
    for t in threads:
        t.join()
    close_ms = int(round((time.monotonic() - t0) * 1000))
    return {"ok": True, "close_ms": close_ms, "callers": results}


def op_bench(cmd):
    """Throughput of next(): callers call it for warm_ms (not counted),
    then for for_ms, counting the IDs they got."""
    c = _client
    if c is None:
        return {"ok": False, "error": "no open client"}
    callers = int(cmd.get("callers") or 1)
    warm = (cmd.get("warm_ms") or 0) / 1000
    span = (cmd.get("for_ms") or 1000) / 1000
    t0 = time.monotonic()
    start, end = t0 + warm, t0 + warm + span
    counts = [0] * callers
    errs = [0] * callers

    def caller(k):
        nxt = c.next
        mono = time.monotonic
        while mono() < start:
            for _ in range(100):
                try:
                    nxt()
                except FirnError:
                    pass
        n = e = 0
        while True:
            for _ in range(100):
                try:
                    nxt()
                    n += 1
                except FirnError:
                    e += 1
            if mono() >= end:
                break
        counts[k], errs[k] = n, e

    threads = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"ok": True, "ids": sum(counts), "errors": sum(errs), "seconds": time.monotonic() - start}


def op_close(cmd):
    global _client
    if _client is not None:
        _client.close()
        _client = None
    return {"ok": True}


def op_stats(cmd):
    if _client is None:
        return {"ok": True}
    s = _client.stats()
    return {"ok": True, "failovers": s["failovers"], "seq_redirects": s["seq_redirects"]}


OPS = {"open": op_open, "next": op_calls, "next_n": op_calls, "next_range": op_calls,
       "next_seq": op_calls, "current_seq": op_calls, "close_while_waiting": op_close_while_waiting,
       "close": op_close, "stats": op_stats, "bench": op_bench}


def main():
    # The runner's callers call in tight loops (a refused call is answered
    # at once and the next follows): a short GIL switch interval lets the
    # thread whose RPC has returned take the GIL back soon, instead of
    # after the default 5 ms, which a 20 ms deadline cannot spare.
    sys.setswitchinterval(0.0005)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            cmd = json.loads(line)
            fn = OPS.get(cmd.get("op"))
            if fn is None:
                ans = {"ok": False, "error": "unknown op %r" % cmd.get("op")}
            else:
                ans = fn(cmd)
        except FirnError as e:
            ans = {"ok": False, "error": str(e)}
        except Exception as e:
            log(traceback.format_exc())
            ans = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(ans, separators=(",", ":")) + "\n")
        sys.stdout.flush()
    if _client is not None:
        _client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
