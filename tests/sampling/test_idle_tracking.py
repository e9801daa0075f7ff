"""Held idle: which processes hold GPU memory without using it, and which GPUs they hold.

A process holding at least ``idle_min_memory_mib`` whose SM utilisation stays at or below
``idle_below_pct`` for ``idle_after_minutes`` is IDLE; N/A utilisation never is. The tracker
(gpumon/sampling/idle.py) runs on an injected clock; the NVML cases run on the faked NVML
(tests/support/fake_nvml.py), where a compute process with no sample in the window reads 0 % and
MIG, an unsupported call or a failed one read N/A.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pynvml
import pytest

from gpumon.config import Settings
from gpumon.data.idle import (
    Activity,
    HeldIdle,
    IdleRule,
    held_idle_text,
    idle_text,
)
from gpumon.data.model import GpuProcess, ProcessKind, Sample
from gpumon.sampling.idle import IdleTracker, idle_rule
from tests.sources.nvml.test_nvml_mig import jobs, mig_server
from tests.sources.nvml.test_nvml_source import NOT_SUPPORTED, FakeClock, make_source
from tests.support.fake_nvml import (
    GIB,
    Fail,
    FakeNvml,
    FakeProcess,
    FakeProcessTable,
    ProcessInfo,
    ProcessUtilizationSample,
    make_gpu,
)
from tests.support.ui_helpers import make_gpu as model_gpu
from tests.support.ui_helpers import make_process, make_sample

MINUTE = 60.0
RULE = IdleRule(min_memory_bytes=GIB, below_pct=5, after_s=15 * MINUTE)
GPU = model_gpu(0)


def job(pid: int = 100, sm: int | None = 0, **fields: object) -> GpuProcess:
    values: dict[str, object] = {"gpu_memory_bytes": 4 * GIB, "create_time_s": 1_000.0}
    values.update(fields)
    return make_process(GPU, pid, sm_utilization_pct=sm, **values)


def on_gpu(*processes: GpuProcess, gpus: tuple[object, ...] = (GPU,)) -> Sample:
    return make_sample(gpus, processes)  # type: ignore[arg-type]


class Watch:
    """A tracker and its clock; ``see`` feeds a sample ``after`` seconds on."""

    def __init__(
        self, rule: IdleRule = RULE, interval_s: float | Callable[[], float] | None = None
    ) -> None:
        self.clock = FakeClock(0.0)
        self.tracker = IdleTracker(rule, clock=self.clock, interval_s=interval_s)

    def see(self, sample: Sample, after: float = 0.0) -> dict[int, Activity]:
        self.clock.advance(after)
        self.tracker.observe(sample)
        return {pid: a for (_, pid), a in self.tracker.view.processes.items()}


# -- one process over time ------------------------------------------------------------------------


def test_a_quiet_process_is_idle_after_the_time_then_active_then_idle_again() -> None:
    watch = Watch()
    watch.see(on_gpu(job(sm=40)))  # busy when gpumon starts: its quiet is timed exactly
    assert watch.see(on_gpu(job(sm=3)), 60)[100] == Activity(0.0, False)
    assert watch.see(on_gpu(job(sm=0)), 14 * MINUTE)[100] == Activity(14 * MINUTE, False)
    idle = watch.see(on_gpu(job(sm=5)), MINUTE)[100]  # at the threshold: still quiet
    assert idle == Activity(15 * MINUTE, True)
    assert (idle.idle_s, idle_text(idle)) == (15 * MINUTE, "idle 15m")
    assert watch.see(on_gpu(job(sm=6)), 2 * MINUTE)[100] == Activity(0.0, False)  # working
    assert watch.see(on_gpu(job(sm=0)), MINUTE)[100].quiet_s == 0.0  # quiet again: afresh
    again = watch.see(on_gpu(job(sm=1)), 2 * 3600 + 13 * MINUTE)[100]
    assert again.idle and not again.at_least
    assert idle_text(again) == "idle 2h13m"


def test_na_utilisation_never_makes_a_process_idle() -> None:
    watch = Watch()
    for _ in range(5):
        activities = watch.see(on_gpu(job(sm=None)), 3600)
    assert activities == {}  # no activity at all: not idle, not active
    assert watch.tracker.view.idle_keys() == frozenset()
    assert watch.tracker.view.gpus == {}


def test_a_quiet_spell_after_na_is_a_lower_bound() -> None:
    """N/A hides what happened: the quiet seen after it may have begun earlier."""
    watch = Watch()
    watch.see(on_gpu(job(sm=50)))
    watch.see(on_gpu(job(sm=None)), MINUTE)
    watch.see(on_gpu(job(sm=0)), MINUTE)
    activity = watch.see(on_gpu(job(sm=0)), 20 * MINUTE)[100]
    assert activity == Activity(20 * MINUTE, True, at_least=True)
    assert idle_text(activity) == "idle ≥ 20m"


def test_a_gap_nobody_saw_is_not_quiet_time_the_spell_restarts_as_a_lower_bound() -> None:
    """Sampling every minute, then 20 minutes with no sample (paused, a read stuck in the
    driver): the quiet seen after it may have begun at any time in it, so it is timed from
    the first sample after the gap, as "at least"."""
    watch = Watch(interval_s=MINUTE)
    watch.see(on_gpu())  # the GPU's list is read, empty
    watch.see(on_gpu(job(100, sm=0)), MINUTE)  # appears, quiet: its whole spell is seen
    assert watch.see(on_gpu(job(100, sm=0)), MINUTE)[100] == Activity(MINUTE, False)
    after_gap = watch.see(on_gpu(job(100, sm=0), job(101, sm=0)), 20 * MINUTE)
    assert after_gap == {100: Activity(0.0, False, True), 101: Activity(0.0, False, True)}
    for _ in range(15):
        activity = watch.see(on_gpu(job(100, sm=0)), MINUTE)[100]
    assert activity == Activity(15 * MINUTE, True, at_least=True)
    assert idle_text(activity) == "idle ≥ 15m"
    assert held_idle_text(watch.tracker.view.gpus[0]) == "held idle by bob ≥ 15m"


def test_the_gap_follows_the_interval_in_force() -> None:
    """Three intervals is no gap (a slow read); the longer of the intervals before and after
    a change counts, so changing it never makes the next sample look late."""
    interval = [MINUTE]
    watch = Watch(interval_s=lambda: interval[0])
    watch.see(on_gpu(job(sm=40)))
    watch.see(on_gpu(job(sm=0)), MINUTE)  # quiet from here: exactly timed
    watch.see(on_gpu(job(sm=0)), 3 * MINUTE)  # three intervals late: still seen
    interval[0] = 1.0  # the sample taken on the minute's timer comes a minute later
    watch.see(on_gpu(job(sm=0)), MINUTE)
    interval[0] = 10.0
    assert watch.see(on_gpu(job(sm=0)), 10.0)[100] == Activity(4 * MINUTE + 10.0, False)
    assert watch.see(on_gpu(job(sm=0)), 31.0)[100] == Activity(0.0, False, True)  # a gap


def test_memory_below_the_minimum_is_never_idle() -> None:
    watch = Watch()
    small = job(sm=0, gpu_memory_bytes=GIB - 1)
    watch.see(on_gpu(small))
    activity = watch.see(on_gpu(small), 3 * 3600)[100]
    assert activity.quiet_s == 3 * 3600 and not activity.idle
    unknown = job(sm=0, gpu_memory_bytes=None)  # memory N/A: cannot be said to hold any
    assert not watch.see(on_gpu(unknown), 3600)[100].idle


def test_a_reused_pid_starts_afresh() -> None:
    watch = Watch()
    watch.see(on_gpu(job(sm=0)))
    assert watch.see(on_gpu(job(sm=0)), 20 * MINUTE)[100].idle
    reused = job(sm=0, create_time_s=5_000.0)  # the PID now names another process
    assert watch.see(on_gpu(reused), MINUTE)[100] == Activity(0.0, False)


def test_idleness_known_only_since_gpumon_started_says_at_least() -> None:
    watch = Watch()
    watch.see(on_gpu(job(100, sm=0)))  # already quiet when gpumon started
    later = job(101, sm=0)  # appeared since: gpumon saw all of its quiet
    activities = watch.see(on_gpu(job(100, sm=0), later), 12 * MINUTE)
    activities = watch.see(on_gpu(job(100, sm=0), later), 4 * MINUTE)
    first, second = activities[100], activities[101]
    assert first == Activity(16 * MINUTE, True, at_least=True)
    assert (idle_text(first), idle_text(first, ascii_only=True)) == ("idle ≥ 16m", "idle >=16m")
    assert second == Activity(4 * MINUTE, False)  # exact, and not quiet for long enough yet


def test_a_process_first_seen_on_a_gpu_whose_list_was_unknown_is_a_lower_bound() -> None:
    watch = Watch()
    watch.see(on_gpu(gpus=(dataclasses.replace(GPU, processes_error="NVML: No permission"),)))
    watch.see(on_gpu(job(sm=0)), MINUTE)
    assert watch.see(on_gpu(job(sm=0)), 15 * MINUTE)[100].at_least


def test_only_processes_of_the_latest_sample_are_remembered() -> None:
    """A dashboard left open for days: 10,000 processes come and go, memory stays bounded."""
    watch = Watch()
    for pid in range(1, 10_001):
        watch.see(on_gpu(job(pid, sm=0), job(pid + 100_000, sm=50)), 1.0)
    assert len(watch.tracker._spells) == 2
    assert len(watch.tracker.view.processes) == 2


def test_the_rule_comes_from_the_settings() -> None:
    settings = Settings(idle_min_memory_mib=512, idle_below_pct=10, idle_after_minutes=0.1)
    assert idle_rule(settings) == IdleRule(512 * 1024**2, 10, 6.0)


# -- GPUs held idle -------------------------------------------------------------------------------


def held(*processes: GpuProcess, quiet_for: float = 2 * 3600 + 13 * MINUTE) -> dict[int, HeldIdle]:
    watch = Watch()
    sample = on_gpu(*processes)
    watch.see(on_gpu(*(dataclasses.replace(p, sm_utilization_pct=50) for p in processes)))
    watch.see(sample, 1.0)
    watch.see(sample, quiet_for)
    return dict(watch.tracker.view.gpus)


def test_a_gpu_whose_holders_are_all_idle_is_held_idle_by_them() -> None:
    gpus = held(
        job(100, user="alice", gpu_memory_bytes=10 * GIB),
        job(101, user="bob", gpu_memory_bytes=2 * GIB),
        job(102, user="alice", gpu_memory_bytes=GIB),
    )
    assert gpus == {0: HeldIdle(("alice", "bob"), 2 * 3600 + 13 * MINUTE, False, 13 * GIB)}
    assert held_idle_text(gpus[0]) == "held idle by alice +1 2h13m"


def test_a_small_quiet_display_server_does_not_keep_a_gpu_from_being_held_idle() -> None:
    xorg = job(2113, sm=None, user="root", kind=ProcessKind.GRAPHICS, gpu_memory_bytes=GIB // 8)
    gpus = held(job(100, user="alice"), xorg)
    assert held_idle_text(gpus[0]) == "held idle by alice 2h13m"


@pytest.mark.parametrize(
    "other",
    [
        job(101, sm=80, gpu_memory_bytes=GIB // 4),  # small, but computing
        job(101, sm=None),  # holds memory, utilisation N/A: unknown is not idle
        job(101, sm=0, gpu_memory_bytes=None),  # memory N/A
    ],
    ids=["small-busy", "big-na", "memory-na"],
)
def test_a_gpu_is_not_held_idle_while_another_process_may_use_it(other: GpuProcess) -> None:
    assert held(job(100), other) == {}


def test_a_gpu_not_quiet_for_long_enough_is_not_held_idle() -> None:
    assert held(job(100), quiet_for=14 * MINUTE) == {}


def test_held_idle_counts_from_the_last_holder_to_go_quiet_and_says_at_least_when_unsure() -> None:
    watch = Watch()
    watch.see(on_gpu(job(100, sm=0, user="alice")))  # quiet since before gpumon started
    watch.see(on_gpu(job(100, sm=0, user="alice"), job(101, sm=0, user="bob")), 30 * MINUTE)
    both = on_gpu(job(100, sm=0, user="alice"), job(101, sm=0, user="bob"))
    watch.see(both, 20 * MINUTE)
    (gpu,) = watch.tracker.view.gpus.values()
    assert (gpu.idle_s, gpu.at_least) == (20 * MINUTE, False)  # bob's 20 minutes, exact
    assert held_idle_text(gpu, ascii_only=True) == "held idle by alice +1 20m"
    watch = Watch()
    watch.see(both)
    watch.see(both, 20 * MINUTE)
    (gpu,) = watch.tracker.view.gpus.values()
    assert held_idle_text(gpu) == "held idle by alice +1 ≥ 20m"
    assert held_idle_text(gpu, ascii_only=True) == "held idle by alice +1 >=20m"


# -- on the faked NVML: 0 % where NVML answered, N/A where it cannot tell -------------------------


def nvml_server(**gpu: object) -> tuple[FakeNvml, FakeProcessTable]:
    """PID 100 computes (4 GiB), 101 is a desktop's graphics process (256 MiB), 102 both
    (4 GiB); NVML has no per-process sample for any of them."""
    fake = FakeNvml(
        [
            make_gpu(
                0,
                compute_processes=[ProcessInfo(100, 4 * GIB), ProcessInfo(102, 4 * GIB)],
                graphics_processes=[ProcessInfo(101, GIB // 4), ProcessInfo(102, 4 * GIB)],
                **gpu,
            )
        ]
    )
    return fake, FakeProcessTable(FakeProcess(100), FakeProcess(101), FakeProcess(102))


def test_a_compute_process_without_a_sample_is_at_0_and_becomes_idle_a_graphics_one_is_na() -> None:
    fake, table = nvml_server()
    source = make_source(fake, table)
    watch = Watch(dataclasses.replace(RULE, after_s=MINUTE))
    for _ in range(3):
        sample = source.sample()
        watch.see(sample, MINUTE)
    assert {p.pid: p.sm_utilization_pct for p in sample.processes} == {100: 0, 101: None, 102: 0}
    assert watch.tracker.view.idle_keys() == {(0, 100), (0, 102)}
    owner = sample.processes[0].user  # uid 1000, as this host names it
    assert held_idle_text(watch.tracker.view.gpus[0]) == f"held idle by {owner} ≥ 2m"


@pytest.mark.parametrize(
    "answer",
    [NOT_SUPPORTED, Fail(pynvml.NVML_ERROR_UNKNOWN), Fail(pynvml.NVML_ERROR_TIMEOUT)],
    ids=["not-supported", "unknown-error", "timeout"],
)
def test_when_nvml_cannot_tell_every_process_is_na_and_never_idle(answer: Fail) -> None:
    fake, table = nvml_server(process_utilization=answer)
    source = make_source(fake, table)
    watch = Watch(dataclasses.replace(RULE, after_s=MINUTE))
    for _ in range(4):
        sample = source.sample()
        watch.see(sample, MINUTE)
    assert {p.sm_utilization_pct for p in sample.processes} == {None}
    assert watch.tracker.view.processes == {}
    assert watch.tracker.view.gpus == {}


def test_a_failed_read_is_na_and_the_next_window_answers_again() -> None:
    fake, table = nvml_server(process_utilization=Fail(pynvml.NVML_ERROR_UNKNOWN))
    source = make_source(fake, table)
    assert source.sample().processes[0].sm_utilization_pct is None
    fake.gpus[0]["process_utilization"] = [ProcessUtilizationSample(100, 5_000, 30)]
    assert {p.pid: p.sm_utilization_pct for p in source.sample().processes} == {
        100: 30,
        101: None,
        102: 0,
    }


def test_mig_processes_are_never_idle_and_the_other_gpus_are_tracked() -> None:
    fake = mig_server()
    source = make_source(fake, jobs())
    watch = Watch(dataclasses.replace(RULE, after_s=MINUTE))
    for _ in range(3):
        sample = source.sample()
        watch.see(sample, MINUTE)
    assert {p.pid: p.sm_utilization_pct for p in sample.processes} == {100: None, 101: None, 200: 0}
    assert watch.tracker.view.idle_keys() == {(1, 200)}
    assert list(watch.tracker.view.gpus) == [1]
