import threading
import time
import unittest

import grpc

from firn_client import FirnClient, FirnError, Run, fnv1a64
from firn_client import errors as E
from firn_client._proto import firn_pb2 as pb
from firn_client.client import _Batch, _dialable, _keeping_known, _runs_of, _runs_of_indexes, _sort_runs

from .fake import FakeNode, Refuse, status_details


class FNVTest(unittest.TestCase):
    def test_vectors(self):
        # The values of the node's seq.Hash (client/seq_test.go's vectors;
        # the first three are FNV-1a's published ones).
        for key, want, mod64, mod7 in [
            (b"", 0xcbf29ce484222325, 37, 2),
            (b"a", 0xaf63dc4c8601ec8c, 12, 5),
            (b"foobar", 0x85944171f73967e8, 40, 6),
            (b"chat:42", 0x7f9eba466480a665, 37, 3),
            (b"\x00\xff", 0x831c907b4ea2b60, 32, 6),
            (b"x" * 256, 0x295fa478294e7725, 37, 6),
        ]:
            h = fnv1a64(key)
            self.assertEqual(h, want, key)
            self.assertEqual(h % 64, mod64)
            self.assertEqual(h % 7, mod7)
        self.assertEqual(fnv1a64("chat:42"), 0x7f9eba466480a665)


class _FakeRpcError(grpc.RpcError):
    def __init__(self, code, details, trailers):
        self._c, self._d, self._t = code, details, trailers

    def code(self):
        return self._c

    def details(self):
        return self._d

    def trailing_metadata(self):
        return self._t


class SeqMapTest(unittest.TestCase):
    def test_keeping_known(self):
        # An owner learned from WRONG_NODE survives a map read from a node
        # that names no owner of that section; an owner the read names wins;
        # a map of another shape replaces the old one whole.
        old = (3, ["a:1", "b:1", ""])
        read = (3, ["", "c:1", ""])
        self.assertEqual(_keeping_known(read, old), (3, ["a:1", "c:1", ""]))
        self.assertEqual(read, (3, ["", "c:1", ""]))
        other = (2, ["", ""])
        self.assertIs(_keeping_known(other, old), other)
        self.assertIs(_keeping_known(read, None), read)
        self.assertIsNone(_keeping_known(None, old))


    def test_dialable(self):
        # A node bound to a wildcard address reports that as its address;
        # such an owner is left out of the map (calls go to the endpoints).
        for a in ("127.0.0.1:7300", "node-0.firn:7300", "[::1]:7300", "[2001:db8::1]:7300"):
            self.assertTrue(_dialable(a), a)
        for a in ("0.0.0.0:7300", "[::]:7300", ":7300", "127.0.0.1", "127.0.0.1:", ""):
            self.assertFalse(_dialable(a), a)


