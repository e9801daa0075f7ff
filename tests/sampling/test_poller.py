"""The poller: off the event loop, one poll at a time, interval respected.

These tests must hold on a loaded CI machine, so none of them asserts that something happens
within a short real-time window. They wait for a condition with a generous deadline
(``DEADLINE_S``); a "too soon" bound compares timestamps, which load can only push further
apart; a sample that must still be running is held on a gate that only the test opens; and
where a test must tell "at once" from "after the interval", the interval is 60 s, so the
deadline is far shorter than the interval. The only fixed sleeps check that something does
*not* happen: load can make them miss a bug on a bad run, never fail a good poller.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from gpumon.data.model import MAX_INTERVAL_S, Sample
from gpumon.sampling.poller import (
    MIN_INTERVAL_S,
    EarlySample,
    Poller,
    PollerThread,
    clamp_interval,
)
from gpumon.sampling.store import Store
from tests.support.ui_helpers import make_sample

# How long to wait for something that should happen. On an idle machine it takes
# milliseconds; the deadline only bounds how long a broken poller keeps the test running.
DEADLINE_S = 10.0
# A sample held on a gate gives up after this long, so a thread cannot hang forever.
GATE_TIMEOUT_S = 10.0
# Timestamps are time.monotonic(), like the event loop's timers, which never fire early
# by more than the clock resolution: this only absorbs float rounding.
TOLERANCE_S = 0.005
# A window in which a broken poller would act (a poll that should not start, a close that
# should wait): it is only ever used to check that nothing happens.
QUIET_S = 0.3

# Where a test tells "at once" from "after the interval", the interval is MAX_INTERVAL_S.
assert MAX_INTERVAL_S >= 5 * DEADLINE_S


class CountingSource:
    """Records every sample's start and end (time.monotonic(), on the sampling thread) and
    how many run at once.

    Sample ``n`` takes ``durations[n]`` seconds (the last one repeats). With ``gated``, every
    sample first waits for ``gate``, so the test decides how long it stays in flight.
    """

    simulated = False

    def __init__(
        self,
        duration_s: float = 0.0,
        fail_first: bool = False,
        *,
        durations: Sequence[float] | None = None,
        gated: bool = False,
    ) -> None:
        self.durations = list(durations) if durations is not None else [duration_s]
        self.fail_first = fail_first
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.active = 0
        self.max_active = 0
        self.calls = 0
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def sample(self) -> Sample:
        with self._lock:
            self.starts.append(time.monotonic())
            self.active += 1
            self.calls += 1
            call = self.calls
            self.max_active = max(self.max_active, self.active)
        self.threads.add(threading.current_thread().name)
        try:
            self.gate.wait(GATE_TIMEOUT_S)
            time.sleep(self.durations[min(call, len(self.durations)) - 1])
            if self.fail_first and call == 1:
                raise RuntimeError("NVML hiccup")
            return make_sample(())
        finally:
            with self._lock:
                self.active -= 1
                self.ends.append(time.monotonic())

    def close(self) -> None:
        pass


class OffsetClock:
    """time.monotonic() plus an offset the test can jump forward: time "passes" for the
    poller without the test having to wait for it."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


