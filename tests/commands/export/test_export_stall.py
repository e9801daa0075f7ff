"""`gpumon export` when the driver stops answering: data older than 3 intervals is never
served as current. The exporter then serves only its own health (the sample's age, a stall
flag, the last good sample's timestamp, the error counter) and no GPU, process, MIG or
dcgm-compat series, so no ``gpumon_gpu_free 1``; everything comes back with the next sample.

Was: with NVML blocked from the 4th sample, /metrics kept answering 200 with the same
timestamp 31 s later, ``gpumon_gpu_free 1`` and no error counted.
"""

from __future__ import annotations

import dataclasses
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpumon.commands.export.collector import SampleCollector
from gpumon.commands.export.exposition import Exposition
from gpumon.commands.export.http import Exporter
from gpumon.data.model import Sample
from tests.commands.export.test_export import (
    Series,
    gpu_key,
    make_sample,
    mig_and_jobs_sample,
    parse,
)

ROOT = Path(__file__).resolve().parents[3]
INTERVAL_S = 0.25  # the shortest: stale after 0.75 s


class StuckFromCall:
    """A driver that stops answering: ``sample()`` blocks from call ``stuck_at`` on, until
    :meth:`release`. Each sample has its own timestamp (the call's number)."""

    simulated = False

    def __init__(self, sample: Sample, stuck_at: int) -> None:
        self.answer = sample
        self.stuck_at = stuck_at
        self.calls = 0
        self.gate = threading.Event()
        self.closed = False

    def sample(self) -> Sample:
        self.calls += 1
        if self.calls >= self.stuck_at:
            self.gate.wait()
        return dataclasses.replace(self.answer, timestamp_s=1_700_000_000.0 + self.calls)

    def release(self) -> None:
        self.gate.set()

    def close(self) -> None:
        self.closed = True


def scrape(port: int) -> Series:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        assert answer.status == 200
        return parse(answer.read().decode())


def scrape_until(port: int, check: Callable[[Series], bool], what: str) -> Series:
    deadline = time.monotonic() + 15
    while True:
        series = scrape(port)
        if check(series):
            return series
        assert time.monotonic() < deadline, f"never {what}: {sorted(series)}"
        time.sleep(0.05)


def stalled(series: Series) -> bool:
    return series["gpumon_sampler_stalled"][()] == 1.0


def readings(series: Series) -> list[str]:
    """Names of the series that say something about GPUs or processes."""
    return sorted(
        name
        for name in series
        if name.startswith(("gpumon_gpu_", "gpumon_process_", "gpumon_mig_", "DCGM_"))
        or name == "gpumon_driver_info"
    )


@pytest.fixture
def stuck() -> Iterator[Exporter]:
    """An exporter (with --dcgm-compat) whose driver stops answering at the 6th sample (1.25 s
    of good samples to scrape first, on a slow machine too): GPU 0 in MIG mode with a
    process, GPU 2 FREE."""
    sample = mig_and_jobs_sample()
    sample = dataclasses.replace(sample, gpus=(*sample.gpus[:2], make_sample().gpus[2]))
    source = StuckFromCall(sample, stuck_at=6)
    exporter = Exporter(source, SampleCollector(dcgm_compat=True), "127.0.0.1", 0, INTERVAL_S)
    yield exporter
    exporter.stop()
    source.release()


@pytest.mark.slow
def test_a_stuck_driver_is_served_as_stalled_never_as_current(stuck: Exporter) -> None:
    source = stuck.source
    assert stuck.first_sample.wait(5)
    before = scrape_until(stuck.port, lambda s: "gpumon_gpu_up" in s, "sampled")
    assert before["gpumon_sampler_stalled"] == {(): 0.0}
    assert before["gpumon_gpu_free"][gpu_key(2, before_uuid(before))] == 1.0  # FREE, until...
    assert "DCGM_FI_DEV_GPU_TEMP" in before and "gpumon_mig_memory_used_bytes" in before
    assert "gpumon_process_gpu_memory_bytes" in before

    series = scrape_until(stuck.port, stalled, "stalled")
    assert source.calls == 6  # the 6th read is the one stuck
    assert readings(series) == []  # no GPU, process, MIG or dcgm series: no gpumon_gpu_free 1
    assert series["gpumon_sample_timestamp_seconds"] == {(): 1_700_000_005.0}  # the last good
    assert series["gpumon_sample_age_seconds"][()] > 3 * INTERVAL_S
    assert series["gpumon_sampling_errors_total"] == {(): 1.0}
    assert series["gpumon_host_info"] == {(("hostname", "node7"),): 1.0}  # still named

    age = series["gpumon_sample_age_seconds"][()]
    later = scrape_until(
        stuck.port, lambda s: s["gpumon_sample_age_seconds"][()] > age + 0.5, "older"
    )
    assert stalled(later) and readings(later) == []
    assert later["gpumon_sampling_errors_total"] == {(): 1.0}  # one stall, counted once

    source.release()  # the driver answers again
    back = scrape_until(stuck.port, lambda s: not stalled(s), "recovered")
    assert back["gpumon_gpu_up"] and back["gpumon_gpu_free"] and "DCGM_FI_DEV_GPU_TEMP" in back
    assert back["gpumon_sample_timestamp_seconds"][()] > 1_700_000_005.0
    assert back["gpumon_sampling_errors_total"] == {(): 1.0}  # kept: a counter never drops


