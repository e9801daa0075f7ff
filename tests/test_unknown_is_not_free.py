"""Unknown is never shown as free, zero or none on the dashboard: a GPU whose processes
cannot be known, a table before the first sample, a power cap that is N/A; and a driver that
stops answering is said to, not shown as the last sample forever. The headless outputs'
side: tests/commands/test_unknown_is_not_free.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from textual.pilot import Pilot

from gpumon.data import format as fmt
from gpumon.data.model import (
    GpuStats,
    GpuUnavailable,
    Sample,
    UnavailableReason,
)
from gpumon.ui.dashboard.app import GpumonApp, create_app
from tests.support.ui_helpers import (
    GIB,
    MIB,
    make_gpu,
    make_process,
    make_sample,
    screen_after,
    screen_text,
)


def busy_gpu_with_unlisted_processes() -> tuple[GpuStats, GpuStats]:
    """GPU 0: 53 GiB in use, one 2 GiB process listed. GPU 1: 12 GiB, all of it listed."""
    return (
        make_gpu(0, memory_used_bytes=53 * GIB, memory_total_bytes=80 * GIB),
        make_gpu(1, memory_used_bytes=12 * GIB + 3 * MIB),
    )


async def test_dashboard_says_memory_is_held_by_processes_not_listed() -> None:
    busy, full = busy_gpu_with_unlisted_processes()
    sample = make_sample((busy, full), (make_process(full, 200, gpu_memory_bytes=12 * GIB),))
    text = await screen_after(sample, (120, 40))
    assert "GPU 0: 53.0G used by processes not listed" in text
    assert "GPU 1:" not in text


async def test_no_processes_is_not_claimed_before_the_first_sample() -> None:
    """With a slow driver the first sample can take many seconds: processes are unknown."""
    gate = threading.Event()

    class Slow:
        simulated = False

        def sample(self):  # type: ignore[no-untyped-def]
            gate.wait(10)
            return make_sample((make_gpu(0),))

        def close(self) -> None:
            gate.set()

    app = create_app(Slow(), ascii_only=False)  # type: ignore[arg-type]
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            text = screen_text(app)
    finally:
        gate.set()
    assert "No processes" not in text
    assert "processes not known yet" in text


async def test_no_processes_is_not_claimed_without_a_driver() -> None:
    unavailable = GpuUnavailable(
        UnavailableReason.DRIVER_NOT_LOADED, "The NVIDIA kernel driver is not loaded.", "NVML: x"
    )
    sample = make_sample((), driver=None, unavailable=unavailable)
    text = await screen_after(sample, (100, 30))
    assert "No processes" not in text
    assert "Processes unknown" in text


async def test_none_is_said_only_of_the_gpus_whose_lists_were_read() -> None:
    readable = make_gpu(0, memory_used_bytes=10 * MIB)
    refused = make_gpu(1, processes_error=fmt.NA)
    lost = GpuStats(index=2, uuid=None, lost=True, lost_reason="fell off the bus")
    for gpus, expected in (
        ((readable,), "No processes on any GPU."),
        ((readable, refused), "No processes listed on the GPUs whose lists could be read."),
        ((readable, lost), "No processes listed on the GPUs whose lists could be read."),
        ((lost,), "Processes unknown: no GPU's process list could be read."),
    ):
        sample = make_sample(gpus)
        text = await screen_after(sample, (120, 40))
        assert expected in text, gpus
        if expected != "No processes on any GPU.":
            assert "No processes on any GPU" not in text


async def test_dashboard_power_never_reads_n_a_as_watts() -> None:
    gpu = make_gpu(0, power_draw_w=158.0, power_limit_w=None)
    sample = make_sample((gpu,))
    for size in ((120, 40), (80, 24)):
        text = await screen_after(sample, size)
        assert "158W / N/A" in text, size
        assert "N/AW" not in text


def test_the_poller_says_how_long_a_sample_has_been_stuck() -> None:
    """Past three intervals the driver is "not answering"."""
    from gpumon.sampling.poller import Poller

    now = [100.0]
    poller = Poller(StaticSlow(), 1.0, lambda sample: None, clock=lambda: now[0])
    assert poller.stalled_s() is None
    poller._in_flight_since = now[0]  # a poll started and has not come back
    now[0] += 2.9
    assert poller.stalled_s() is None
    now[0] += 0.2
    assert poller.stalled_s() == pytest.approx(3.1)


class SecondSampleHangs:
    """A source whose second sample hangs in the "driver" until ``gate`` is set (or 30 s);
    every other sample is ``gpu`` alone."""

    simulated = False

    def __init__(self, gpu: GpuStats) -> None:
        self.gpu = gpu
        self.gate = threading.Event()
        self.samples = 0

    def sample(self) -> Sample:
        self.samples += 1
        if self.samples == 2:
            self.gate.wait(30)
        return make_sample((self.gpu,))

    def close(self) -> None:
        self.gate.set()


async def until(pilot: Pilot[object], done: Callable[[], bool], failure: str) -> None:
    """Let the app run until ``done()``, for at most 20 s (the poller runs on its own)."""
    deadline = time.monotonic() + 20
    while not done():
        assert time.monotonic() < deadline, failure
        await pilot.pause(0.05)


async def free_until_banner(pilot: Pilot[object], app: GpumonApp, banner: str) -> None:
    """The first sample shows FREE; then ``banner`` comes up and FREE goes."""
    await until(pilot, lambda: app.samples_received >= 1, "no sample")
    await pilot.pause(0.1)
    assert "FREE" in screen_text(app)
    await until(pilot, lambda: banner in screen_text(app), "no banner")
    assert "FREE" not in screen_text(app)


def test_a_longer_interval_does_not_make_a_stuck_poll_current_again() -> None:
    """+ pressed while NVML hangs: the sample shown was taken at the old cadence, and the
    poll in flight is as stuck as before."""
    from gpumon.sampling.poller import Poller

    now = [100.0]
    poller = Poller(StaticSlow(), 1.0, lambda sample: None, clock=lambda: now[0])
    poller._in_flight_since = now[0]
    now[0] += 3.5
    poller.interval_s = 10.0
    assert poller.stalled_s() == pytest.approx(3.5)


@pytest.mark.slow
async def test_reads_that_keep_failing_leave_the_last_sample_stale_not_free() -> None:
    """One good sample (GPU 0 FREE), then every read raises: three intervals on, the header
    says the reads are failing and nothing is FREE; a good read clears both."""
    failing = threading.Event()
    failing.set()
    samples = 0

    class Failing:
        simulated = False

        def sample(self):  # type: ignore[no-untyped-def]
            nonlocal samples
            samples += 1
            if samples > 1 and failing.is_set():
                raise OSError("Too many open files")
            return make_sample((make_gpu(0, memory_used_bytes=0, utilization_gpu_pct=0),))

        def close(self) -> None:
            pass

    # 1 s: three intervals leave room to see FREE first, however loaded the machine.
    app = create_app(Failing(), interval_s=1.0, ascii_only=False)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await free_until_banner(pilot, app, "reads failing for")
        failing.clear()
        await until(
            pilot,
            lambda: "reads failing" not in screen_text(app) and "FREE" in screen_text(app),
            "the banner stayed",
        )


@pytest.mark.parametrize("key", ["enter", "u"])
@pytest.mark.slow
async def test_the_detail_screens_say_their_readings_are_stale_while_nvml_hangs(key: str) -> None:
    """The GPU detail (Enter) and the users (u) screens have no header banner: their title
    says the readings are the last sample's, and stops saying it when samples resume."""
    source = SecondSampleHangs(make_gpu(0))
    gate = source.gate
    app = create_app(source, interval_s=0.25, ascii_only=False)  # type: ignore[arg-type]
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.samples_received >= 1, "no sample")
            await pilot.press(key)
            await until(
                pilot,
                lambda: "NVML not answering for" in screen_text(app),
                "no stale mark in the title",
            )
            assert "readings of " in screen_text(app)
            gate.set()
            await until(
                pilot, lambda: "NVML not answering" not in screen_text(app), "the stale mark stayed"
            )
    finally:
        gate.set()