async def wait_until(condition: Callable[[], object], what: str) -> None:
    """Return once ``condition()`` is true; fail the test after ``DEADLINE_S``."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting after {DEADLINE_S} s for {what}")
        await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def running(poller: Poller) -> AsyncIterator[asyncio.Task[None]]:
    """Run the poller for the body of the ``async with``; cancel it (and check that it ends
    by cancellation) and close it afterwards."""
    task = asyncio.create_task(poller.run())
    try:
        yield task
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        poller.close()


async def test_samples_run_off_the_event_loop_thread() -> None:
    source = CountingSource()
    received: list[Sample] = []
    poller = Poller(source, 0.25, received.append)
    async with running(poller):
        await wait_until(lambda: received, "a sample")
    assert source.threads
    assert threading.current_thread().name not in source.threads


async def test_interval_is_respected() -> None:
    """From the start of one poll to the start of the next: never less than the interval."""
    source = CountingSource()
    poller = Poller(source, 0.25, lambda sample: None)
    # When run() starts each poll, on the event loop (the sampling thread may be late to
    # pick a poll up on a loaded machine, which would make its own timestamps too close).
    poll_starts: list[float] = []
    poll_once = poller.poll_once

    async def timed_poll_once() -> Sample | None:
        poll_starts.append(time.monotonic())
        return await poll_once()

    poller.poll_once = timed_poll_once  # type: ignore[method-assign]
    begun = time.monotonic()
    async with running(poller):
        # (The fifth sample too: its poll may start before the sampling thread reads it.)
        await wait_until(lambda: len(poll_starts) >= 5 and source.calls >= 5, "five polls")
    # Polls went on at (about) the interval: five of them before the deadline...
    # ...and never faster: every gap is at least the interval. Polling without waiting
    # would give gaps of a millisecond.
    gaps = [later - earlier for earlier, later in itertools.pairwise(poll_starts)]
    assert min(gaps) >= 0.25 - TOLERANCE_S, gaps
    # The same, from the samples themselves: the n-th one (counting from 0) started no
    # sooner than n intervals after the poller did.
    for n, started in enumerate(source.starts):
        assert started - begun >= n * 0.25 - TOLERANCE_S, (n, started - begun)


async def test_slow_samples_never_overlap_and_delay_the_next() -> None:
    # Two samples much slower than the interval (over two intervals each), then fast ones.
    source = CountingSource(durations=[0.6, 0.6, 0.0])
    poller = Poller(source, 0.25, lambda sample: None)
    async with running(poller):
        await wait_until(lambda: len(source.ends) >= 4, "four samples")
    assert source.max_active == 1
    # Each sample started only after the one before it had ended: a slow sample delays
    # the next one instead of a second one starting beside it every 0.25 s.
    for n in range(1, len(source.starts)):
        assert source.starts[n] >= source.ends[n - 1], n
    # ...and the polls it delayed do not pile up afterwards: the one after the slow ones
    # starts at once, the next waits a full interval again (a poller catching up on the
    # ticks it missed would start it immediately).
    assert source.starts[3] - source.ends[1] >= 0.25 - TOLERANCE_S


async def test_an_error_is_reported_and_polling_goes_on() -> None:
    source = CountingSource(fail_first=True)
    errors: list[BaseException] = []
    received: list[Sample] = []
    poller = Poller(source, 0.25, received.append, on_error=errors.append)
    async with running(poller):
        await wait_until(lambda: received, "a sample after the failed one")
    assert len(errors) == 1 and "NVML hiccup" in str(errors[0])
    assert source.calls >= 2


async def test_pause_stops_polling_and_resume_polls_at_once() -> None:
    source = CountingSource()
    clock = OffsetClock()
    poller = Poller(source, MIN_INTERVAL_S, lambda sample: None, clock=clock)
    async with running(poller):
        await wait_until(lambda: poller.polls_finished >= 1, "the first poll")
        poller.paused = True
        await wait_until(lambda: not poller.in_flight, "the poll in flight to end")
        calls = source.calls
        assert poller.polls_started == calls
        # Several intervals go by on the real clock: no poll.
        await asyncio.sleep(4 * MIN_INTERVAL_S)
        assert source.calls == poller.polls_started == calls
        # A much longer interval, and a pause that outlasts even that one.
        poller.interval_s = MAX_INTERVAL_S
        clock.advance(MAX_INTERVAL_S + 1)
        await asyncio.sleep(QUIET_S)
        assert source.calls == poller.polls_started == calls
        resumed = time.monotonic()
        poller.paused = False
        # At once: not after waiting out the interval, which is six times the deadline.
        await wait_until(lambda: poller.polls_finished > calls, "a poll after resuming")
        assert time.monotonic() - resumed < MAX_INTERVAL_S
        # One poll, not a burst making up for the ones the pause skipped.
        await asyncio.sleep(QUIET_S)
        assert source.calls == poller.polls_started == calls + 1


async def test_shorter_interval_takes_effect_without_waiting_out_the_old_one() -> None:
    source = CountingSource()
    poller = Poller(source, MAX_INTERVAL_S, lambda sample: None)
    async with running(poller):
        await wait_until(lambda: poller.polls_finished >= 1, "the first poll")
        assert source.calls == 1
        changed = time.monotonic()
        poller.interval_s = 0.25
        # The old interval is six times the deadline: this only passes if the change
        # woke the poller instead of waiting the old interval out.
        await wait_until(lambda: source.calls >= 2, "a poll at the new interval")
        assert time.monotonic() - changed < MAX_INTERVAL_S


async def test_poll_now_does_not_overlap_a_running_poll() -> None:
    # Every sample waits at the gate: the first one stays in flight until the test opens it.
    source = CountingSource(gated=True)
    poller = Poller(source, MAX_INTERVAL_S, lambda sample: None)
    try:
        async with running(poller):
            await wait_until(lambda: source.calls == 1, "the first poll to start")
            poller.poll_now()
            poller.poll_now()
            # The first sample is still in flight: a poll that overlapped it would start now.
            await asyncio.sleep(QUIET_S)
            assert source.calls == poller.polls_started == 1
            assert not source.ends
            source.gate.set()
            # As soon as the running poll ends, not after the 60 s interval.
            await wait_until(lambda: poller.polls_finished >= 2, "the poll asked for")
            # Two requests while one poll ran make one more poll, not two.
            await asyncio.sleep(QUIET_S)
    finally:
        source.gate.set()
    assert source.max_active == 1
    assert source.calls == poller.polls_started == 2
    assert source.starts[1] >= source.ends[0]


async def test_a_hung_sample_does_not_block_the_loop() -> None:
    # The sample "hangs" until the test opens the gate.
    source = CountingSource(gated=True)
    poller = Poller(source, 0.25, lambda sample: None)
    task = asyncio.create_task(poller.run())
    try:
        await wait_until(lambda: source.calls >= 1, "the sample to start")
        for _ in range(10):
            await asyncio.sleep(0.01)
        # The loop kept running while NVML "hung": the sample only ends when the gate opens.
        assert source.active == 1 and not source.ends
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Cancelling did not wait for the hung call.
        assert source.active == 1 and not source.ends
    finally:
        source.gate.set()
        task.cancel()
    await wait_until(lambda: source.ends, "the released sample to end")
    poller.close()


def test_interval_floor() -> None:
    assert clamp_interval(0.01) == MIN_INTERVAL_S
    assert clamp_interval(2) == 2.0


async def test_close_waits_for_the_sample_in_flight_then_closes_on_the_sampling_thread() -> None:
    """nvmlShutdown must never run under an NVML call that is still in progress."""
    events: list[tuple[str, str]] = []
    gate = threading.Event()

    class Source(CountingSource):
        def sample(self) -> Sample:
            events.append(("sample start", threading.current_thread().name))
            gate.wait(GATE_TIMEOUT_S)
            events.append(("sample end", threading.current_thread().name))
            return make_sample(())

        def close(self) -> None:
            events.append(("close", threading.current_thread().name))

    poller = Poller(Source(), MAX_INTERVAL_S, lambda sample: None)
    task = asyncio.create_task(poller.poll_once())
    try:
        await wait_until(lambda: events, "the sample to start")
        poller.close()  # while the sample is in flight
        # The sample is held at the gate: a close that did not wait for it would run now.
        await asyncio.sleep(QUIET_S)
        assert [name for name, _ in events] == ["sample start"]
    finally:
        gate.set()
    await task
    await wait_until(lambda: len(events) >= 3, "the source to close")
    assert [name for name, _ in events] == ["sample start", "sample end", "close"]
    assert events[2][1] == events[0][1] == "gpumon-poller"


async def test_a_poll_queued_when_the_poller_closes_never_samples_the_closed_source() -> None:
    """The probe's extra poll can wait behind the scheduled one while the app quits: once
    closed, the source (NVML, shut down) is not sampled again, which would reopen it."""
    source = CountingSource(gated=True)
    poller = Poller(source, MAX_INTERVAL_S, lambda sample: None)
    first = asyncio.create_task(poller.poll_once())
    await wait_until(lambda: source.calls == 1, "the first sample to start")
    queued = asyncio.create_task(poller.poll_once())  # waits for the lock
    await asyncio.sleep(0)
    poller.close()
    source.gate.set()
    await first
    assert await queued is None
    assert source.calls == 1


async def test_the_store_answers_an_ask_with_a_later_sample_and_the_extra_poll_waits() -> None:
    """The probe's path in the dashboard: while a poll is in flight, ask the store for the next
    sample and the poller for a poll now. The answer is a sample pushed after the ask, never
    the one already there, and the extra poll starts only once the one in flight has ended."""
    source = CountingSource(gated=True)
    store = Store(history=False)
    pushed: list[Sample] = []
    store.subscribe(pushed.append)
    poller = Poller(source, MAX_INTERVAL_S, store.push)
    try:
        async with running(poller):
            source.gate.set()
            await wait_until(lambda: store.sequence == 1, "the first sample")
            source.gate.clear()
            poller.poll_now()
            await wait_until(lambda: source.calls == 2, "the second poll to start")
            answer = store.next_sample()
            extra = asyncio.create_task(poller.poll_once())
            await asyncio.sleep(QUIET_S)
            assert source.calls == 2  # the extra poll waits for the one in flight
            assert not answer.done()  # not the first sample, which was there already
            source.gate.set()
            assert await asyncio.wait_for(answer, DEADLINE_S) is pushed[1]
            assert await extra is pushed[2]
    finally:
        source.gate.set()
    assert source.max_active == 1
    assert source.starts[2] >= source.ends[1]


async def test_a_poller_thread_polls_on_its_own_loop_and_closes_the_source_when_stopped() -> None:
    """The exporter's sampler: no event loop of its own caller, the same poller."""
    events: list[tuple[str, str]] = []

    class Source(CountingSource):
        def close(self) -> None:
            events.append(("close", threading.current_thread().name))

    source = Source()
    store = Store(history=False)
    store.subscribe(lambda sample: events.append(("sample", threading.current_thread().name)))
    thread = PollerThread(Poller(source, MIN_INTERVAL_S, store.push), name="test-sampler")
    await wait_until(lambda: store.sequence >= 2, "two samples")
    assert thread.stop(DEADLINE_S) is True
    assert events[-1] == ("close", "gpumon-poller")  # after the sample in flight, if any
    assert {name for kind, name in events if kind == "sample"} == {"test-sampler"}
    assert source.threads == {"gpumon-poller"} and source.max_active == 1
    calls = source.calls
    await asyncio.sleep(QUIET_S)
    assert source.calls == calls  # stopped
    assert thread.stop(DEADLINE_S) is True  # twice is harmless


