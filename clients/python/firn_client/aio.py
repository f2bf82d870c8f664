"""AsyncFirnClient: FirnClient for asyncio programs.

It wraps a FirnClient: next() takes from the buffer at once while it holds
fresh IDs (no thread hop); a call that must wait for a node runs the
blocking call in the event loop's default executor, so the loop never
blocks. Safe to share between tasks and threads, as FirnClient is."""

import asyncio
import threading
import time

from . import errors as E
from .client import FirnClient

_mono = time.monotonic


class _Box:
    __slots__ = ("mu", "cancelled", "done", "value", "started", "expired")

    def __init__(self):
        self.mu = threading.Lock()
        self.cancelled = self.done = self.started = self.expired = False
        self.value = None


def _one(_):
    return 1


def _count_runs(runs):
    return sum(r.count for r in runs)


def _none(_):
    return 0


class AsyncFirnClient:
    """AsyncFirnClient(endpoints, **options): the options of FirnClient.
    Use it as an async context manager, or await close()."""

    def __init__(self, endpoints, **options):
        self._c = FirnClient(endpoints, **options)

    @property
    def client(self):
        """The FirnClient underneath."""
        return self._c

    async def _take(self, count, fn, timeout, *args):
        """Runs a call that takes IDs (or sequence values) in the executor,
        fn(*args, timeout). The caller's timeout counts from this call, not
        from when a thread of the executor takes it: a call still queued
        behind others at its deadline never starts, and is refused DEADLINE
        then; one started gets what is left of the timeout. When the
        awaiting task is cancelled, the call goes on in its thread; the IDs
        it then takes are never handed out, and are counted dropped."""
        box = _Box()
        deadline = None if timeout is None else _mono() + timeout

        def call():
            with box.mu:
                if box.expired:
                    return None
                box.started = True
            left = None if deadline is None else deadline - _mono()
            if left is not None and left <= 0:
                raise E.deadline_error("the caller's deadline ran out before a thread of the event loop's executor took the call")
            v = fn(*(args + (left,)))
            with box.mu:
                if box.cancelled:
                    self._c._count_dropped(count(v))
                else:
                    box.value, box.done = v, True
            return v

        fut = asyncio.get_running_loop().run_in_executor(None, call)
        try:
            if deadline is not None:
                done, _ = await asyncio.wait({fut}, timeout=max(deadline - _mono(), 0))
                if not done:
                    with box.mu:
                        if not box.started:
                            # Still queued: it never runs (and takes nothing).
                            box.expired = True
                            fut.cancel()
                            raise E.deadline_error("the caller's deadline ran out waiting for a thread "
                                                   "of the event loop's executor")
                    # Running: it ends at the caller's deadline itself.
            return await fut
        except asyncio.CancelledError:
            with box.mu:
                box.cancelled = True
                if not box.started:  # still queued: it never runs
                    box.expired = True
                    fut.cancel()
                if box.done:  # taken, but the result never reached the caller
                    self._c._count_dropped(count(box.value))
            raise

    async def next(self, timeout=None):
        v = self._c._claim_one()
        if v is not None:
            return v
        return await self._take(_one, self._c.next, timeout)

    async def next_n(self, n, timeout=None):
        return await self._take(len, self._c.next_n, timeout, n)

    async def next_range(self, n, timeout=None):
        return await self._take(_count_runs, self._c.next_range, timeout, n)

    async def next_seq(self, key, count=1, timeout=None):
        return await self._take(_none, self._c.next_seq, timeout, key, count)

    async def current_seq(self, key, timeout=None):
        return await self._take(_none, self._c.current_seq, timeout, key)

    async def close(self):
        """Closes the client: the calls in flight end with CLOSED. It runs
        in a thread of its own, not the executor, whose threads those very
        calls may hold (it would queue behind them until they end)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def settle(err):
            if not fut.done():
                if err is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(err)

        def run():
            err = None
            try:
                self._c.close()
            except BaseException as e:  # handed to the awaiting task
                err = e
            try:
                loop.call_soon_threadsafe(settle, err)
            except RuntimeError:  # the loop closed meanwhile
                pass

        threading.Thread(target=run, name="firn-aio-close", daemon=True).start()
        await fut

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