def before_uuid(series: Series) -> str:
    (labels,) = [key for key in series["gpumon_gpu_up"] if dict(key)["gpu"] == "2"]
    return dict(labels)["uuid"]


def test_stall_counting_and_staleness_follow_the_clock_of_the_reads() -> None:
    """Exposition on an injected clock: stale past 3 intervals, a stall counted once and
    kept once a sample ends it, each failed read counted, and the health first served
    after a failure without any GPU series; the age is rounded up to the millisecond."""
    now = [0.0]
    exposition = Exposition(SampleCollector(), 1.0, clock=lambda: now[0])

    def scrape_at(moment: float) -> Series:
        now[0] = moment
        return parse(exposition.metrics().body.decode())

    exposition.sampled(make_sample())
    assert scrape_at(3.0)["gpumon_sampler_stalled"] == {(): 0.0}  # 3 intervals: still current
    assert "gpumon_gpu_up" in scrape_at(3.0)
    just_past = scrape_at(3.0002)  # stalled, and its age says so: never read as 3.0
    assert just_past["gpumon_sampler_stalled"] == {(): 1.0}
    assert just_past["gpumon_sample_age_seconds"][()] > 3.0
    at_4 = scrape_at(3.5)
    assert (at_4["gpumon_sampler_stalled"], at_4["gpumon_sampling_errors_total"]) == (
        {(): 1.0},
        {(): 1.0},
    )
    assert readings(at_4) == []
    assert scrape_at(60.0)["gpumon_sampling_errors_total"] == {(): 1.0}
    exposition.sampled(make_sample())  # at 60: ends the stall, which stays counted
    after = scrape_at(60.5)
    assert after["gpumon_sampler_stalled"] == {(): 0.0} and "gpumon_gpu_up" in after
    assert after["gpumon_sampling_errors_total"] == {(): 1.0}
    assert after["gpumon_sample_age_seconds"] == {(): 0.5}
    exposition.failed()  # a read that raised: no GPU series from now on, one more error
    failed = scrape_at(61.0)
    assert readings(failed) == [] and failed["gpumon_sampler_stalled"] == {(): 0.0}
    assert failed["gpumon_sampling_errors_total"] == {(): 2.0}
    assert scrape_at(64.0)["gpumon_sampling_errors_total"] == {(): 3.0}  # and now a stall


_STUCK_AT_4 = textwrap.dedent(
    """
    import sys, threading
    import gpumon.sources.base
    from gpumon.sources.demo import DemoSource

    class StuckAt4(DemoSource):  # NVML stops answering at the 4th sample
        calls = 0
        def sample(self):
            StuckAt4.calls += 1
            if StuckAt4.calls >= 4:
                threading.Event().wait()
            return super().sample()

    gpumon.sources.base.source_for = lambda settings, **kwargs: StuckAt4(gpu_count=2)
    from gpumon.cli import main
    sys.exit(main(["export", "--listen", "127.0.0.1:0", "--interval", "0.25", "--dcgm-compat"]))
    """
)


@pytest.mark.slow
def test_gpumon_export_with_a_driver_stuck_at_the_4th_sample() -> None:
    """The command as a user runs it: stalled after 3 intervals, no readings, and it still
    stops at once on SIGTERM with exit code 0."""
    process = subprocess.Popen(
        [sys.executable, "-c", _STUCK_AT_4], stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert process.stderr is not None
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", process.stderr.readline())
        assert match
        series = scrape_until(int(match.group(1)), stalled, "stalled")
        assert readings(series) == []
        assert series["gpumon_sampling_errors_total"] == {(): 1.0}
        assert series["gpumon_simulated"] == {(): 1.0}  # it is the demo's, stuck
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert "Traceback" not in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
