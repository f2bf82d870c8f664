"""FirnClient: firn's Python client.

It hides the network behind a local prefetch buffer that one refill
thread keeps filled from the endpoints, and fails over across them.

Thread safety: every public method of FirnClient may be called from any
number of threads at once. No ID reaches two callers: a buffered batch is
one run of consecutive IDs (first, size) and a claim counter
(itertools.count); a take is one call of the counter's __next__, which the
interpreter runs whole under the GIL, and an index below the batch's size
belongs to its taker alone. On an interpreter without a GIL the takes go
under a lock instead.
"""

import ipaddress
import itertools
import random
import socket
import sys
import threading
import time
from collections import namedtuple

import grpc

from . import errors as E
from ._proto import firn_client_rpc_pb2 as _rpc
from ._proto import firn_pb2 as pb
from ._proto import firn_pb2_grpc as pb_grpc
from .errors import FirnError
from .fnv import fnv1a64

_mono = time.monotonic
_SC = grpc.StatusCode

Run = namedtuple("Run", "first count")
Run.__doc__ = "count consecutive IDs: first, first+1, ..., first+count-1."
SeqRange = namedtuple("SeqRange", "first count")
SeqRange.__doc__ = "count values of a key's sequence: first ... first+count-1."

# Defaults and bounds of the options (seconds), as the Go client's.
DEFAULT_MAX_AGE = 0.1
DEFAULT_BATCH_WINDOW = 0.01
DEFAULT_MIN_BATCH = 16
DEFAULT_MAX_BATCH = 100_000
DEFAULT_CALL_TIMEOUT = 1.0
DEFAULT_RESOLVE_INTERVAL = 5.0
# Bounds, in place of a shorter call_timeout, the last attempt of a round
# at an endpoint (or section owner) that has not answered yet: its
# connection, TLS handshake and first calls are inside it, and a process
# starting on a loaded machine can take seconds over them. A caller's
# deadline still cuts it.
FIRST_ANSWER_TIMEOUT = 10.0
MAX_NEXT_N = 1 << 24
MAX_NEXT_RANGE = 1 << 24
MAX_SEQ_KEY = 256
MAX_SEQ_COUNT = 10000

_DOWN_FOR = 1.0  # an endpoint that failed is tried after the others this long
_MIN_ATTEMPT = 0.01
_MAX_RETRY_WAIT = 5.0
_LACKING_FOR = 30.0  # NOT_FOUND: behind the others this long
_RANGE_RETRY = 60.0  # NextRange UNIMPLEMENTED: NextIDs this long
_MAX_IN_FLIGHT = 1
_RATE_KEEP = 0.7
_MIN_BACKOFF = 0.05
_MAX_BACKOFF = 1.0
_MIN_RESOLVE_GAP = 1.0
_SEQ_REFRESH_EVERY = 3.0
_SEQ_RETRY_FOR = 10.0
_SEQ_BACKOFF_MIN = 0.025
_SEQ_BACKOFF_MAX = 1.0
_MAX_SEQ_HOPS = 3
_MAX_RECV = 16 << 20

_HEALTH_UNKNOWN, _HEALTH_SERVING, _HEALTH_NOT_SERVING = 0, 1, 2

_GIL = getattr(sys, "_is_gil_enabled", lambda: True)()


class TLS:
    """TLS for every endpoint: ca is the PEM file of the CA that signed the
    nodes' certificates (None: the system roots); cert and key, both or
    neither, the client's certificate for mTLS; server_name overrides the
    name checked in the node's certificate."""

    def __init__(self, ca=None, cert=None, key=None, server_name=None):
        if (cert is None) != (key is None):
            raise E.invalid_argument("TLS: cert and key go together")
        self.ca, self.cert, self.key, self.server_name = ca, cert, key, server_name

    def credentials(self):
        def read(p):
            if p is None:
                return None
            with open(p, "rb") as f:
                return f.read()
        return grpc.ssl_channel_credentials(root_certificates=read(self.ca),
                                            private_key=read(self.key),
                                            certificate_chain=read(self.cert))


class _Batch:
    __slots__ = ("first", "n", "size", "half", "expire", "it", "ep", "born", "dseq", "retired", "snap")

    def __init__(self, first, n, half, expire, ep=None, born=0, dseq=0):
        self.first, self.n, self.size, self.half, self.expire = first, n, n, half, expire
        self.it = itertools.count(0)
        self.ep, self.born, self.dseq, self.retired = ep, born, dseq, False
        # At retirement: the indexes claimed by then, counted served.
        self.snap = 0

    def claimed(self):
        """How many indexes takers claimed so far (read by the refiller)."""
        return int(repr(self.it)[6:-1])

    def served(self):
        return min(self.claimed(), self.size)


def _empty_batch():
    b = _Batch(0, 0, -1, float("inf"))
    b.retired = True
    return b


class _Endpoint:
    def __init__(self, addr, channel, generator):
        self.addr = addr
        self.channel = channel
        self.stub = pb_grpc.IDServiceStub(channel)
        self.check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=_rpc.HealthCheckRequest.SerializeToString,
            response_deserializer=_rpc.HealthCheckResponse.FromString)
        self.watch = channel.unary_stream(
            "/grpc.health.v1.Health/Watch",
            request_serializer=_rpc.HealthCheckRequest.SerializeToString,
            response_deserializer=_rpc.HealthCheckResponse.FromString)
        self.generator = generator
        self.status = _HEALTH_UNKNOWN
        self.heard = False
        self.no_health = False
        self.down_until = 0.0
        self.retry_until = 0.0
        self.probing = False
        self.refusal = None
        self.max_batch = 0  # 0: not learnt; -1: unknown
        self.max_range = 0
        self.no_range_until = 0.0
        self.stopped = threading.Event()
        self.watch_call = None
        self.answered = False  # an attempt at it succeeded (FIRST_ANSWER_TIMEOUT)

    def usable(self, now):
        return self.status != _HEALTH_NOT_SERVING and now >= self.down_until

    def stop(self):
        self.stopped.set()
        call = self.watch_call
        if call is not None:
            call.cancel()
        self.channel.close()


def _keeping_known(m, old):
    """The section map m read from a node, but where it names no owner of a
    section that old (of as many sections) names, old's: an owner a
    WRONG_NODE named (_seq_hint) is not forgotten by a map read from a node
    that does not know it."""
    if m is None or old is None or old[0] != m[0]:
        return m
    if not any(o == "" and k != "" for o, k in zip(m[1], old[1])):
        return m
    return (m[0], [k if o == "" else o for o, k in zip(m[1], old[1])])


class _OwnerConn:
    """A connection to a section owner that is not an endpoint."""
    __slots__ = ("channel", "stub", "answered")

    def __init__(self, channel):
        self.channel = channel
        self.stub = pb_grpc.IDServiceStub(channel)
        self.answered = False  # a call on it succeeded (FIRST_ANSWER_TIMEOUT)


