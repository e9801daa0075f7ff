"""Runs ``source.sample()`` off the event loop, one poll at a time, and hands each sample on.

Each poll schedules the next only after it finishes, so a sample slower than the interval
delays the next one instead of piling up. The blocking call runs on one daemon thread: a
driver call that hangs for seconds never blocks the event loop, and never blocks quitting.

Every mode that samples more than once uses this one loop: the dashboard on its event loop,
``gpumon probe`` inside its ``asyncio.run``, and the exporter, which has no event loop, on
a :class:`PollerThread`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from gpumon.data.model import MAX_INTERVAL_S, MIN_INTERVAL_S, Sample
from gpumon.data.views import STALE_AFTER_INTERVALS
from gpumon.sources.base import GpuSource

__all__ = [
    "MAX_INTERVAL_S",
    "MIN_INTERVAL_S",
    "EarlySample",
    "Poller",
    "PollerThread",
    "clamp_interval",
]

T = TypeVar("T")

#: A sample that has taken this many intervals means the driver is not answering.
STALLED_INTERVALS = STALE_AFTER_INTERVALS


class DaemonThread:
    """One daemon worker thread. Unlike asyncio.to_thread's pool, interpreter exit does not
    wait for it, so a hung NVML call cannot keep gpumon from quitting."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            call, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as error:
                future.set_exception(error)

    async def run(self, call: Callable[[], T]) -> T:
        future: Future[T] = Future()
        self._jobs.put((call, future))
        return await asyncio.wrap_future(future)

    def submit(self, call: Callable[[], T]) -> Future[T]:
        """Run ``call`` after the jobs already queued, without waiting for it."""
        future: Future[T] = Future()
        self._jobs.put((call, future))
        return future

    def stop(self) -> None:
        self._jobs.put(None)


class EarlySample:
    """A first sample started before the dashboard is built, for its :class:`Poller`.

    The dashboard's first full frame waits for two things: Textual's import and start (about
    0.2 s of CPU) and the first sample (NVML's init, a second or more on a driver without
    persistence mode, and a /proc read or two per process). Started first, on the thread that
    will take every later sample, the two overlap where the sample waits on the driver or on
    the kernel (ctypes and file reads let go of the GIL). The poller given it
    (``Poller(..., early=...)``) delivers it as its first poll: one sampling thread, one
    sample at a time, as ever.
    """

    def __init__(self, source: GpuSource) -> None:
        self.source = source
        self.thread = DaemonThread("gpumon-poller")
        self.future: Future[Sample] = self.thread.submit(source.sample)


