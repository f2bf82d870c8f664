"""AsyncFirnClient: FirnClient for asyncio programs.

It wraps a FirnClient: next() takes from the buffer at once while it holds
fresh IDs (no thread hop); a call that must wait for a node runs the
blocking call in the event loop's default executor, so the loop never
blocks. Safe to share between tasks and threads, as FirnClient is."""

import asyncio
import threading

from .client import FirnClient


class _Box:
    __slots__ = ("mu", "cancelled", "done", "value")

    def __init__(self):
        self.mu = threading.Lock()
        self.cancelled = self.done = False
        self.value = None


def _one(_):
    return 1


def _count_runs(runs):
    return sum(r.count for r in runs)


class AsyncFirnClient:
    """AsyncFirnClient(endpoints, **options): the options of FirnClient.
    Use it as an async context manager, or await close()."""

    def __init__(self, endpoints, **options):
        self._c = FirnClient(endpoints, **options)

    @property
    def client(self):
        """The FirnClient underneath."""
        return self._c

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def _take(self, count, fn, *args):
        """Runs a call that takes IDs in the executor. When the awaiting
        task is cancelled, the call goes on in its thread; the IDs it then
        takes are never handed out, and are counted dropped."""
        box = _Box()

        def call():
            v = fn(*args)
            with box.mu:
                if box.cancelled:
                    self._c._count_dropped(count(v))
                else:
                    box.value, box.done = v, True
            return v

        try:
            return await asyncio.get_running_loop().run_in_executor(None, call)
        except asyncio.CancelledError:
            with box.mu:
                box.cancelled = True
                if box.done:  # taken, but the result never reached the caller
                    self._c._count_dropped(count(box.value))
            raise

    async def next(self, timeout=None):
        v = self._c._claim_one()
        if v is not None:
            return v
        return await self._take(_one, self._c.next, timeout)

    async def next_n(self, n, timeout=None):
        return await self._take(len, self._c.next_n, n, timeout)

    async def next_range(self, n, timeout=None):
        return await self._take(_count_runs, self._c.next_range, n, timeout)

    async def next_seq(self, key, count=1, timeout=None):
        return await self._run(self._c.next_seq, key, count, timeout)

    async def current_seq(self, key, timeout=None):
        return await self._run(self._c.current_seq, key, timeout)

    async def close(self):
        await self._run(self._c.close)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
