"""The poller: off the event loop, one poll at a time, interval respected."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from gpumon.model import Sample
from gpumon.poller import MIN_INTERVAL_S, Poller, clamp_interval
from tests.ui_helpers import make_sample


class CountingSource:
    """Records how many samples run at once; each takes ``duration_s``."""

    simulated = False

    def __init__(self, duration_s: float = 0.0, fail_first: bool = False) -> None:
        self.duration_s = duration_s
        self.fail_first = fail_first
        self.active = 0
        self.max_active = 0
        self.calls = 0
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def sample(self) -> Sample:
        with self._lock:
            self.active += 1
            self.calls += 1
            self.max_active = max(self.max_active, self.active)
        self.threads.add(threading.current_thread().name)
        try:
            time.sleep(self.duration_s)
            if self.fail_first and self.calls == 1:
                raise RuntimeError("NVML hiccup")
            return make_sample(())
        finally:
            with self._lock:
                self.active -= 1

    def close(self) -> None:
        pass


async def run_for(poller: Poller, seconds: float) -> None:
    task = asyncio.create_task(poller.run())
    await asyncio.sleep(seconds)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_samples_run_off_the_event_loop_thread() -> None:
    source = CountingSource()
    received: list[Sample] = []
    poller = Poller(source, 0.25, received.append)
    await run_for(poller, 0.1)
    assert received
    assert threading.current_thread().name not in source.threads


async def test_interval_is_respected() -> None:
    source = CountingSource()
    poller = Poller(source, 0.25, lambda sample: None)
    await run_for(poller, 1.1)
    # Polls at t = 0, 0.25, 0.5, 0.75, 1.0: about five, certainly not dozens.
    assert 4 <= source.calls <= 6


async def test_slow_samples_never_overlap_and_delay_the_next() -> None:
    source = CountingSource(duration_s=0.4)
    poller = Poller(source, 0.25, lambda sample: None)
    await run_for(poller, 1.3)
    assert source.max_active == 1
    # 0.4 s per sample: at most four in 1.3 s, instead of piling up every 0.25 s.
    assert 2 <= source.calls <= 4


async def test_an_error_is_reported_and_polling_goes_on() -> None:
    source = CountingSource(fail_first=True)
    errors: list[BaseException] = []
    received: list[Sample] = []
    poller = Poller(source, 0.25, received.append, on_error=errors.append)
    await run_for(poller, 0.4)
    assert len(errors) == 1 and "NVML hiccup" in str(errors[0])
    assert received


async def test_pause_stops_polling_and_resume_polls_at_once() -> None:
    source = CountingSource()
    poller = Poller(source, 0.25, lambda sample: None)
    task = asyncio.create_task(poller.run())
    await asyncio.sleep(0.05)
    poller.paused = True
    calls = source.calls
    await asyncio.sleep(0.7)
    assert source.calls == calls
    resumed = time.monotonic()
    poller.paused = False
    while source.calls == calls and time.monotonic() - resumed < 2:
        await asyncio.sleep(0.005)
    # At once, not after waiting out the 0.25 s interval.
    assert time.monotonic() - resumed < 0.2
    assert source.calls == calls + 1
    task.cancel()


async def test_shorter_interval_takes_effect_without_waiting_out_the_old_one() -> None:
    source = CountingSource()
    poller = Poller(source, 30, lambda sample: None)
    task = asyncio.create_task(poller.run())
    await asyncio.sleep(0.05)
    assert source.calls == 1
    poller.interval_s = 0.25
    await asyncio.sleep(0.4)
    assert source.calls >= 2
    task.cancel()


async def test_poll_now_does_not_overlap_a_running_poll() -> None:
    source = CountingSource(duration_s=0.3)
    poller = Poller(source, 10, lambda sample: None)
    task = asyncio.create_task(poller.run())
    await asyncio.sleep(0.05)
    poller.poll_now()
    poller.poll_now()
    await asyncio.sleep(0.8)
    task.cancel()
    assert source.max_active == 1
    assert source.calls == 2


async def test_a_hung_sample_does_not_block_the_loop() -> None:
    source = CountingSource(duration_s=3)
    poller = Poller(source, 0.25, lambda sample: None)
    task = asyncio.create_task(poller.run())
    started = time.monotonic()
    ticks = 0
    while time.monotonic() - started < 0.3:
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks >= 10  # the loop kept running while NVML "hung"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 1  # cancelling does not wait for the hung call


def test_interval_floor() -> None:
    assert clamp_interval(0.01) == MIN_INTERVAL_S
    assert clamp_interval(2) == 2.0


async def test_close_waits_for_the_sample_in_flight_then_closes_on_the_sampling_thread() -> None:
    """nvmlShutdown must never run under an NVML call that is still in progress."""
    events: list[tuple[str, str]] = []

    class Source(CountingSource):
        def sample(self) -> Sample:
            events.append(("sample start", threading.current_thread().name))
            time.sleep(0.3)
            events.append(("sample end", threading.current_thread().name))
            return make_sample(())

        def close(self) -> None:
            events.append(("close", threading.current_thread().name))

    poller = Poller(Source(), 10, lambda sample: None)
    task = asyncio.create_task(poller.poll_once())
    await asyncio.sleep(0.05)
    poller.close()  # while the sample is in flight
    await task
    for _ in range(100):
        if len(events) == 3:
            break
        await asyncio.sleep(0.01)
    assert [name for name, _ in events] == ["sample start", "sample end", "close"]
    assert events[2][1] == events[0][1] == "gpumon-poller"