def test_a_poller_thread_stuck_in_the_driver_stops_at_once_and_closes_the_source_later() -> None:
    source = CountingSource(gated=True)
    closed = threading.Event()
    source.close = closed.set  # type: ignore[method-assign]
    thread = PollerThread(Poller(source, MIN_INTERVAL_S, lambda sample: None))
    try:
        deadline = time.monotonic() + DEADLINE_S
        while source.calls == 0:
            assert time.monotonic() < deadline, "the sample never started"
            time.sleep(0.005)
        assert thread.stop(0.1) is False  # stuck: the source must not be closed under it
        assert not closed.is_set()
    finally:
        source.gate.set()
    assert closed.wait(DEADLINE_S)  # once the stuck call returned
    assert source.calls == 1


# -- the dashboard's first sample, started before the dashboard is built ----------------------


async def test_an_early_sample_is_the_first_poll_and_later_ones_sample_on_its_thread() -> None:
    """The CLI starts the first sample before Textual is imported; the poller given it
    delivers that sample first instead of sampling again, then samples on the same thread,
    one at a time."""
    source = CountingSource(gated=True)
    early = EarlySample(source)
    await wait_until(lambda: source.calls == 1, "the early sample to start")
    received: list[Sample] = []
    poller = Poller(source, 0.25, received.append, early=early)
    task = asyncio.create_task(poller.poll_once())
    await asyncio.sleep(QUIET_S)
    assert source.calls == 1 and not received  # waiting for the early one, not sampling anew
    source.gate.set()
    first = await task
    assert received == [first] and source.calls == 1
    await poller.poll_once()
    assert source.calls == 2 and source.max_active == 1
    assert source.threads == {"gpumon-poller"}
    poller.close()


async def test_an_early_sample_that_fails_is_reported_and_polling_goes_on() -> None:
    source = CountingSource(fail_first=True)
    errors: list[BaseException] = []
    received: list[Sample] = []
    poller = Poller(
        source, 0.25, received.append, on_error=errors.append, early=EarlySample(source)
    )
    assert await poller.poll_once() is None
    assert [str(error) for error in errors] == ["NVML hiccup"]
    assert await poller.poll_once() is not None and len(received) == 1
    poller.close()


def test_an_early_sample_is_of_the_pollers_own_source() -> None:
    with pytest.raises(ValueError):
        Poller(CountingSource(), 1.0, lambda sample: None, early=EarlySample(CountingSource()))