class _Attempt:
    __slots__ = ("start", "sent", "last", "refill", "cut_at", "timer", "cause", "fut")

    def __init__(self, start, sent, last, refill):
        self.start, self.sent, self.last, self.refill = start, sent, last, refill
        self.cut_at = sent
        self.timer = None
        self.cause = None  # "cut" or "closed" once cancelled
        self.fut = None


def _parse_target(s):
    """(raw, host, port): host and port set for a dns:///host:port name."""
    if not s.startswith("dns:"):
        return (s, None, None)
    rest = s[4:]
    if not rest.startswith("///"):
        raise E.invalid_argument("endpoint %r: a DNS name is dns:///host:port" % s)
    hostport = rest[3:]
    host, sep, port = hostport.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port:
        raise E.invalid_argument("endpoint %r: a DNS name is dns:///host:port with both parts" % s)
    return (s, host, port)


def _dialable(addr):
    """Whether addr is host:port a client can dial: a node that listens on
    a wildcard address ("0.0.0.0:7300", "[::]:7300", ":7300") gives that as
    its address."""
    host, sep, port = addr.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port:
        return False
    try:
        return not ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return True  # a name


def _join_host_port(host, port):
    if ":" in host:
        return "[%s]:%s" % (host, port)
    return "%s:%s" % (host, port)


def _system_lookup(host):
    seen = []
    for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM):
        a = info[4][0]
        if a not in seen:
            seen.append(a)
    return seen


def _runs_of(ids):
    runs = []
    for i in ids:
        if runs and i != 0 and runs[-1][0] + runs[-1][1] == i:
            runs[-1][1] += 1
        else:
            runs.append([i, 1])
    return [Run(f, c) for f, c in runs]


def _sort_runs(runs):
    out = []
    for r in sorted(runs):
        if out and out[-1].first + out[-1].count == r.first and r.first != 0:
            out[-1] = Run(out[-1].first, out[-1].count + r.count)
        else:
            out.append(r)
    return out


def _runs_of_indexes(b, idx, n):
    """The runs of IDs of batch b at the claimed indexes idx (increasing)
    below n, its end as the take read it."""
    runs = []
    start = prev = None
    for i in idx:
        if i >= n:
            break
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            runs.append(Run(b.first + start, prev - start + 1))
        start = prev = i
    if start is not None:
        runs.append(Run(b.first + start, prev - start + 1))
    return runs


def _failover(err, caller_done):
    code = err.code
    if code == _SC.UNAVAILABLE:
        return True
    if code == _SC.RESOURCE_EXHAUSTED:
        return err.reason == "OVERLOADED"
    if code in (_SC.DEADLINE_EXCEEDED, _SC.CANCELLED):
        return not caller_done
    return False


def _counts_against(err, missed):
    code = err.code
    if code == _SC.UNAVAILABLE:
        return True
    if code == _SC.RESOURCE_EXHAUSTED:
        return err.reason == "OVERLOADED"
    if code in (_SC.DEADLINE_EXCEEDED, _SC.CANCELLED):
        return missed
    return False


def _share_end(now, deadline):
    return now + max((deadline - now) / 2, _MIN_ATTEMPT)