class ErrorsTest(unittest.TestCase):
    def test_decode(self):
        raw = status_details(grpc.StatusCode.RESOURCE_EXHAUSTED, "shed", "OVERLOADED", 0.25,
                             {"limit": "1000", "measured": "2000"})
        err = E.from_rpc_error(_FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "shed",
                                             (("grpc-status-details-bin", raw),)), "n1:7300")
        self.assertEqual(err.reason, "OVERLOADED")
        self.assertEqual(err.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertAlmostEqual(err.retry_after, 0.25)
        self.assertEqual(err.metadata["limit"], "1000")
        self.assertEqual(err.endpoint, "n1:7300")
        self.assertIn("OVERLOADED", str(err))

    def test_no_details(self):
        err = E.from_rpc_error(_FakeRpcError(grpc.StatusCode.UNAVAILABLE, "conn refused", ()))
        self.assertEqual(err.reason, E.UNSPECIFIED)
        self.assertIsNone(err.retry_after)

    def test_other_domain_and_garbage(self):
        from firn_client._proto import firn_client_rpc_pb2 as rpc
        from google.protobuf import any_pb2
        st = rpc.Status(code=14)
        st.details.append(any_pb2.Any(type_url="type.googleapis.com/google.rpc.ErrorInfo",
                                      value=rpc.ErrorInfo(reason="X", domain="other").SerializeToString()))
        self.assertEqual(E.decode_status_details(st.SerializeToString())[0], None)
        self.assertEqual(E.decode_status_details(b"\xff\xff\xff"), (None, {}, None))

    def test_reason_names(self):
        for r in ("WRONG_NODE", "SECTION_MOVING", "OVERLOADED", "CLOCK_ROLLBACK"):
            self.assertIn(r, E.NODE_REASONS)


class RunsTest(unittest.TestCase):
    def test_runs(self):
        self.assertEqual(_runs_of([5, 6, 7, 10, 11]), [Run(5, 3), Run(10, 2)])
        self.assertEqual(_sort_runs([Run(10, 2), Run(5, 5)]), [Run(5, 7)])
        b = _Batch(100, 10, -1, 1e18)
        self.assertEqual(_runs_of_indexes(b, [0, 1, 2, 5, 9, 10, 11], b.n), [Run(100, 3), Run(105, 1), Run(109, 1)])


class ClaimTest(unittest.TestCase):
    """The buffer's claims, without a network: batches put in by hand."""

    def test_failed_call_counts_dropped(self):
        # IDs next_n took from the buffer before it failed (no node to
        # refill from) are never handed out, and stats counts them.
        c = FirnClient(["127.0.0.1:1"], call_timeout=0.05)
        try:
            with c._mu:
                c._enqueue_locked(_Batch(1 << 62, 5, -1, time.monotonic() + 60))
                c._install_locked()
            with self.assertRaises(FirnError):
                c.next_n(13, 0.3)
            self.assertEqual(c.stats()["dropped"], 5)
        finally:
            c.close()

    def test_many_threads_no_id_twice(self):
        c = FirnClient(["127.0.0.1:1"], call_timeout=0.05)
        try:
            total = 200_000
            with c._mu:
                for k in range(20):
                    c._enqueue_locked(_Batch((1 << 62) + k * 20_000, 10_000, -1, time.monotonic() + 60))
                c._install_locked()
            got = [[] for _ in range(8)]

            def take(i):
                out = got[i]
                while True:
                    try:
                        out.append(c.next(0.05))
                    except FirnError:
                        return
                    if len(out) % 997 == 0:
                        out.extend(c.next_n(13, 0.05) if len(out) < 30_000 else [])

            ts = [threading.Thread(target=take, args=(i,)) for i in range(8)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            ids = [x for g in got for x in g]
            self.assertEqual(len(ids), len(set(ids)), "an ID reached two callers")
            # Every ID handed out once, or taken for a next_n that failed
            # as the buffer ran dry (counted dropped, never handed out).
            dropped = c.stats()["dropped"]
            self.assertLess(dropped, 13 * 8)
            self.assertEqual(len(ids) + dropped, total)
        finally:
            c.close()

    def test_close_counts_current_batch_dropped(self):
        # The current batch's IDs not yet taken are dropped at close, as the
        # queued batches' are.
        c = FirnClient(["127.0.0.1:1"], call_timeout=0.05)
        with c._mu:
            c._enqueue_locked(_Batch(1 << 62, 10, -1, time.monotonic() + 60))
            c._install_locked()
        self.assertEqual(c.next(0.1), 1 << 62)
        c.close()
        self.assertEqual(c.stats()["dropped"], 9)

    def _paused_claim(self, before):
        # A batch of 10 as the client's current one, whose counter pauses
        # the first claim once: before it takes the index (before=True:
        # after the freshness check) or after (before the check against
        # the batch's end). Returns the client, and the events claimed and
        # release.
        c = FirnClient(["127.0.0.1:1"], call_timeout=0.05)
        b = _Batch(1 << 62, 10, -1, time.monotonic() + 60)
        claimed, release = threading.Event(), threading.Event()

        class PausingCount:
            def __init__(self, inner):
                self.inner = inner

            def __iter__(self):
                return self

            def __next__(self):
                if before and not claimed.is_set():
                    claimed.set()
                    release.wait()
                i = next(self.inner)
                if not before and not claimed.is_set():
                    claimed.set()
                    release.wait()
                return i

            def __repr__(self):
                return repr(self.inner)  # claimed() reads it

        b.it = PausingCount(b.it)
        with c._mu:
            c._enqueue_locked(b)
            c._install_locked()
        return c, b, claimed, release

    def _taker(self, c, out):
        def take():
            try:
                out.append(c.next(5))
            except FirnError as e:
                out.append(e)
        t = threading.Thread(target=take)
        t.start()
        return t

    def test_close_during_a_claim_loses_no_id(self):
        # A next() whose claim of a buffered index lands as close() cuts the
        # batch: the ID is handed out, or counted dropped, never lost
        # between the two (close counted it served, the take did not hand
        # it out). The claim pauses between taking the index and checking
        # it against the batch's end; close runs to its end meanwhile.
        c, b, claimed, release = self._paused_claim(before=False)
        out = []
        t = self._taker(c, out)
        claimed.wait()
        c.close()
        release.set()
        t.join()
        handed = sum(1 for v in out if not isinstance(v, BaseException))
        self.assertEqual(handed + c.stats()["dropped"], 10,
                         "handed out %r, dropped %d" % (out, c.stats()["dropped"]))

    def test_stale_retire_during_a_claim_counts_each_id_once(self):
        # A next() that found the batch fresh and claims an index as the
        # batch goes stale and is retired: the ID is not handed out and
        # also counted dropped. The claim pauses after the freshness check,
        # before it takes the index; the retire runs meanwhile.
        c, b, claimed, release = self._paused_claim(before=True)
        try:
            out = []
            t = self._taker(c, out)
            claimed.wait()
            b.expire = time.monotonic() - 1  # stale now: the next install retires it
            with c._mu:
                c._install_locked()
            release.set()
            t.join()
            handed = sum(1 for v in out if not isinstance(v, BaseException))
            self.assertEqual(handed + c.stats()["dropped"], 10,
                             "handed out %r, dropped %d" % (out, c.stats()["dropped"]))
        finally:
            c.close()

    def test_stale_take_counts_dropped(self):
        # A take from a batch that went stale claims nothing: its IDs not
        # handed out are all counted dropped.
        c = FirnClient(["127.0.0.1:1"], call_timeout=0.05)
        try:
            c._tick = 100.0  # the refiller does not retire the batch by itself
            time.sleep(0.05)
            with c._mu:
                c._enqueue_locked(_Batch(1 << 62, 10, -1, time.monotonic() + 0.03))
                c._install_locked()
            self.assertEqual(c.next(0.1), 1 << 62)
            time.sleep(0.05)  # stale now
            with self.assertRaises(FirnError):
                c.next(0.05)
            self.assertEqual(c.stats()["dropped"], 9, "10 buffered, 1 handed out")
        finally:
            c.close()

    def test_take_claims_no_more_than_the_batch(self):
        # A large next_range takes what the batch holds without claiming an
        # index per ID asked for (a list of them, built holding the GIL).
        c = FirnClient(["127.0.0.1:1"], call_timeout=0.05)
        try:
            b = _Batch(1 << 62, 16, -1, time.monotonic() + 60)
            with c._mu:
                c._enqueue_locked(b)
                c._install_locked()
            self.assertEqual(c.next(0.1), 1 << 62)
            t0 = time.monotonic()
            runs, _ = c._take(1 << 24)
            self.assertEqual(runs, [Run((1 << 62) + 1, 15)])
            self.assertLessEqual(b.claimed(), 16, "indexes claimed beyond the batch")
            self.assertEqual(c._take(1 << 24), ([], None))
            self.assertLessEqual(b.claimed(), 16)
            self.assertLess(time.monotonic() - t0, 1.0)
        finally:
            c.close()

    def test_waiter_raises_the_failed_rounds_error(self):
        # A waiter told of a failed refill wakes after a later refill
        # succeeded and others took its IDs: it raises the failed round's
        # error (the later success cleared the last error).
        c = FirnClient(["127.0.0.1:1"], call_timeout=0.05)
        try:
            c._tick = 100.0
            c._retry_at = time.monotonic() + 100  # the refiller launches nothing itself
            time.sleep(0.05)
            out = []

            def waiter():
                try:
                    out.append(c.next(2.0))
                except BaseException as e:
                    out.append(e)
            t = threading.Thread(target=waiter)
            t.start()
            deadline = time.monotonic() + 2
            while c._waiters == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
            with c._mu:  # two deliveries before the waiter gets the lock back
                c._in_flight += 2
                c._in_flight_ids += 32
                c._deliver_locked(16, 0, None, FirnError("LEASE_LOST", "lease lost", code=grpc.StatusCode.UNAVAILABLE))
                c._deliver_locked(16, 0, ([Run(5000, 1)], None, time.monotonic()), None)
                self.assertEqual(next(c._cur.it), 0)  # another caller takes the one ID
            t.join()
            self.assertIsInstance(out[0], FirnError, repr(out[0]))
            self.assertEqual(out[0].reason, "LEASE_LOST")
        finally:
            c.close()

    def test_stale_batch_not_served(self):
        c = FirnClient(["127.0.0.1:1"], call_timeout=0.05, max_age=0.05)
        try:
            with c._mu:
                c._enqueue_locked(_Batch(1000, 10, -1, time.monotonic() - 0.001))
                self.assertFalse(c._install_locked())
            with self.assertRaises(FirnError):
                c.next(0.1)
            fresh = _Batch(5000, 3, -1, time.monotonic() + 0.03)
            with c._mu:
                c._enqueue_locked(fresh)
                c._install_locked()
            self.assertEqual(c.next(0.1), 5000)
            time.sleep(0.04)  # the batch outlived its max age
            with self.assertRaises(FirnError):
                v = c.next(0.1)
                self.fail("got %d from a stale batch" % v)
        finally:
            c.close()

    def test_bad_arguments(self):
        with self.assertRaises(FirnError) as cm:
            FirnClient([])
        self.assertEqual(cm.exception.reason, E.INVALID_ARGUMENT)
        with self.assertRaises(FirnError):
            FirnClient(["a:1", "a:1"])
        with self.assertRaises(FirnError):
            FirnClient(["dns://x/y:1"])
        with FirnClient(["127.0.0.1:1"]) as c:
            for bad in (0, -1, 1 << 25, "3"):
                with self.assertRaises(FirnError) as cm:
                    c.next_n(bad)
                self.assertEqual(cm.exception.reason, E.INVALID_ARGUMENT)
            with self.assertRaises(FirnError) as cm:
                c.next_seq(b"", 1)
            self.assertEqual(cm.exception.reason, E.INVALID_ARGUMENT)
            with self.assertRaises(FirnError):
                c.next_seq(b"x" * 257, 1)
            with self.assertRaises(FirnError):
                c.next_seq(b"k", 10001)


class NodeTest(unittest.TestCase):
    """Against fake nodes served in process."""

    def setUp(self):
        self.nodes = []

    def tearDown(self):
        for n in self.nodes:
            n.stop()

    def node(self, **kw):
        n = FakeNode(**kw)
        self.nodes.append(n)
        return n

    def test_next_threads(self):
        n = self.node()
        with FirnClient([n.addr]) as c:
            got = [[] for _ in range(6)]

            def run(i):
                for _ in range(3000):
                    got[i].append(c.next(5))

            ts = [threading.Thread(target=run, args=(i,)) for i in range(6)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            ids = [x for g in got for x in g]
            self.assertEqual(len(ids), len(set(ids)))
            for g in got:  # one node: each caller's IDs increase
                self.assertEqual(g, sorted(g))
            self.assertTrue(all(i >= 1 << 60 for i in ids))

    def test_next_n_and_range(self):
        n = self.node(run_len=1000)
        with FirnClient([n.addr]) as c:
            ids = c.next_n(2500, 5)
            self.assertEqual(len(ids), 2500)
            self.assertEqual(ids, sorted(set(ids)))
            runs = c.next_range(50_000, 5)
            self.assertEqual(sum(r.count for r in runs), 50_000)
            for a, b in zip(runs, runs[1:]):
                self.assertLess(a.first + a.count - 1, b.first)

    def test_range_unimplemented_falls_back(self):
        n = self.node()
        n.range_unimplemented = True
        with FirnClient([n.addr]) as c:
            self.assertEqual(len(set(c.next_n(100, 5))), 100)
            self.assertGreater(n.calls.get("NextIDs", 0), 0)

    def test_failover_and_reason(self):
        a, b = self.node(start=1 << 50), self.node(start=1 << 55)
        a.refuse = lambda m, r: Refuse(grpc.StatusCode.UNAVAILABLE, "draining", "DRAINING") if m != "Info" else None
        with FirnClient([a.addr, b.addr]) as c:
            v = c.next(5)
            self.assertGreaterEqual(v, 1 << 55)
            self.assertGreaterEqual(c.stats()["failovers"], 1)
        b.refuse = a.refuse
        with FirnClient([a.addr, b.addr]) as c:
            with self.assertRaises(FirnError) as cm:
                c.next(5)
            self.assertEqual(cm.exception.reason, "DRAINING")
            self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_retry_info_honoured(self):
        n = self.node()
        n.refuse = lambda m, r: (Refuse(grpc.StatusCode.RESOURCE_EXHAUSTED, "shed", "OVERLOADED", 0.3)
                                 if m in ("NextRange", "NextIDs") else None)
        with FirnClient([n.addr]) as c:
            errs = []
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.2:
                try:
                    c.next_n(1000, 0.05)
                except FirnError as e:
                    errs.append(e)
            self.assertTrue(errs)
            self.assertTrue(all(e.reason == "OVERLOADED" for e in errs))
            self.assertTrue(all(e.retry_after is not None for e in errs))
            # Asked to wait 0.3 s: asked once, however many calls.
            self.assertEqual(n.calls.get("NextRange", 0), 1)

    def test_hung_node_fails_over(self):
        a, b = self.node(start=1 << 50), self.node(start=1 << 55)
        a.hang.set()
        with FirnClient([a.addr, b.addr], call_timeout=0.3) as c:
            t0 = time.monotonic()
            v = c.next(2)
            self.assertGreaterEqual(v, 1 << 55)
            self.assertLess(time.monotonic() - t0, 1.5)

    def test_deadline(self):
        n = self.node()
        n.hang.set()
        with FirnClient([n.addr], call_timeout=5) as c:
            t0 = time.monotonic()
            with self.assertRaises(FirnError) as cm:
                c.next(0.2)
            self.assertEqual(cm.exception.reason, E.DEADLINE)
            self.assertLess(time.monotonic() - t0, 1)

    def test_close_ends_waiters(self):
        n = self.node()
        n.hang.set()
        c = FirnClient([n.addr], call_timeout=5)
        errs = []

        def wait():
            try:
                c.next()
            except FirnError as e:
                errs.append(e)

        ts = [threading.Thread(target=wait) for _ in range(4)]
        for t in ts:
            t.start()
        time.sleep(0.2)
        t0 = time.monotonic()
        c.close()
        for t in ts:
            t.join(2)
        self.assertLess(time.monotonic() - t0, 2)
        self.assertEqual([e.reason for e in errs], [E.CLOSED] * 4)
        with self.assertRaises(FirnError) as cm:
            c.next(1)
        self.assertEqual(cm.exception.reason, E.CLOSED)

    def test_close_races_calls(self):
        n = self.node(run_len=500)
        n.owners = [n.addr] * 4
        c = FirnClient([n.addr])
        seen, bad = [], []
        stop = threading.Event()

        def run(i):
            while not stop.is_set():
                try:
                    if i % 3 == 0:
                        seen.append(c.next(1))
                    elif i % 3 == 1:
                        seen.extend(c.next_n(3000, 1))
                    else:
                        seen.extend(r.first for r in c.next_range(5000, 1))
                except FirnError as e:
                    if e.reason != E.CLOSED:
                        bad.append(e)
                    if c.closed:
                        return
                except Exception as e:  # anything else is a bug
                    bad.append(e)
                    return

        ts = [threading.Thread(target=run, args=(i,)) for i in range(6)]
        for t in ts:
            t.start()
        time.sleep(0.3)
        c.close()
        stop.set()
        for t in ts:
            t.join(3)
            self.assertFalse(t.is_alive())
        self.assertEqual(bad, [])
        self.assertEqual(len(seen), len(set(seen)))

    def test_asyncio(self):
        import asyncio
        from firn_client.aio import AsyncFirnClient
        n = self.node()

        async def main():
            async with AsyncFirnClient([n.addr]) as c:
                async def task():
                    return [await c.next(5) for _ in range(500)]
                got = await asyncio.gather(*(task() for _ in range(8)))
                got.append(await c.next_n(100, 5))
                return [x for g in got for x in g]
        ids = asyncio.run(main())
        self.assertEqual(len(ids), 4100)
        self.assertEqual(len(set(ids)), 4100)

    def test_asyncio_cancelled_call_counts_dropped(self):
        # A call cancelled while it waits for a refill goes on in its
        # executor thread; the ID it then takes never reaches a caller and
        # is counted dropped.
        import asyncio
        from firn_client.aio import AsyncFirnClient
        n = self.node()
        n.delay = 0.3

        async def main():
            c = AsyncFirnClient([n.addr], health=False, max_age=60)
            try:
                with self.assertRaises(asyncio.TimeoutError):
                    await asyncio.wait_for(c.next(), 0.05)
                await asyncio.sleep(0.6)  # the refill arrives; the thread takes an ID
                cl = c.client
                st = cl.stats()
                with cl._mu:
                    buffered = cl._buffered_locked(time.monotonic())
                self.assertGreater(st["fetched_ids"], 0)
                self.assertEqual(st["fetched_ids"], st["dropped"] + buffered,
                                 "an ID taken for the cancelled call, neither handed out nor counted")
            finally:
                await c.close()
        asyncio.run(main())

    def test_refill_answered_as_close_runs_counted_dropped(self):
        # As the Go, TypeScript and Java clients: a refill whose answer came
        # back as close() runs is never handed out; its IDs are counted
        # dropped, as the buffered ones are (every ID fetched is handed out
        # once or counted). close() runs here after the refill's fetch
        # returned, before the client delivers its answer.
        n = self.node()
        c = FirnClient([n.addr], health=False, max_age=60)
        try:
            handed = len(c.next_n(10, 5))  # connected; the buffer filled
            orig = c._fetch

            def fetch(count, deadline, refill):
                res = orig(count, deadline, refill)
                if refill:
                    c.close()
                return res
            c._fetch = fetch
            delivered = threading.Event()
            orig_refill = c._refill_fetch

            def refill_fetch(*args):
                orig_refill(*args)
                delivered.set()
            c._refill_fetch = refill_fetch
            with c._mu:  # the buffer used up: the next call waits for a refill
                c._retire_locked(c._cur)
                for q in c._queue:
                    c._stats["dropped"] += q.size
                c._queue = []
            with self.assertRaises(FirnError) as cm:
                c.next(5)
            self.assertEqual(cm.exception.reason, "CLOSED")
            self.assertTrue(delivered.wait(10), "the refill never delivered its answer")
            st = c.stats()
            self.assertGreater(st["fetched_ids"], handed)
            self.assertEqual(st["fetched_ids"], handed + st["dropped"],
                             "fetched %d, handed out %d, dropped %d: IDs lost uncounted"
                             % (st["fetched_ids"], handed, st["dropped"]))
        finally:
            c.close()

    def test_asyncio_deadline_counts_from_the_call(self):
        # An awaited call runs in the event loop's executor: one queued
        # behind calls that hold its threads (here the one thread, held by
        # a sequence call at a hung owner) ends at its own deadline with
        # DEADLINE, not its timeout counted from when a thread took it.
        import asyncio
        from concurrent.futures import ThreadPoolExecutor
        from firn_client.aio import AsyncFirnClient
        n = self.node()
        n.owners = [n.addr] * 4

        async def main():
            loop = asyncio.get_running_loop()
            ex = ThreadPoolExecutor(max_workers=1)
            loop.set_default_executor(ex)
            c = AsyncFirnClient([n.addr], generator="chats", health=False)
            try:
                self.assertEqual((await c.next_seq("k", 1, 30)).first, 1)  # the map is read
                n.hang.set()
                held = asyncio.ensure_future(c.next_seq("k", 1, 30))
                await asyncio.sleep(0.1)  # the sequence call holds the executor's thread
                for call in (lambda: c.next_seq("j", 1, 0.2), lambda: c.next(0.2),
                             lambda: c.next_n(5, 0.2), lambda: c.current_seq("j", 0.2)):
                    t = asyncio.ensure_future(call())
                    done, _ = await asyncio.wait({t}, timeout=10)
                    self.assertIn(t, done, "a call with a 0.2 s timeout still waits after 10 s: "
                                  "its timeout did not start until a thread took it")
                    self.assertFalse(held.done())
                    with self.assertRaises(FirnError) as cm:
                        t.result()
                    self.assertEqual(cm.exception.reason, "DEADLINE")
                n.hang.clear()
                self.assertEqual((await held).first, 2)
            finally:
                n.hang.clear()
                await c.close()
                ex.shutdown(wait=False)
        asyncio.run(main())

    def test_asyncio_close_ends_calls_holding_the_executor(self):
        # close() ends the calls in flight (CLOSED) also when they hold every
        # thread of the event loop's executor: it does not queue behind them.
        import asyncio
        from concurrent.futures import ThreadPoolExecutor
        from firn_client.aio import AsyncFirnClient
        n = self.node()
        n.owners = [n.addr] * 4

        async def main():
            loop = asyncio.get_running_loop()
            ex = ThreadPoolExecutor(max_workers=1)
            loop.set_default_executor(ex)
            c = AsyncFirnClient([n.addr], generator="chats", health=False)
            try:
                self.assertEqual((await c.next_seq("k", 1, 30)).first, 1)  # the map is read
                n.hang.set()
                held = asyncio.ensure_future(c.next_seq("k", 1, 30))
                await asyncio.sleep(0.1)  # the sequence call holds the executor's thread
                closing = asyncio.ensure_future(c.close())
                done, _ = await asyncio.wait({closing}, timeout=10)
                self.assertIn(closing, done, "close() still waits after 10 s, queued behind the call it should end")
                with self.assertRaises(FirnError) as cm:
                    await held
                self.assertEqual(cm.exception.reason, "CLOSED")
            finally:
                n.hang.clear()
                await c.close()
                ex.shutdown(wait=False)
        asyncio.run(main())

    def test_split_call_takes_again_what_went_stale(self):
        # next_n takes the buffer's IDs first, then fetches the rest
        # directly; when that fetch outlasts max_age, what it took from the
        # buffer went stale meanwhile: dropped (counted) and taken again.
        n = self.node()

        def slow_big(name, req):
            if name == "NextRange" and req.count >= 50_000:
                time.sleep(0.6)
            return None
        with FirnClient([n.addr], health=False, max_age=0.3) as c:
            first = c.next(5)
            fetched_up_to = n.next_id  # the first batch's IDs lie below
            n.refuse = slow_big
            ids = c.next_n(100_000, 10)
            self.assertEqual(len(ids), 100_000)
            stale = [i for i in ids if first < i < fetched_up_to]
            self.assertEqual(stale, [], "IDs of the batch fetched 600 ms before (max age 300 ms) handed out")
            self.assertGreaterEqual(c.stats()["dropped"], fetched_up_to - first - 1)

    def test_partial_direct_fetch_counted_dropped(self):
        # A next_range above the node's max_range is fetched in several
        # calls; when a later one fails, the IDs of the earlier ones are
        # counted dropped.
        n = self.node()
        n.refuse = lambda name, req: (Refuse(grpc.StatusCode.UNAVAILABLE, "lease lost", "LEASE_LOST")
                                      if name == "NextRange" and n.calls["NextRange"] > 1 else None)
        with FirnClient([n.addr], health=False) as c:
            with self.assertRaises(FirnError) as cm:
                c.next_range(1 << 21, 2)
            self.assertEqual(cm.exception.reason, "LEASE_LOST")
            self.assertEqual(c.stats()["dropped"], 1 << 20)

    def test_refused_at_once_within_the_refill_backoff(self):
        # After a failed refill round the refiller waits before the next
        # (50 ms, doubling to 1 s) when the node sent no RetryInfo
        # (LEASE_LOST). A caller whose deadline ends before that next round
        # gets no refill in its time: it is refused at once with the last
        # round's refusal, the node's reason in it, not left to end DEADLINE.
        # With a max_age of 4 s the refiller's tick is 500 ms: the round
        # after the backoff must still run when the backoff ends, not at the
        # next tick, past the caller's deadline.
        n = self.node()
        n.refuse = lambda name, req: (Refuse(grpc.StatusCode.UNAVAILABLE, "lease lost (fake)", "LEASE_LOST")
                                      if name in ("NextRange", "NextIDs") else None)
        for max_age in (None, 4.0):
            with FirnClient([n.addr], health=False, max_age=max_age) as c:
                # The first round's refusal, with a patient deadline.
                with self.assertRaises(FirnError) as cm:
                    c.next(10)
                self.assertEqual(cm.exception.reason, "LEASE_LOST")
                got = []
                for _ in range(10):
                    with self.assertRaises(FirnError) as cm:
                        c.next(0.3)
                    got.append(cm.exception.reason)
                self.assertEqual(got, ["LEASE_LOST"] * 10,
                                 "max_age %s: the reasons of 10 calls in a row: %s" % (max_age, " ".join(got)))

    def test_overloaded_halves_batch(self):
        n = self.node()
        with FirnClient([n.addr]) as c:
            with c._mu:
                c._batch = 4000
            c._mark_down(c._eps[0], FirnError("OVERLOADED", "shed", code=grpc.StatusCode.RESOURCE_EXHAUSTED))
            time.sleep(0.1)
            self.assertLessEqual(c.stats()["batch_size"], 2000)

    def test_slow_first_resolution(self):
        # The names' first answer comes after the call timeout: the refill
        # that serves next() waits for it, and the caller, whose deadline
        # has room, gets its ID.
        a = self.node(start=1)
        asked = []

        def lookup(host):
            asked.append(host)
            if len(asked) == 1:
                time.sleep(0.8)
            return ["127.0.0.1"]
        with FirnClient(["dns:///firn.test:%d" % a.port], lookup=lookup, call_timeout=0.3) as c:
            self.assertGreaterEqual(c.next(3), 1)

    def test_fixed_endpoint_serves_while_a_name_is_first_resolved(self):
        # Endpoints given as host:port serve at once; a DNS name beside them
        # whose first lookup hangs holds up no call (as the Go client: a
        # call waits for the first resolution only while there is no
        # endpoint at all).
        a = self.node(start=1 << 40)
        release = threading.Event()

        def lookup(host):
            release.wait(30)
            return ["127.0.0.1"]
        try:
            with FirnClient([a.addr, "dns:///slow.test:1"], lookup=lookup, health=False) as c:
                try:
                    self.assertGreaterEqual(c.next(5), 1 << 40)
                    self.assertEqual(len(c.next_n(5000, 5)), 5000)
                except FirnError as e:
                    self.fail("%s: %s, though endpoint %s serves (the name's first lookup has not answered)"
                              % (e.reason, e, a.addr))
                finally:
                    release.set()
        finally:
            release.set()

    def test_slow_first_answer_within_callers_deadline(self):
        # An endpoint whose first answer takes longer than call_timeout (as
        # a cold connection and TLS handshake on a loaded machine do)
        # serves a caller whose deadline has room: until the endpoint has
        # answered once, the round's last attempt is not bounded by
        # call_timeout. Once it has answered, an answer slower than
        # call_timeout fails the attempt as before.
        for name, first in [("next_n", lambda c: c.next_n(5000, 3)), ("next", lambda c: c.next(3))]:
            with self.subTest(name):
                n = self.node(start=1 << 40)
                n.delay = 0.7
                with FirnClient([n.addr], call_timeout=0.3, max_age=5) as c:
                    t0 = time.monotonic()
                    try:
                        first(c)
                    except FirnError as e:
                        self.fail("first call, %.0f ms after it began: %s (the endpoint's first answer "
                                  "takes 700 ms, the caller allows 3 s)" % ((time.monotonic() - t0) * 1000, e))
                    # Answered: the next fetch is bounded by call_timeout again.
                    with self.assertRaises(FirnError) as cm:
                        c.next_n(1 << 20, 3)
                    self.assertIn("no answer within", str(cm.exception))

    def test_dns_name(self):
        a = self.node(start=1 << 50)
        b = self.node(start=1 << 55, host="127.0.0.2", port=a.port)
        answer = [["127.0.0.1"]]
        asked = []

        def lookup(host):
            asked.append(host)
            return answer[0]
        with FirnClient(["dns:///firn.test:%d" % a.port], lookup=lookup, resolve_interval=0.1) as c:
            self.assertLess(c.next(5), 1 << 55)
            self.assertEqual(asked[0], "firn.test")
            answer[0] = ["127.0.0.2"]  # the name moves: the client follows
            t0 = time.monotonic()
            while time.monotonic() - t0 < 3:
                if c.next_n(100, 5)[0] >= 1 << 55:
                    break
                time.sleep(0.05)
            else:
                self.fail("the client kept the old address")
            answer[0] = []  # a failed lookup keeps the endpoints
            time.sleep(0.3)
            self.assertEqual([e.addr for e in c._eps], [b.addr])

    def test_seq_routing_and_wrong_node(self):
        a, b = self.node(), self.node()
        owners = [a.addr, b.addr, a.addr, b.addr]
        a.owners = b.owners = owners

        def guard(node):
            def refuse(m, r):
                if m in ("NextSeq", "CurrentSeq"):
                    owner = owners[fnv1a64(r.key) % 4]
                    if owner != node.addr:
                        return Refuse(grpc.StatusCode.FAILED_PRECONDITION, "wrong node", "WRONG_NODE",
                                      metadata={"owner": owner})
                return None
            return refuse
        a.refuse, b.refuse = guard(a), guard(b)
        with FirnClient([a.addr], generator="chats") as c:
            keys = ["chat:%d" % i for i in range(12)]
            for k in keys:
                self.assertEqual(c.next_seq(k, 2, 5).first, 1)
                self.assertEqual(c.next_seq(k, 1, 5).first, 3)
                self.assertEqual(c.current_seq(k, 5), 3)
            self.assertEqual(c.stats()["seq_redirects"], 0)  # the map routed every key
            # A stale map: the client follows WRONG_NODE to the owner.
            c._seq_map = (4, [a.addr] * 4)
            c._seq_loaded_at = time.monotonic()
            for k in keys:
                self.assertEqual(c.next_seq(k, 1, 5).first, 4)
            self.assertGreater(c.stats()["seq_redirects"], 0)

    def test_seq_map_read_again_closes_connections_to_owners_it_no_longer_names(self):
        # As the Go and TypeScript clients: an owner that is not an endpoint
        # gets a connection of its own; once a read of the section map no
        # longer names it (its sections moved: a pod gone), that connection
        # is closed, not kept open for the client's life.
        a, b = self.node(), self.node()
        a.owners = [b.addr] * 4
        with FirnClient([a.addr], generator="chats", health=False) as c:
            self.assertEqual(c.next_seq("k", 1, 5).first, 1)  # routed to b
            self.assertIn(b.addr, c._seq_conns)
            conn = c._seq_conns[b.addr]
            a.owners = [a.addr] * 4  # the sections moved to a
            self.assertTrue(c._seq_load(time.monotonic() + 5))
            self.assertEqual(c._seq_map, (4, [a.addr] * 4))
            self.assertNotIn(b.addr, c._seq_conns, "a connection to an owner the map no longer names kept")
            with self.assertRaises(ValueError):  # closed
                conn.stub.Info(pb.InfoRequest(), timeout=5)

    def test_seq_moving_retried(self):
        n = self.node()
        n.owners = [n.addr] * 4
        left = [3]

        def refuse(m, r):
            if m == "NextSeq" and left[0] > 0:
                left[0] -= 1
                return Refuse(grpc.StatusCode.UNAVAILABLE, "moving", "SECTION_MOVING", 0.02)
            return None
        n.refuse = refuse
        with FirnClient([n.addr], generator="chats") as c:
            self.assertEqual(c.next_seq("k", 1, 5).first, 1)
            left[0] = 100
            with self.assertRaises(FirnError) as cm:
                c.next_seq("k", 1, 0.1)
            self.assertEqual(cm.exception.reason, "SECTION_MOVING")
            self.assertIsNotNone(cm.exception.retry_after)


if __name__ == "__main__":
    unittest.main()
