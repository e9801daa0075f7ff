"""`gpumon export`: each process's SM utilisation and how long it has held its memory idle.

``gpumon_process_sm_utilization_ratio`` (0..1) and ``gpumon_process_idle_seconds`` (0 while
the process is not idle; once it is, the seconds since its utilisation fell to the threshold)
have no series where the utilisation is N/A. The collector is fed samples as the exporter's
sampling thread hands them, its idle tracker on a clock that moves a minute a sample; one
test scrapes the exporter over real HTTP while its own thread samples.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpumon.cli import main
from gpumon.commands.export.collector import SampleCollector, build_families
from gpumon.commands.export.http import Exporter
from gpumon.data.idle import IdleRule
from gpumon.data.model import GpuProcess, GpuStats, ProcessKind, Sample
from gpumon.sampling.idle import IdleTracker
from gpumon.sources.demo import DemoSource
from tests.commands.export.test_export import (
    GIB,
    HOST,
    UUID0,
    UUID1,
    FakeSource,
    Series,
    parse,
    scrape,
)

MINUTE = 60.0
RULE = IdleRule(min_memory_bytes=GIB, below_pct=5, after_s=15 * MINUTE)


def process(pid: int, sm: int | None, *, user: str, gpu: int = 0, **fields: object) -> GpuProcess:
    values: dict[str, object] = {
        "gpu_index": gpu,
        "gpu_uuid": UUID0 if gpu == 0 else UUID1,
        "pid": pid,
        "kind": ProcessKind.COMPUTE,
        "gpu_memory_bytes": 8 * GIB,
        "user": user,
        "command": f"python job{pid}.py",
        "sm_utilization_pct": sm,
    }
    values.update(fields)
    return GpuProcess(**values)  # type: ignore[arg-type]


def server(alice_sm: int = 0) -> Sample:
    """GPU 0: alice's quiet job (``alice_sm``), bob's busy one and a display server without a
    per-process sample (N/A); GPU 1: a MIG GPU, carol's job N/A."""
    processes = (
        process(100, alice_sm, user="alice"),
        process(101, 77, user="bob"),
        process(102, None, user="root", kind=ProcessKind.GRAPHICS, gpu_memory_bytes=GIB // 8),
        process(200, None, user="carol", gpu=1, gpu_instance_id=1, compute_instance_id=0),
    )
    gpus = (
        GpuStats(index=0, uuid=UUID0, name="NVIDIA A100-SXM4-80GB", memory_used_bytes=17 * GIB),
        GpuStats(index=1, uuid=UUID1, name="NVIDIA A100-SXM4-80GB", mig_mode=True),
    )
    return Sample(1_700_000_000.0, HOST, None, gpus, processes)


def pids(series: Series, name: str) -> dict[int, float]:
    return {int(dict(labels)["pid"]): value for labels, value in series.get(name, {}).items()}


def collected(collector: SampleCollector) -> Series:
    """What a scrape of ``collector`` holds, parsed by prometheus_client."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return parse(generate_latest(registry).decode())


def fed(*samples: Sample) -> SampleCollector:
    """A collector that took ``samples``, one minute apart, as the sampling thread hands them."""
    minutes = itertools.count()
    collector = SampleCollector(idle=IdleTracker(RULE, clock=lambda: next(minutes) * MINUTE))
    for sample in samples:
        collector.update(sample)
    return collector


def test_sm_utilisation_is_a_ratio_with_no_series_where_it_is_na() -> None:
    exporter = Exporter(FakeSource(server(alice_sm=3)), SampleCollector(), "127.0.0.1", 0, 3600)
    try:
        assert exporter.first_sample.wait(5)
        series = scrape(exporter.port)
    finally:
        exporter.stop()
    assert pids(series, "gpumon_process_sm_utilization_ratio") == {100: 0.03, 101: 0.77}
    labels = dict(next(iter(series["gpumon_process_sm_utilization_ratio"])))
    assert (labels["user"], labels["process"], labels["type"], labels["gpu"]) == (
        "alice",
        "python",
        "C",
        "0",
    )
    assert pids(series, "gpumon_process_idle_seconds") == {100: 0.0, 101: 0.0}


def test_idle_seconds_are_0_while_active_and_count_the_quiet_once_idle() -> None:
    series = collected(fed(server(alice_sm=50), *[server(alice_sm=0)] * 20))
    # Alice went quiet at the second sample: 19 minutes ago, past the 15 of the rule. The
    # display server and the MIG job are N/A: no series.
    assert pids(series, "gpumon_process_idle_seconds") == {100: 19 * MINUTE, 101: 0.0}
    series = collected(fed(server(alice_sm=50), *[server(alice_sm=0)] * 15))
    assert pids(series, "gpumon_process_idle_seconds") == {100: 0.0, 101: 0.0}  # 14 minutes
    series = collected(fed(*[server(alice_sm=0)] * 20, server(alice_sm=40)))
    assert pids(series, "gpumon_process_idle_seconds") == {100: 0.0, 101: 0.0}  # busy again


def test_the_sampling_thread_feeds_the_idle_tracker() -> None:
    """Over HTTP: the exporter's own thread samples; its clock moves ten minutes a sample."""
    tens = itertools.count()
    tracker = IdleTracker(RULE, clock=lambda: next(tens) * 10 * MINUTE)
    source = FakeSource(server(alice_sm=50), server(alice_sm=0))
    exporter = Exporter(source, SampleCollector(idle=tracker), "127.0.0.1", 0, 0.25)
    try:
        deadline = time.monotonic() + 10
        # A sixth call has begun only once the fifth sample was fed to the tracker (one
        # sampling thread): at five, a scrape could come between its call and its feeding.
        while source.calls < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        series = scrape(exporter.port)
    finally:
        exporter.stop()
    idle = pids(series, "gpumon_process_idle_seconds")
    assert idle[101] == 0.0
    assert idle[100] >= 30 * MINUTE and idle[100] % (10 * MINUTE) == 0


def test_gpumon_export_serves_no_idle_seconds_for_a_stall_nobody_saw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``gpumon export --interval 60``: alice's job is quiet before and after 30 minutes in
    which the sampler was stuck in the driver. Those are not idle seconds: 0 right after
    the stall (it was 31 minutes before the fix), then counted from the first sample after
    it."""
    built: list[Exporter] = []

    def serve(exporter: Exporter, host: str) -> int:
        exporter.stop()  # the samples are handed in below, on a clock the test moves
        built.append(exporter)
        return 0

    monkeypatch.setattr("gpumon.commands.export.http.serve_until_signalled", serve)
    monkeypatch.setattr(
        "gpumon.sources.base.source_for", lambda settings, **kwargs: FakeSource(OSError("x"))
    )
    assert main(["export", "--listen", "127.0.0.1:0", "--interval", "60"]) == 0
    (exporter,) = built
    collector, now = exporter.collector, [0.0]
    collector.idle.clock = lambda: now[0]

    def idle_after(wait: float, alice_sm: int = 0) -> float:
        now[0] += wait
        collector.update(server(alice_sm))
        return pids(collected(collector), "gpumon_process_idle_seconds")[100]

    idle_after(0.0, alice_sm=50)
    idle_after(MINUTE)  # quiet from here
    assert idle_after(MINUTE) == 0.0  # quiet for a minute: not idle yet
    assert idle_after(30 * MINUTE) == 0.0  # after the stall
    for _ in range(14):
        idle_after(MINUTE)
    assert idle_after(MINUTE) == 15 * MINUTE


def test_one_sample_exports_every_idle_second_as_0() -> None:
    """build_families (one sample, as the contrib checks use it): no idleness yet."""
    families = {family.name: family for family in build_families(server())}
    idle = families["gpumon_process_idle_seconds"]
    assert {sample.labels["pid"]: sample.value for sample in idle.samples} == {"100": 0, "101": 0}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_finds_no_problem_with_the_new_series() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(fed(server(50), *[server(0)] * 20))
    text = generate_latest(registry).decode()
    assert 'gpumon_process_idle_seconds{container_id="",gpu="0"' in text
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (result.stdout + result.stderr).strip() == ""


def test_the_demos_processes_carry_both_series() -> None:
    source = DemoSource(4, seed=0, clock=lambda: 1_700_000_000.0)
    series = collected(fed(source.sample()))
    ratios = pids(series, "gpumon_process_sm_utilization_ratio")
    assert ratios and all(0.0 <= value <= 1.0 for value in ratios.values())
    assert set(pids(series, "gpumon_process_idle_seconds")) == set(ratios)