class FirnClient:
    """A client of firn nodes.

    FirnClient(endpoints, generator="", tls=None, call_timeout=1.0,
    max_age=None, lookup=None)

    endpoints: "host:port" targets, or "dns:///name:port" names each of
    whose addresses is an endpoint (resolved again every few seconds with
    lookup(host) -> [address, ...], default socket.getaddrinfo).
    generator: the generator's name ("" is the node's default); also the
    grpc.health.v1 service name checked on each endpoint. tls: a TLS, or
    None for plain text. call_timeout: seconds one attempt at one endpoint
    may take before the client fails over; until an endpoint has answered
    once, the round's last attempt at it gets 10 s if call_timeout is
    shorter (its connection, TLS handshake and first calls are inside it,
    and a process starting on a loaded machine can take seconds over them;
    the caller's timeout still cuts it). max_age: seconds a fetched
    batch's IDs may be handed out, from the start of the RPC that fetched
    them (default 0.1); older ones are dropped, never handed out.

    The client opens without contacting a node. It is safe to use from
    many threads at once; no ID reaches two callers. Use it as a context
    manager, or call close().
    """

    def __init__(self, endpoints, generator="", tls=None, call_timeout=None, max_age=None,
                 lookup=None, batch_window=DEFAULT_BATCH_WINDOW, min_batch=DEFAULT_MIN_BATCH,
                 max_batch=DEFAULT_MAX_BATCH, health=True, resolve_interval=DEFAULT_RESOLVE_INTERVAL):
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        endpoints = list(endpoints or [])
        if not endpoints:
            raise E.invalid_argument("endpoints: need at least 1")
        call_timeout = DEFAULT_CALL_TIMEOUT if not call_timeout else float(call_timeout)
        max_age = DEFAULT_MAX_AGE if not max_age else float(max_age)
        if not 0.01 <= call_timeout <= 300:
            raise E.invalid_argument("call_timeout %r outside [0.01, 300] s" % call_timeout)
        if not 0.008 <= max_age <= 3600:
            raise E.invalid_argument("max_age %r outside [0.008, 3600] s" % max_age)
        if not 0.0001 <= batch_window <= max_age / 2:
            raise E.invalid_argument("batch_window %r outside [0.0001 s, max_age/2]" % batch_window)
        if not 1 <= min_batch <= max_batch <= 1_000_000:
            raise E.invalid_argument("batch bounds need 1 <= min_batch <= max_batch <= 1000000")
        if resolve_interval < 0.1:
            raise E.invalid_argument("resolve_interval below 0.1 s")
        if tls is not None and not isinstance(tls, TLS):
            raise E.invalid_argument("tls must be a TLS or None")
        if not isinstance(generator, str):
            raise E.invalid_argument("generator must be a string")
        seen = set()
        targets = []
        for i, e in enumerate(endpoints):
            if not isinstance(e, str) or not e:
                raise E.invalid_argument("endpoints[%d] is empty" % i)
            if e in seen:
                raise E.invalid_argument("endpoints[%d] %r given twice" % (i, e))
            seen.add(e)
            targets.append(_parse_target(e))
        self._generator = generator
        self._call_timeout = call_timeout
        self._max_age = max_age
        self._batch_window = batch_window
        self._min_batch = min_batch
        self._max_batch = max_batch
        self._health = health
        self._lookup = lookup or _system_lookup
        self._resolve_interval = resolve_interval
        self._tick = max_age / 8
        self._targets = targets
        self._options = [("grpc.max_receive_message_length", _MAX_RECV),
                         ("grpc.keepalive_time_ms", 20000),
                         ("grpc.keepalive_timeout_ms", 5000)]
        self._creds = None
        if tls is not None:
            try:
                self._creds = tls.credentials()
            except OSError as e:
                raise E.invalid_argument("TLS: %s" % e)
            if tls.server_name:
                self._options.append(("grpc.ssl_target_name_override", tls.server_name))

        self._mu = threading.Lock()
        self._cond = threading.Condition(self._mu)  # waiting callers
        self._alock = threading.Lock()  # attempts' futures
        self._take_lock = None if _GIL else threading.Lock()
        self._empty = _empty_batch()
        self._cur = self._empty
        self._queue = []
        self._last = None
        self._fail_gen = 0
        self._fail_err = None  # the error of the last failed round (kept)
        self._last_err = None  # the same, until a refill succeeds
        self._retry_at = 0.0  # no refill before, after a failed round
        self._retired = 0
        self._waiters = 0
        self._starved = 0
        self._wait_deadlines = []
        self._attempts = set()  # refill attempts in flight
        self._direct = set()  # direct attempts in flight (ended by close)
        self._closed = False
        self._closed_ev = threading.Event()
        self._kick_ev = threading.Event()
        self._overloads = 0
        self._direct_above = min_batch
        self._active = None
        self._stats = {"fetches": 0, "fetched_ids": 0, "fetch_errors": 0, "failovers": 0,
                       "dropped": 0, "dropped_behind": 0, "seq_redirects": 0, "seq_retries": 0, "seq_refreshes": 0}
        # The refiller's state (guarded by _mu where fetch threads touch it).
        self._in_flight = 0
        self._in_flight_ids = 0
        self._delivered = 0
        self._rate = 0.0
        self._batch = min_batch
        self._backoff = 0.0
        self._launched = 0  # refills launched
        self._next_delivery = 0  # the next refill (by launch) to deliver
        self._pending = {}  # results that wait for an earlier refill's

        self._eps = []  # copy on write under _mu
        self._ep_lock = threading.Lock()
        self._resolved = threading.Event()
        self._resolve_ev = threading.Event()
        self._last_resolve_ask = 0.0
        self._threads = []
        # Sequences.
        self._seq_lock = threading.Lock()
        self._seq_map = None  # (sections, [owner address per section]); None: no map
        self._seq_loaded = False  # Info was read once
        self._seq_loaded_at = 0.0
        self._seq_refreshing = False
        self._seq_conns = {}

        self._resolve(lookups=False)
        if any(t[1] for t in targets):
            self._start_thread(self._resolver, "firn-resolver")
        else:
            self._resolved.set()
        self._start_thread(self._refill_loop, "firn-refill")

    # ----- lifecycle

    def _start_thread(self, fn, name, *args):
        t = threading.Thread(target=fn, args=args, name=name, daemon=True)
        self._threads.append(t)
        t.start()
        return t

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Closes the client: callers waiting for IDs and calls in flight end
        with FirnError(reason CLOSED), as does every later call. Buffered
        IDs are dropped, never handed out. Safe to call more than once."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            cur = self._cur
            self._retire_locked(cur)  # cut: its IDs not yet taken dropped
            self._cur = self._empty
            self._stats["dropped"] += sum(b.size for b in self._queue)
            self._queue = []
            self._cond.notify_all()
            attempts = list(self._attempts)
        self._closed_ev.set()
        self._resolved.set()  # a wait for the first resolution ends with the client
        self._kick_ev.set()
        self._resolve_ev.set()
        with self._alock:
            attempts += list(self._direct)
            for a in attempts:
                self._cancel_attempt_locked(a, "closed")
        with self._ep_lock:
            eps = self._eps
        for ep in eps:
            ep.stop()
        with self._seq_lock:
            conns, self._seq_conns = self._seq_conns, {}
        for oc in conns.values():
            oc.channel.close()
        me = threading.current_thread()
        end = _mono() + 2.0
        for t in list(self._threads):
            if t is not me:
                t.join(timeout=max(end - _mono(), 0.01))

    @property
    def closed(self):
        return self._closed

    def stats(self):
        """A snapshot of the client's counters (a dict)."""
        with self._mu:
            s = dict(self._stats)
            s["batch_size"] = self._batch
            s["rate"] = self._rate
            s["endpoint"] = self._active.addr if self._active else ""
        return s

    # ----- endpoints and DNS

    def _new_endpoint(self, addr):
        if self._creds is not None:
            ch = grpc.secure_channel(addr, self._creds, options=self._options)
        else:
            ch = grpc.insecure_channel(addr, options=self._options)
        ep = _Endpoint(addr, ch, self._generator)
        if self._health:
            self._start_thread(self._watch_health, "firn-health", ep)
        return ep

    def _resolve(self, lookups=True):
        want = []
        for raw, host, port in self._targets:
            if host is None:
                want.append(raw)
                continue
            if not lookups:
                continue
            try:
                addrs = list(self._lookup(host) or [])
            except Exception:
                addrs = []
            if not addrs:  # a failed lookup keeps what the name had
                with self._ep_lock:
                    want.extend(ep.addr for ep in self._eps
                                if getattr(ep, "target", None) == raw and ep.addr not in want)
                continue
            for a in addrs:
                hp = _join_host_port(a, port)
                if hp not in want:
                    want.append(hp)
                    self._target_of = getattr(self, "_target_of", {})
                    self._target_of[hp] = raw
        with self._ep_lock:
            if self._closed:
                return
            old = {ep.addr: ep for ep in self._eps}
            new = []
            for a in want:
                ep = old.pop(a, None)
                if ep is None:
                    ep = self._new_endpoint(a)
                    ep.target = getattr(self, "_target_of", {}).get(a, a)
                new.append(ep)
            self._eps = new
        for ep in old.values():
            ep.stop()

    def _resolver(self):
        self._resolve(lookups=True)
        self._resolved.set()
        while not self._closed:
            self._resolve_ev.wait(self._resolve_interval)
            self._resolve_ev.clear()
            if self._closed:
                return
            self._resolve(lookups=True)

    def _ask_resolve(self):
        if self._resolved.is_set() and any(t[1] for t in self._targets):
            now = _mono()
            if now - self._last_resolve_ask >= _MIN_RESOLVE_GAP:
                self._last_resolve_ask = now
                self._resolve_ev.set()

    def _await_resolved(self, deadline):
        """Waits for the first resolution of the DNS names: until the
        caller's deadline, or, for a refill (no deadline of its own: the
        callers waiting on it wait within theirs), until it is done or the
        client closes. A refill cut at the call timeout failed every
        waiting caller when the first resolution was slow, though their
        deadlines had room; the Go client's refill waits as this one does."""
        if self._resolved.is_set() or self._eps:
            # Endpoints to ask already (host:port ones beside the names):
            # no call waits for a name's first lookup (as the Go client).
            return
        if deadline is None:
            self._resolved.wait()  # set by the first resolution, and by close
            return
        self._resolved.wait(max(deadline - _mono(), 0))

    def _watch_health(self, ep):
        retry = 0.1
        req = _rpc.HealthCheckRequest(service=self._generator)
        while not ep.stopped.is_set() and not self._closed:
            try:
                call = ep.watch(req)
                ep.watch_call = call
                if ep.stopped.is_set():
                    call.cancel()
                for resp in call:
                    self._set_health(ep, resp.status)
                    retry = 0.1
            except grpc.RpcError as e:
                if ep.stopped.is_set() or self._closed:
                    return
                if e.code() == _SC.UNIMPLEMENTED:
                    ep.no_health = True
                    ep.heard = False
                    ep.status = _HEALTH_UNKNOWN
                    return
            except Exception:
                pass
            ep.heard = False
            ep.status = _HEALTH_UNKNOWN
            if ep.stopped.wait(retry):
                return
            retry = min(2 * retry, 5.0)

    @staticmethod
    def _health_of(s):
        if s == _rpc.HealthCheckResponse.SERVING:
            return _HEALTH_SERVING
        if s == _rpc.HealthCheckResponse.NOT_SERVING:
            return _HEALTH_NOT_SERVING
        return _HEALTH_UNKNOWN

    def _set_health(self, ep, s):
        h = self._health_of(s)
        ep.status = h
        ep.heard = h != _HEALTH_UNKNOWN

    # ----- attempts

    def _start_attempt(self, deadline, last, refill, fresh):
        """Starts an attempt; last: the round's last, refill: for the refill
        thread, fresh: at an endpoint that has not answered yet (the last
        attempt then gets FIRST_ANSWER_TIMEOUT if call_timeout is shorter).
        The caller's deadline cuts it."""
        now = _mono()
        timeout = self._call_timeout
        if fresh and last:
            timeout = max(timeout, FIRST_ANSWER_TIMEOUT)
        end = now + timeout
        if deadline is not None:
            if not last:
                end = min(end, _share_end(now, deadline))
            end = min(end, max(deadline, now + 0.001))
        a = _Attempt(now, end, last, refill)
        with self._mu:
            if refill:
                share = self._wait_share_locked(now)
                if share is not None and not last:
                    a.sent = a.cut_at = min(a.sent, share)
                self._attempts.add(a)
            else:
                self._direct.add(a)
            if self._closed:
                a.cause = "closed"
        return a

    def _end_attempt(self, a):
        with self._mu:
            if a.refill:
                self._attempts.discard(a)
            else:
                self._direct.discard(a)
            if a.timer is not None:
                a.timer.cancel()
        ran = _mono() - a.start
        cut = a.cause == "cut"
        missed = a.cause is None and _mono() >= a.sent - 0.001
        return ran, missed, cut

    def _cancel_attempt_locked(self, a, cause):
        if a.cause is None:
            a.cause = cause
        if a.fut is not None:
            a.fut.cancel()

    def _cut(self, a):
        with self._alock:
            self._cancel_attempt_locked(a, "cut")

    def _wait_share_locked(self, now):
        if self._waiters == 0 or len(self._wait_deadlines) < self._waiters:
            return None
        return max(_share_end(now, d) for d in self._wait_deadlines)

    def _cut_attempts_locked(self, t):
        now = _mono()
        for a in self._attempts:
            if a.last:
                continue
            at = max(t, a.start + _MIN_ATTEMPT)
            if at >= a.cut_at:
                continue
            a.cut_at = at
            if a.timer is not None:
                a.timer.cancel()
            a.timer = threading.Timer(max(at - now, 0), self._cut, (a,))
            a.timer.daemon = True
            a.timer.start()

    def _rpc(self, a, method, req, addr):
        """Calls method(req) under attempt a: its deadline sent, cancelled
        by a cut or close. Raises FirnError."""
        with self._alock:
            if a.cause is not None:
                raise E.rpc_like(_SC.CANCELLED, "attempt ended (%s)" % a.cause, addr)
            t = a.sent - _mono()
            if t <= 0:
                raise E.rpc_like(_SC.DEADLINE_EXCEEDED, "the attempt's time ran out", addr)
            if not a.refill:
                fut = None
            else:
                try:
                    fut = method.future(req, timeout=t)
                except ValueError as e:  # the channel was closed (close, or the endpoint left)
                    raise E.rpc_like(_SC.CANCELLED, "channel closed: %s" % e, addr)
                a.fut = fut
        if fut is None:
            # A direct call blocks in the gRPC core, without the GIL and
            # without a thread of gRPC's to wake it: the least latency
            # under load. Close ends it by closing the channels.
            try:
                return method(req, timeout=t)
            except ValueError as e:  # the channel was closed (close, or the endpoint left)
                raise E.rpc_like(_SC.CANCELLED, "channel closed: %s" % e, addr)
            except grpc.RpcError as e:
                if a.cause is not None:
                    raise E.rpc_like(_SC.CANCELLED, "attempt ended (%s)" % a.cause, addr)
                raise E.from_rpc_error(e, addr)
        try:
            return fut.result()
        except grpc.FutureCancelledError:
            raise E.rpc_like(_SC.CANCELLED, "attempt ended (%s)" % a.cause, addr)
        except grpc.RpcError as e:
            raise E.from_rpc_error(e, addr)
        finally:
            a.fut = None

    # ----- rounds

    def _order(self, now):
        with self._ep_lock:
            all_ = self._eps
        n = len(all_)
        first = 0
        act = self._active
        for i, ep in enumerate(all_):
            if ep is act:
                first = i
                break
        eps, later, probes = [], [], []
        wait = None
        with self._mu:
            for i in range(n):
                ep = all_[(first + i) % n]
                until = ep.retry_until
                if until > now or (until != 0 and ep.probing):
                    if wait is None or until < wait.retry_until:
                        wait = ep
                    continue
                if until != 0:
                    ep.probing = True
                    probes.append(ep)
                (eps if ep.usable(now) else later).append(ep)
        eps += later
        held = None
        if not eps and wait is not None:
            left = max(wait.retry_until - now, 0.01)
            r = wait.refusal
            if r is not None:
                held = r.with_(retry_after=left, message="every endpoint (%d) asked the client to wait; "
                               "none asked, the first free in %.0f ms: %s" % (n, left * 1000, r.message))
            else:
                held = FirnError(E.UNAVAILABLE, "every endpoint asked the client to wait",
                                 code=_SC.UNAVAILABLE, retry_after=left)
        return eps, probes, held

    def _held_until(self, now):
        with self._ep_lock:
            eps = self._eps
        if not eps:
            return None
        first = None
        for ep in eps:
            if ep.retry_until <= now:
                return None
            if first is None or ep.retry_until < first:
                first = ep.retry_until
        return first

    def _mark_down(self, ep, err):
        now = _mono()
        down = _DOWN_FOR
        if err.retry_after is not None:
            down = min(max(err.retry_after, 0.01), _MAX_RETRY_WAIT)
            ep.refusal = err
            ep.retry_until = now + down
        if err.reason == "OVERLOADED":
            with self._mu:
                self._overloads += 1
            self._kick_ev.set()
        ep.down_until = now + down

    def _each(self, deadline, refill, fn):
        """Runs fn(attempt, endpoint) on the endpoints in order until one
        answers (its value, endpoint) or the round fails (FirnError)."""
        if self._closed:
            raise E.closed_error()
        self._await_resolved(deadline)
        eps, probes, held = self._order(_mono())
        try:
            if held is not None:
                raise held
            last = None
            not_found = 0
            for i, ep in enumerate(eps):
                if i > 0:
                    with self._mu:
                        self._stats["failovers"] += 1
                a = self._start_attempt(deadline, i == len(eps) - 1, refill, not ep.answered)
                err = None
                try:
                    v = fn(a, ep)
                except FirnError as e:
                    err = e
                ran, missed, cut = self._end_attempt(a)
                if err is None:
                    ep.retry_until = 0.0
                    ep.answered = True
                    self._active = ep
                    return v, ep
                if self._closed:
                    raise E.closed_error()
                with self._mu:
                    self._stats["fetch_errors"] += 1
                caller_done = deadline is not None and _mono() >= deadline
                if caller_done:
                    if _counts_against(err, missed):
                        self._mark_down(ep, err)
                    if err.code in (_SC.DEADLINE_EXCEEDED, _SC.CANCELLED):
                        raise E.deadline_error("the caller's deadline ran out (last: %s)" % err)
                    raise err
                if (cut or missed) and err.reason == E.UNSPECIFIED:
                    # No answer in time. (A node that answered with its
                    # reason as the deadline passed is told as it said.)
                    err = err.with_(code=_SC.DEADLINE_EXCEEDED,
                                    message="no answer within %.0f ms: %s" % (ran * 1000, err.message))
                last = err
                if err.code == _SC.NOT_FOUND:
                    not_found += 1
                    ep.down_until = _mono() + _LACKING_FOR
                    continue
                if not _failover(err, caller_done):
                    raise err
                if _counts_against(err, missed):
                    self._mark_down(ep, err)
            if not_found and not_found == len(eps):
                raise last
            self._ask_resolve()
            if not eps:
                raise FirnError(E.UNAVAILABLE, "no endpoint: the DNS names given resolved to no address yet")
            reason = last.reason if last.reason != E.UNSPECIFIED else E.UNAVAILABLE
            raise last.with_(reason=reason, message="no endpoint serves (%d tried): endpoint %s: %s"
                            % (len(eps), last.endpoint, last.message))
        finally:
            if probes:
                with self._mu:
                    for p in probes:
                        p.probing = False

    # ----- fetching IDs

    def _fetch(self, count, deadline, refill):
        (runs, start), ep = self._each(deadline, refill, lambda a, ep: self._fetch_from(a, ep, count))
        with self._mu:
            self._stats["fetches"] += 1
            self._stats["fetched_ids"] += sum(r.count for r in runs)
        return runs, ep, start

    def _fetch_from(self, a, ep, count):
        if self._health and not ep.heard and not ep.no_health:
            self._check(a, ep)
        if ep.max_batch == 0:
            self._learn_bounds(a, ep)
        while True:
            now = _mono()
            use_range = now >= ep.no_range_until
            if use_range:
                bound = ep.max_range
            else:
                bound = ep.max_batch
                count = min(count, self._max_batch)
            if bound > 0:
                count = min(count, bound)
            try:
                if use_range:
                    resp = self._rpc(a, ep.stub.NextRange,
                                     pb.NextRangeRequest(generator=self._generator, count=count), ep.addr)
                    runs = []
                    left = count
                    for r in resp.runs:
                        k = min(r.count, left)
                        if k == 0:
                            continue
                        if r.first + k - 1 >= 1 << 64:
                            raise E.rpc_like(_SC.INTERNAL, "NextRange answered a run past the largest ID", ep.addr)
                        if runs and r.first <= runs[-1].first + runs[-1].count - 1:
                            raise E.rpc_like(_SC.INTERNAL, "NextRange answered runs out of order", ep.addr)
                        runs.append(Run(r.first, k))
                        left -= k
                        if left == 0:
                            break
                    if not runs:
                        raise E.rpc_like(_SC.INTERNAL, "NextRange answered no IDs", ep.addr)
                else:
                    resp = self._rpc(a, ep.stub.NextIDs,
                                     pb.NextIDsRequest(generator=self._generator, count=count), ep.addr)
                    if not resp.ids:
                        raise E.rpc_like(_SC.INTERNAL, "NextIDs answered no IDs", ep.addr)
                    runs = _runs_of(resp.ids)
                return runs, now
            except FirnError as err:
                if use_range and err.code == _SC.UNIMPLEMENTED:
                    ep.no_range_until = now + _RANGE_RETRY
                    continue
                too_large = err.code == _SC.INVALID_ARGUMENT or (
                    err.code == _SC.RESOURCE_EXHAUSTED and err.reason != "OVERLOADED")
                if too_large and count > 1:
                    if use_range:
                        ep.max_range = count // 2
                    else:
                        ep.max_batch = count // 2
                    continue
                raise

    def _check(self, a, ep):
        try:
            resp = self._rpc(a, ep.check, _rpc.HealthCheckRequest(service=self._generator), ep.addr)
        except FirnError as err:
            if err.code == _SC.UNIMPLEMENTED:
                ep.no_health = True
                return
            if err.code == _SC.NOT_FOUND:
                return
            raise
        h = self._health_of(resp.status)
        if not ep.heard:
            ep.status = h
        # NOT_SERVING goes on to the ID call, which a node that does not
        # serve refuses at once with its reason (CLOCK_ROLLBACK, DRAINING,
        # ...): the caller learns why, not only that.

    def _generator_info(self, info):
        for g in info.generators:
            if (self._generator == "" and g.is_default) or (self._generator != "" and g.name == self._generator):
                return g
        return None

    def _learn_bounds(self, a, ep):
        try:
            info = self._rpc(a, ep.stub.Info, pb.InfoRequest(), ep.addr)
        except FirnError as err:
            if _failover(err, False):
                raise
            if ep.max_batch == 0:
                ep.max_range, ep.max_batch = -1, -1
            return
        g = self._generator_info(info)
        mr = g.max_range if g is not None and g.max_range > 0 else -1
        mb = g.max_batch if g is not None and g.max_batch > 0 else -1
        if ep.max_batch == 0:
            ep.max_range, ep.max_batch = mr, mb

    # ----- the buffer

    def _kick(self):
        self._kick_ev.set()

    def next(self, timeout=None):
        """Returns one ID (an int). While the buffer holds fresh IDs it takes
        no lock; otherwise it waits for a refill, up to timeout seconds
        (None: until a whole failover round failed, or close). The IDs one
        thread gets increase while one endpoint serves. Raises FirnError:
        DEADLINE, CLOSED, or the failed round's error."""
        if self._take_lock is None:
            b = self._cur
            # Fresh first, then the claim: an index claimed is handed out
            # or counted served (it is never claimed from a stale batch).
            if _mono() <= b.expire:
                i = next(b.it)
                if i < b.n:
                    if i == b.half:
                        self._kick_ev.set()
                    return b.first + i
                if i < b.size:
                    self._lost(b, (i,))
        return self._next_slow(timeout)

    def _claim_one(self):
        b = self._cur
        if _mono() > b.expire:
            return None
        if self._take_lock is None:
            i = next(b.it)
        else:
            with self._take_lock:
                i = next(b.it)
        if i < b.n:
            if i == b.half:
                self._kick_ev.set()
            return b.first + i
        if i < b.size:
            self._lost(b, (i,))
        return None

    def _lost(self, b, idx):
        """Indexes a take claimed of batch b and did not hand out: its end
        was cut between the claim and the check (close, or the batch
        retired stale). Those its retirement counted served (claimed before
        it) are counted dropped instead; the others it counted dropped
        already. So every index is handed out or counted dropped, once,
        with no lock on the take."""
        with self._mu:
            k = sum(1 for i in idx if i < b.snap)
            self._retired -= k
            self._stats["dropped"] += k

    def _next_slow(self, timeout):
        deadline = None if timeout is None else _mono() + timeout
        while True:
            v = self._claim_one()
            if v is not None:
                return v
            self._wait_batch(deadline)

    def _take(self, need):
        """Claims up to need IDs of the current batch: (runs, the monotonic
        reading at which the batch expires), or ([], None)."""
        b = self._cur
        if _mono() > b.expire:
            return [], None
        # Never claim more indexes than the batch has left: a claim is a
        # list of them, built holding the GIL.
        need = min(need, b.n - b.claimed())
        if need <= 0:
            return [], None
        if self._take_lock is None:
            idx = list(itertools.islice(b.it, need))
        else:
            with self._take_lock:
                idx = list(itertools.islice(b.it, need))
        n = b.n
        lost = [i for i in idx if n <= i < b.size]
        if lost:
            self._lost(b, lost)
        if not idx or idx[0] >= n:
            return [], None
        if idx[0] <= b.half <= idx[-1]:
            self._kick_ev.set()
        return _runs_of_indexes(b, idx, n), b.expire

    def _install_locked(self):
        now = _mono()
        b = self._cur
        if b.expire >= now and b.claimed() < b.n:
            return True
        self._retire_locked(b)
        while self._queue:
            nb = self._queue.pop(0)
            if nb.expire < now or self._behind_locked(nb):
                self._stats["dropped"] += nb.size
                if nb.expire >= now:
                    self._stats["dropped_behind"] += nb.size
                continue
            self._cur = nb
            self._last = nb
            return True
        if b is not self._empty:
            self._cur = self._empty
        return False

    def _count_dropped(self, n):
        """Counts n IDs taken for a call whose caller never received them."""
        with self._mu:
            self._stats["dropped"] += n

    def _retire_locked(self, b):
        # The end is cut first: a take claiming after it hands nothing out
        # (no take of a stale or closed batch succeeds after), and the
        # snapshot after it counts every index claimed before it served —
        # a take that claimed one of those but checks the end after the
        # cut moves it to dropped (_lost).
        b.n = 0
        if b.retired:
            return
        b.retired = True
        served = b.served()
        b.snap = served
        self._retired += served
        self._stats["dropped"] += b.size - served

    def _behind_locked(self, nb):
        l = self._last
        return l is not None and nb.ep is l.ep and nb.born < l.dseq and nb.first < l.first

    def _enqueue_locked(self, nb):
        i = len(self._queue)
        for j in range(len(self._queue) - 1, -1, -1):
            q = self._queue[j]
            if q.ep is nb.ep:
                if q.first < nb.first:
                    break
                i = j
        self._queue.insert(i, nb)

    def _wait_batch(self, deadline):
        """Returns once the current batch may hold fresh IDs; raises the
        caller's deadline, CLOSED, or a failed round's error."""
        with self._mu:
            if self._closed:
                raise E.closed_error()
            if self._install_locked():
                return
            now = _mono()
            gen = self._fail_gen
            if (self._last_err is not None and self._retry_at > now and deadline is not None
                    and self._retry_at >= deadline):
                # No refill before the caller gives up: the last refusal now.
                err = self._last_err
                if err.retry_after is not None:
                    err = err.with_(retry_after=max(self._retry_at - now, 0.01))
                raise err
            self._waiters += 1
            self._starved += 1
            multi = len(self._eps) > 1 or any(t[1] for t in self._targets)
            if multi and deadline is not None:
                self._wait_deadlines.append(deadline)
            if multi:
                share = self._wait_share_locked(now)
                if share is not None:
                    self._cut_attempts_locked(share)
            self._kick_ev.set()
            try:
                while True:
                    if self._closed:
                        raise E.closed_error()
                    if self._install_locked():
                        return
                    if self._fail_gen != gen:
                        raise self._fail_err
                    if deadline is None:
                        self._cond.wait()
                    else:
                        left = deadline - _mono()
                        if left <= 0:
                            raise E.deadline_error("no IDs before the caller's deadline")
                        self._cond.wait(left)
            finally:
                self._waiters -= 1
                if multi and deadline is not None:
                    self._wait_deadlines.remove(deadline)

    # ----- the refiller

    def _refill_loop(self):
        last_mono = _mono()
        last_total = 0
        last_starved = 0
        last_overloads = 0
        ticking = True
        while True:
            wait = self._tick if ticking else None
            # After a failed round the next is due at _retry_at: wake then,
            # not at the tick after it (max_age / 8, up to minutes), so the
            # round runs when _wait_batch expects it to.
            retry_in = self._retry_at - _mono()
            if retry_in > 0 and (wait is None or retry_in < wait):
                wait = retry_in
            self._kick_ev.wait(wait)
            self._kick_ev.clear()
            if self._closed:
                return
            now = _mono()
            with self._mu:
                b = self._cur
                if b.expire < now and b is not self._empty:
                    self._install_locked()
                kept = []
                for q in self._queue:
                    if q.expire < now:
                        self._stats["dropped"] += q.size
                    else:
                        kept.append(q)
                self._queue = kept
                total = self._retired + (0 if self._cur.retired else self._cur.served())
                starved = self._starved
                buffered = self._buffered_locked(now)
                waiters = self._waiters
                overloads = self._overloads
            dt = now - last_mono
            if dt >= self._tick / 2:
                inst = (total - last_total) / dt
                rate = self._rate
                rate = inst if inst >= rate else _RATE_KEEP * rate + (1 - _RATE_KEEP) * inst
                if rate < 1e-3:
                    rate = 0.0
                last_mono, last_total = now, total
                size = rate * self._batch_window
                if starved != last_starved:
                    size = max(size, min(2.0 * self._batch, rate * self._max_age))
                last_starved = starved
                self._direct_above = int(min(max(size, self._min_batch), self._max_batch))
                if overloads != last_overloads:
                    last_overloads = overloads
                    size = min(size, self._batch / 2)
                with self._mu:
                    self._rate = rate
                    self._batch = int(min(max(size, self._min_batch), self._max_batch))
            elif overloads != last_overloads:
                # A node shed a request: ask for half as much, now.
                last_overloads = overloads
                with self._mu:
                    self._batch = max(self._batch // 2, self._min_batch)
            self._launch(now, buffered, waiters)
            with self._mu:
                ticking = (buffered > 0 or self._in_flight > 0 or self._waiters > 0
                           or self._rate * self._tick >= 1)

    def _buffered_locked(self, now):
        n = 0
        b = self._cur
        if b.expire >= now:
            n += max(b.n - b.served(), 0)
        for q in self._queue:
            if q.expire >= now:
                n += q.size
        return n

    def _launch(self, now, buffered, waiters):
        if now < self._retry_at:
            return
        with self._mu:
            proactive = self._rate * self._max_age >= self._batch
            while self._in_flight < _MAX_IN_FLIGHT:
                have = buffered + self._in_flight_ids
                if not (waiters > 0 and have == 0) and not (proactive and have < 2 * self._batch):
                    return
                self._in_flight += 1
                self._in_flight_ids += self._batch
                count, born = self._batch, self._delivered
                seqno = self._launched
                self._launched += 1
                self._start_thread(self._refill_fetch, "firn-fetch", count, born, seqno)

    def _refill_fetch(self, count, born, seqno):
        try:
            res = self._fetch(count, None, True)
            err = None
        except FirnError as e:
            res, err = None, e
        except Exception as e:  # a bug must not leave callers waiting
            res, err = None, FirnError(E.UNSPECIFIED, "refill failed: %r" % e)
        finally:
            try:
                self._threads.remove(threading.current_thread())
            except ValueError:
                pass
        with self._mu:
            # Results are delivered in the order their refills were
            # launched: two refills in flight to one node are served in
            # that order, and a thread that lost the GIL must not have its
            # lower IDs arrive behind the later refill's (they would be
            # dropped to keep each caller's IDs increasing).
            self._pending[seqno] = (count, born, res, err)
            while self._next_delivery in self._pending:
                self._deliver_locked(*self._pending.pop(self._next_delivery))
                self._next_delivery += 1
        self._kick_ev.set()

    def _deliver_locked(self, count, born, res, err):
        now = _mono()
        self._in_flight -= 1
        self._in_flight_ids -= count
        if self._closed:
            # A refill answered as close ran is never handed out: counted
            # dropped, as the buffered IDs are at close.
            if res is not None:
                self._stats["dropped"] += sum(r.count for r in res[0])
            return
        if err is not None:
            self._backoff = min(max(2 * self._backoff, _MIN_BACKOFF), _MAX_BACKOFF)
            self._retry_at = now + self._backoff
            until = self._held_until(now)
            if until is not None:
                self._retry_at = max(self._retry_at, until)
            self._fail_gen += 1
            self._fail_err = err
            self._last_err = err
        else:
            runs, ep, start = res
            self._backoff = 0.0
            self._last_err = None
            self._delivered += 1
            mid = sum(r.count for r in runs) // 2
            off = 0
            for r in runs:
                half = mid - off if off <= mid < off + r.count else -1
                off += r.count
                self._enqueue_locked(_Batch(r.first, r.count, half, start + self._max_age,
                                            ep, born, self._delivered))
            self._install_locked()
        if self._waiters:
            self._cond.notify_all()

    # ----- many IDs

    def _check_n(self, n, bound, what):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n > bound:
            raise E.invalid_argument("%s: n %r outside [1, %d]" % (what, n, bound))

    def _many(self, n, timeout):
        """n IDs for next_n and next_range, as runs. A run taken from the
        buffer was fresh when taken; should the call then wait (for a
        refill, or a direct fetch of the rest), a run whose batch expired
        meanwhile is dropped (counted) and taken again, so the freshness
        bound holds when the call returns. Runs fetched directly are handed
        out as the call returns."""
        deadline = None if timeout is None else _mono() + timeout
        out = []  # (run, expire): expire None for a run fetched for the call
        got = 0
        try:
            while True:
                waited = False
                while got < n:
                    if self._closed:
                        raise E.closed_error()
                    need = n - got
                    runs, expire = self._take(need)
                    if runs:
                        out.extend((r, expire) for r in runs)
                        got += sum(r.count for r in runs)
                        continue
                    waited = True
                    if need > self._direct_above:
                        while got < n:
                            runs, _, _ = self._fetch(n - got, deadline, False)
                            out.extend((r, None) for r in runs)
                            got += sum(r.count for r in runs)
                        continue
                    self._wait_batch(deadline)
                if not waited:
                    break
                now = _mono()
                stale = sum(r.count for r, e in out if e is not None and now > e)
                if stale:
                    out = [(r, e) for r, e in out if e is None or now <= e]
                    got -= stale
                    with self._mu:
                        self._stats["dropped"] += stale
                if got == n:
                    break
            if self._closed:
                raise E.closed_error()
        except BaseException:
            # The IDs taken for a call that fails are never handed out:
            # counted dropped, as buffered ones are at close.
            if got:
                with self._mu:
                    self._stats["dropped"] += got
            raise
        return [r for r, _ in out]

    def next_n(self, n, timeout=None):
        """Returns n distinct IDs (1 <= n <= 2**24), increasing: from the
        buffer while it holds them, the rest fetched directly when they are
        more than a batch. timeout bounds the call (seconds). Raises
        FirnError (INVALID_ARGUMENT for a bad n)."""
        self._check_n(n, MAX_NEXT_N, "next_n")
        ids = []
        for r in self._many(n, timeout):
            ids.extend(range(r.first, r.first + r.count))
        ids.sort()
        return ids

    def next_range(self, n, timeout=None):
        """Returns n distinct IDs (1 <= n <= 2**24) as increasing runs of
        consecutive IDs (Run(first, count)), their counts adding up to n.
        Raises FirnError as next_n."""
        self._check_n(n, MAX_NEXT_RANGE, "next_range")
        return _sort_runs(self._many(n, timeout))

    def info(self, timeout=None):
        """The Info (firn.v1.InfoResponse) of the first endpoint that answers."""
        deadline = None if timeout is None else _mono() + timeout
        v, _ = self._each(deadline, False, lambda a, ep: self._rpc(a, ep.stub.Info, pb.InfoRequest(), ep.addr))
        return v

    # ----- sequences

    @staticmethod
    def _key_bytes(key):
        if isinstance(key, str):
            key = key.encode("utf-8")
        if not isinstance(key, (bytes, bytearray)):
            raise E.invalid_argument("key must be bytes or str")
        key = bytes(key)
        if not 1 <= len(key) <= MAX_SEQ_KEY:
            raise E.invalid_argument("key is %d bytes: a key is 1 to %d bytes" % (len(key), MAX_SEQ_KEY))
        return key

    def next_seq(self, key, count=1, timeout=None):
        """Hands out count values (1 to 10000) of key's sequence in the
        client's generator (a sequence generator): SeqRange(first, count).
        Routed to the node owning the key's section (FNV-1a-64(key) mod
        sections, from Info's section map); a WRONG_NODE refusal is followed
        to the owner it names, a section that moves is asked again after its
        RetryInfo, until timeout (10 s without one). Nothing is buffered.
        Raises FirnError."""
        key = self._key_bytes(key)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_SEQ_COUNT:
            raise E.invalid_argument("count %r outside [1, %d]" % (count, MAX_SEQ_COUNT))
        req = pb.NextSeqRequest(generator=self._generator, key=key, count=count)

        def call(a, stub, addr):
            resp = self._rpc(a, stub.NextSeq, req, addr)
            if resp.count != count:
                raise E.rpc_like(_SC.INTERNAL, "NextSeq answered %d values, asked %d" % (resp.count, count), addr)
            return SeqRange(resp.first, resp.count)
        return self._seq_do(key, timeout, call)

    def current_seq(self, key, timeout=None):
        """A value at or above every value handed out for key, without
        handing one out. Routed and retried as next_seq."""
        key = self._key_bytes(key)
        req = pb.CurrentSeqRequest(generator=self._generator, key=key)
        return self._seq_do(key, timeout, lambda a, stub, addr: self._rpc(a, stub.CurrentSeq, req, addr).value)

    def _seq_load(self, deadline):
        with self._mu:
            self._stats["seq_refreshes"] += 1
        try:
            info = self.info(None if deadline is None else max(deadline - _mono(), 0.01))
        except FirnError:
            return False
        g = self._generator_info(info)
        m = None
        if g is not None and g.kind == "seq" and g.sections > 0:
            owners = [""] * g.sections
            for o in g.section_owners:
                if o.section < g.sections and _dialable(o.address):
                    owners[o.section] = o.address
            m = (g.sections, owners)
        gone = []
        with self._seq_lock:
            self._seq_map = _keeping_known(m, self._seq_map)
            self._seq_loaded = True
            self._seq_loaded_at = _mono()
            # Owners the map no longer names: their connections go (as the
            # Go and TypeScript clients); a call in flight on one is
            # retried, routed by the map.
            named = set(self._seq_map[1]) if self._seq_map is not None else set()
            for addr in [a for a in self._seq_conns if a not in named]:
                gone.append(self._seq_conns.pop(addr))
        for oc in gone:
            oc.channel.close()
        return True

    def _seq_refresh_bg(self):
        try:
            self._seq_load(_mono() + 2 * self._call_timeout)
        finally:
            with self._seq_lock:
                self._seq_refreshing = False
            try:
                self._threads.remove(threading.current_thread())
            except ValueError:
                pass

    def _seq_maybe_refresh(self, force=False):
        with self._seq_lock:
            if self._seq_refreshing or self._closed:
                return
            if not force and _mono() - self._seq_loaded_at < _SEQ_REFRESH_EVERY:
                return
            self._seq_refreshing = True
        self._start_thread(self._seq_refresh_bg, "firn-seqmap")

    def _seq_route(self, key, hint, any_n):
        if hint:
            return hint
        m = self._seq_map
        if m is not None:
            addr = m[1][fnv1a64(key) % m[0]]
            if addr:
                return addr
        with self._ep_lock:
            eps = list(self._eps)
        if not eps:
            return ""
        now = _mono()
        order = [e for e in eps if e.usable(now)] + [e for e in eps if not e.usable(now)]
        return order[any_n % len(order)].addr

    def _seq_owner(self, addr):
        """Where a sequence call to addr goes (.stub, .answered): the
        endpoint when addr is one, else a connection dialled on demand."""
        with self._ep_lock:
            for ep in self._eps:
                if ep.addr == addr:
                    return ep
        with self._seq_lock:
            if self._closed:
                raise E.closed_error()
            c = self._seq_conns.get(addr)
            if c is None:
                if self._creds is not None:
                    ch = grpc.secure_channel(addr, self._creds, options=self._options)
                else:
                    ch = grpc.insecure_channel(addr, options=self._options)
                c = _OwnerConn(ch)
                self._seq_conns[addr] = c
            return c

    def _seq_do(self, key, timeout, call):
        if self._closed:
            raise E.closed_error()
        start = _mono()
        deadline = None if timeout is None else start + timeout
        end = deadline if deadline is not None else start + _SEQ_RETRY_FOR
        if not self._seq_loaded:
            self._seq_load(end)
        else:
            self._seq_maybe_refresh()
        hint, hops, backoff, any_n = "", 0, 0.0, 0
        refused = None  # the last refusal a node answered this call with
        while True:
            addr = self._seq_route(key, hint, any_n)
            err = None
            if not addr:
                err = FirnError(E.UNAVAILABLE, "no endpoint", code=_SC.UNAVAILABLE)
            else:
                owner = self._seq_owner(addr)
                a = self._start_attempt(deadline, True, False, not owner.answered)
                try:
                    v = call(a, owner.stub, addr)
                except FirnError as e:
                    err = e
                self._end_attempt(a)
                if err is None:
                    owner.answered = True
                    if self._closed:
                        raise E.closed_error()
                    return v
            if self._closed:
                raise E.closed_error()
            if deadline is not None and _mono() >= deadline and err.code in (_SC.DEADLINE_EXCEEDED, _SC.CANCELLED):
                if refused is not None:
                    # The last attempt ran out with the caller's time; the
                    # node had answered the call before with its reason.
                    raise refused.with_(message="the caller's deadline ran out retrying: %s" % refused.message)
                raise E.deadline_error("the caller's deadline ran out (last: %s)" % err)
            if err.reason not in (E.UNSPECIFIED, "WRONG_NODE") and err.code not in (_SC.DEADLINE_EXCEEDED, _SC.CANCELLED):
                refused = err
            if err.reason == "WRONG_NODE":
                with self._mu:
                    self._stats["seq_redirects"] += 1
                self._seq_maybe_refresh(force=True)
                owner = err.metadata.get("owner", "")
                if not _dialable(owner):
                    raise err.with_(message="the section's owner gives an address a client cannot dial (%r): %s"
                                    % (owner, err.message))
                self._seq_hint(key, owner)
                hops += 1
                if hops <= _MAX_SEQ_HOPS and owner != addr:
                    hint = owner
                    continue
                nxt = "retry"
            elif err.code == _SC.UNAVAILABLE:
                nxt = "retry"
            elif err.code == _SC.RESOURCE_EXHAUSTED and err.reason == "OVERLOADED":
                nxt = "retry"
            elif err.code in (_SC.DEADLINE_EXCEEDED, _SC.CANCELLED) and (deadline is None or _mono() < deadline):
                nxt = "retry"
            else:
                raise err
            with self._mu:
                self._stats["seq_retries"] += 1
            self._seq_maybe_refresh(force=True)
            if not hint:
                m = self._seq_map
                if m is None or not m[1][fnv1a64(key) % m[0]]:
                    any_n += 1
            hint, hops = "", 0
            if err.retry_after is not None:
                wait = min(max(err.retry_after, 0.01), _MAX_RETRY_WAIT)
            else:
                if backoff == 0:
                    backoff = _SEQ_BACKOFF_MIN
                wait = backoff * 0.75 + random.uniform(0, backoff / 2)
                backoff = min(2 * backoff, _SEQ_BACKOFF_MAX)
            if _mono() + wait > end:
                reason = err.reason if err.reason != E.UNSPECIFIED else E.UNAVAILABLE
                raise err.with_(reason=reason, message="the section's owner cannot answer now, and the wait "
                                "it asks (%.0f ms) would pass the deadline: %s" % (wait * 1000, err.message))
            if self._closed_ev.wait(wait):
                raise E.closed_error()

    def _seq_hint(self, key, owner):
        with self._seq_lock:
            m = self._seq_map
            if m is None:
                return
            s = fnv1a64(key) % m[0]
            if m[1][s] == owner:
                return
            owners = list(m[1])
            owners[s] = owner
            self._seq_map = (m[0], owners)