class StaticSlow:
    simulated = False

    def sample(self):  # type: ignore[no-untyped-def]
        raise AssertionError("not sampled in this test")

    def close(self) -> None:
        pass


async def test_dashboard_says_nvml_is_not_answering_and_clears_it_when_it_answers() -> None:
    source = SecondSampleHangs(make_gpu(0))
    gate = source.gate
    app = create_app(source, interval_s=0.25, ascii_only=False)  # type: ignore[arg-type]
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: "NVML not answering for" in screen_text(app), "no banner")
            assert app.samples_received == 1
            await pilot.press("s")  # keys still work
            gate.set()
            await until(
                pilot,
                lambda: "NVML not answering" not in screen_text(app) and app.samples_received >= 2,
                "the banner stayed",
            )
    finally:
        gate.set()


@pytest.mark.slow
async def test_a_stuck_driver_leaves_no_gpu_free_on_the_dashboard() -> None:
    """The last sample said FREE; three intervals later NVML has still not answered: that
    sample is stale, and stale is not free (the header says the driver is not answering)."""
    source = SecondSampleHangs(make_gpu(0, memory_used_bytes=0, utilization_gpu_pct=0))
    gate = source.gate
    app = create_app(source, interval_s=0.25, ascii_only=False)  # type: ignore[arg-type]
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await free_until_banner(pilot, app, "NVML not answering for")
            gate.set()
            await until(pilot, lambda: app.samples_received >= 3, "no sample")
            await pilot.pause(0.1)
            assert "FREE" in screen_text(app)
    finally:
        gate.set()