class Poller:
    """Calls ``on_sample`` on the event loop with each new sample.

    Args:
        source: what to sample.
        interval_s: seconds from the start of one poll to the start of the next.
        on_sample: called on the event loop with every sample (a store's ``push``; the
            dashboards post a message).
        on_error: called on the event loop when ``sample()`` raised; polling goes on.
        clock: monotonic clock, injectable for tests.
        early: the first sample, already started on its own thread (:class:`EarlySample`
            of ``source``): the first poll delivers it, later ones sample on that thread.
    """

    def __init__(
        self,
        source: GpuSource,
        interval_s: float,
        on_sample: Callable[[Sample], None],
        *,
        on_error: Callable[[BaseException], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        early: EarlySample | None = None,
    ) -> None:
        if early is not None and early.source is not source:
            raise ValueError("the early sample is of another source")
        self.source = source
        self._interval_s = clamp_interval(interval_s)
        self._on_sample = on_sample
        self._on_error = on_error
        self._clock = clock
        self._paused = False
        self._forced = False
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._thread: DaemonThread | None = None if early is None else early.thread
        self._early: Future[Sample] | None = None if early is None else early.future
        self._closed = False
        self.polls_started = 0
        self.polls_finished = 0
        self._in_flight_since: float | None = None  # when the poll in flight started
        # When the last good sample was delivered, and the shortest interval in force since:
        # how stale it is judged by (lengthening the interval does not make it fresh again).
        self._good_at: float | None = None
        self._interval_floor_s = self._interval_s
        self.failing = False  # the last poll raised: no sample since the last good one

    @property
    def interval_s(self) -> float:
        return self._interval_s

    @interval_s.setter
    def interval_s(self, value: float) -> None:
        self._interval_s = clamp_interval(value)
        self._interval_floor_s = min(self._interval_floor_s, self._interval_s)
        self._wake.set()

    @property
    def paused(self) -> bool:
        return self._paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self._paused = value
        self._wake.set()

    def poll_now(self) -> None:
        """Start the next poll as soon as the current one (if any) has finished."""
        self._forced = True
        self._wake.set()

    async def poll_once(self) -> Sample | None:
        """Take one sample off the loop and deliver it; ``None`` if the source raised or the
        poller is closed."""
        # The lock keeps an extra poll (the probe asking for a fresh sample) from
        # overlapping the scheduled one: sources are never sampled concurrently.
        async with self._lock:
            if self._closed:
                # A poll queued behind the last one when the app quit: the source is closed
                # (NVML shut down) and must not be opened again.
                return None
            if self._thread is None:
                self._thread = DaemonThread("gpumon-poller")
            self._in_flight_since = self._clock()
            self.polls_started += 1
            try:
                if self._early is not None:
                    early, self._early = self._early, None
                    sample = await asyncio.wrap_future(early)
                else:
                    sample = await self._thread.run(self.source.sample)
            except Exception as error:
                self.failing = True
                if self._on_error is not None:
                    self._on_error(error)
                return None
            finally:
                self._in_flight_since = None
                self.polls_finished += 1
            self.failing = False
            self._good_at = self._clock()
            self._interval_floor_s = self._interval_s
            self._on_sample(sample)
            return sample

    @property
    def in_flight(self) -> bool:
        """A sample is being taken now."""
        return self._in_flight_since is not None

    def stalled_s(self) -> float | None:
        """How long the sample in flight has taken, once that is more than three intervals
        (the driver is not answering); ``None`` otherwise. The intervals are the shortest in
        force since the last good sample: lengthening the interval during a hang does not
        make the last sample current again."""
        started = self._in_flight_since
        if started is None:
            return None
        waited = self._clock() - started
        return waited if waited > STALLED_INTERVALS * self._interval_floor_s else None

    def failing_s(self) -> float | None:
        """How old the last good sample is, once polls have failed since it for more than
        three intervals (a read that raises every time: the last sample is stale, not
        current); ``None`` otherwise, while paused, and before any good sample."""
        if not self.failing or self._paused or self._good_at is None:
            return None
        waited = self._clock() - self._good_at
        return waited if waited > STALLED_INTERVALS * self._interval_floor_s else None

    async def run(self) -> None:
        """Poll until cancelled."""
        while True:
            started = self._clock()
            if not self._paused:
                await self.poll_once()
            await self._sleep_until(started)

    async def _sleep_until(self, started: float) -> None:
        # Woken early by an interval change (recompute), a pause toggle or poll_now().
        while True:
            self._wake.clear()
            if self._forced and not self._paused:
                self._forced = False
                return
            remaining = self._interval_s - (self._clock() - started)
            if remaining <= 0 and not self._paused:
                return
            try:
                await asyncio.wait_for(self._wake.wait(), None if self._paused else remaining)
            except asyncio.TimeoutError:
                if not self._paused:
                    return

    def close(self) -> Future[None]:
        """Close the source on the sampling thread, after any sample in flight (NVML must
        not be shut down under a running call), then let the thread end. No poll starts
        after this.

        Returns:
            A future that is done once the source is closed (never, while the sample in
            flight is stuck in the driver).
        """
        return self._finish(self.source.close)

    def stop(self) -> Future[None]:
        """As :meth:`close`, but the source stays open: its owner closes it once the
        returned future is done (the sample in flight, if any, has ended)."""
        return self._finish(lambda: None)

    def _finish(self, last: Callable[[], None]) -> Future[None]:
        self._closed = True
        thread, self._thread = self._thread, None
        if thread is None:
            last()
            done: Future[None] = Future()
            done.set_result(None)
            return done
        finished = thread.submit(last)
        thread.stop()
        return finished


class PollerThread:
    """A :class:`Poller` on its own event loop in a daemon thread, for a mode with no event
    loop (the exporter). Polling starts at once; ``on_sample`` and ``on_error`` are called on
    that thread.
    """

    def __init__(self, poller: Poller, name: str = "gpumon-sampler") -> None:
        self.poller = poller
        self._loop = asyncio.new_event_loop()
        self._polling = self._loop.create_task(poller.run())
        self._source_closed: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._polling)
        except asyncio.CancelledError:
            pass  # stop()
        finally:
            closed = self.poller.close()
            closed.add_done_callback(lambda _: self._source_closed.set_result(None))
            self._loop.close()

    def stop(self, timeout_s: float) -> bool:
        """Stop polling and close the source after the sample in flight.

        Returns:
            True once the source is closed, within ``timeout_s``; False while a sample is
            still stuck in the driver: the source is closed when that call returns (or
            never, if the process exits first), never under it.
        """
        with contextlib.suppress(RuntimeError):  # stopped before: the loop is closed
            self._loop.call_soon_threadsafe(self._polling.cancel)
        done, _ = concurrent.futures.wait([self._source_closed], timeout_s)
        return bool(done)


def clamp_interval(value: float) -> float:
    return max(MIN_INTERVAL_S, min(MAX_INTERVAL_S, float(value)))
