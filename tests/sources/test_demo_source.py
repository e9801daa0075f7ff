"""DemoSource: a seeded, clearly labelled simulation."""

from __future__ import annotations

import dataclasses
import getpass
import itertools
import re

import pytest

from gpumon.data.model import ProcessKind, Sample
from gpumon.sources import demo as demo_module
from gpumon.sources.demo import DemoSource


def run(source: DemoSource, ticks: int = 5) -> list[Sample]:
    return [source.sample() for _ in range(ticks)]


def demo(**kwargs: object) -> DemoSource:
    return DemoSource(clock=lambda: 1_700_000_000.0, current_user="me", **kwargs)  # type: ignore[arg-type]


def test_same_seed_same_server() -> None:
    first = run(demo(gpu_count=4, seed=7))
    second = run(demo(gpu_count=4, seed=7))

    assert first == second
    for a, b in zip(first, second, strict=True):
        assert [g.uuid for g in a.gpus] == [g.uuid for g in b.gpus]
        assert [g.utilization_gpu_pct for g in a.gpus] == [g.utilization_gpu_pct for g in b.gpus]
        assert [g.temperature_c for g in a.gpus] == [g.temperature_c for g in b.gpus]
        assert [(p.pid, p.cpu_pct) for p in a.processes] == [
            (p.pid, p.cpu_pct) for p in b.processes
        ]
        assert a.host.cpu_pct == b.host.cpu_pct


def test_another_seed_another_server() -> None:
    first = run(demo(gpu_count=4, seed=1))
    second = run(demo(gpu_count=4, seed=2))

    assert [g.uuid for g in first[0].gpus] != [g.uuid for g in second[0].gpus]


def test_values_move_between_ticks() -> None:
    samples = run(demo(gpu_count=4, seed=3), ticks=10)

    assert len({tuple(g.power_draw_w for g in s.gpus) for s in samples}) > 1


def test_timestamps_come_from_the_clock() -> None:
    ticks = iter([10.0, 11.0, 12.5])
    source = DemoSource(clock=lambda: next(ticks), current_user="me")

    assert [s.timestamp_s for s in run(source, 3)] == [10.0, 11.0, 12.5]


def test_always_labelled_simulated() -> None:
    source = demo(gpu_count=2)

    assert source.simulated is True
    assert all(s.simulated for s in run(source))
    assert all(s.unavailable is None for s in run(source))


@pytest.mark.parametrize("gpu_count", [1, 2, 4, 8])
@pytest.mark.parametrize("process_count", [0, 1, 3, 12])
def test_counts_honour_parameters(gpu_count: int, process_count: int) -> None:
    source = demo(gpu_count=gpu_count, process_count=process_count, seed=5)

    for sample in run(source, 20):
        assert [g.index for g in sample.gpus] == list(range(gpu_count))
        assert len(sample.processes) == process_count
        assert len({(p.gpu_uuid, p.pid) for p in sample.processes}) == process_count
        assert {p.gpu_uuid for p in sample.processes} <= {g.uuid for g in sample.gpus}


def test_default_process_count_is_one_and_a_half_per_gpu() -> None:
    assert len(demo(gpu_count=4).sample().processes) == 6


def test_no_gpus_is_refused() -> None:
    with pytest.raises(ValueError):
        DemoSource(gpu_count=0, current_user="me")


@pytest.mark.parametrize("seed", range(5))
def test_values_stay_in_range(seed: int) -> None:
    for sample in run(demo(gpu_count=8, process_count=12, seed=seed), 300):
        for gpu in sample.gpus:
            assert gpu.utilization_gpu_pct is not None
            assert 0 <= gpu.utilization_gpu_pct <= 100
            assert gpu.utilization_memory_pct is not None
            assert 0 <= gpu.utilization_memory_pct <= 100
            assert gpu.memory_used_bytes is not None
            assert gpu.memory_total_bytes is not None
            assert 0 < gpu.memory_used_bytes <= gpu.memory_total_bytes
            assert gpu.temperature_c is not None
            assert gpu.temperature_slowdown_c is not None
            assert gpu.temperature_c < gpu.temperature_slowdown_c
            assert gpu.power_draw_w is not None
            assert gpu.power_limit_w is not None
            assert 0 < gpu.power_draw_w <= gpu.power_limit_w
            assert gpu.fan_pct is not None
            assert 0 <= gpu.fan_pct <= 100
        host = sample.host
        assert host.cpu_pct is not None
        assert 0 <= host.cpu_pct <= 100
        assert host.memory_used_bytes is not None
        assert host.memory_total_bytes is not None
        assert host.memory_used_bytes <= host.memory_total_bytes


def test_the_current_user_owns_some_processes_and_hidden_rows_show_nothing() -> None:
    samples = run(demo(gpu_count=4, process_count=12, seed=0), 3)

    for sample in samples:
        mine = [p for p in sample.processes if p.is_current_user]
        assert all(p.user == "me" for p in mine)
        for process in sample.processes:
            if not process.visible:
                assert (process.user, process.command, process.cpu_pct) == (None, None, None)
                assert process.gpu_memory_bytes is not None


def test_works_when_the_login_name_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container running under an arbitrary uid has no passwd entry: getpass raises."""

    def no_login_name() -> str:
        raise KeyError("getpwuid(): uid not found: 12345")

    monkeypatch.setattr(getpass, "getuser", no_login_name)

    sample = DemoSource(gpu_count=2, clock=lambda: 0.0).sample()

    assert len(sample.gpus) == 2


def test_negative_process_count_is_refused() -> None:
    with pytest.raises(ValueError):
        DemoSource(process_count=-1, current_user="me")


def pids_over(source: DemoSource, ticks: int) -> list[list[int]]:
    return [[p.pid for p in source.sample().processes] for _ in range(ticks)]


def test_default_churn_is_rare_and_explicit_default_is_the_same_server() -> None:
    default = pids_over(demo(gpu_count=4, process_count=12, seed=3), 1000)
    explicit = pids_over(demo(gpu_count=4, process_count=12, seed=3, churn=0.01), 1000)

    assert default == explicit
    started = {pid for pids in default for pid in pids} - set(default[0])
    # About one process in a hundred ticks: a quiet server.
    assert 2 <= len(started) <= 30


# 999 tick-to-tick changes: about half of them, or exactly one each.
@pytest.mark.parametrize(("churn", "low", "high"), [(0.5, 400, 600), (1.0, 999, 999)])
def test_heavy_churn_starts_new_processes_with_new_pids(churn: float, low: int, high: int) -> None:
    ticks = pids_over(demo(gpu_count=8, process_count=64, seed=1, churn=churn), 1000)

    started = 0
    seen: set[int] = set(ticks[0])
    for before, after in itertools.pairwise(ticks):
        assert len(after) == 64  # one ends, another starts: the count holds
        assert after[0] == before[0] == 2113  # the display server never ends
        new = [pid for pid in after if pid not in before]
        # A PID is never reused: a new process is never mistaken for an old one.
        assert not seen.intersection(new)
        seen.update(new)
        started += len(new)
    assert low <= started <= high


def test_churn_above_one_replaces_several_processes_a_tick() -> None:
    ticks = pids_over(demo(gpu_count=8, process_count=64, seed=2, churn=2.5), 200)

    started = [len(set(after) - set(before)) for before, after in itertools.pairwise(ticks)]
    assert set(started) <= {2, 3}  # two, plus a third about half the time
    assert 0.3 < started.count(3) / len(started) < 0.7
    assert all(len(pids) == 64 for pids in ticks)


def test_no_churn_keeps_every_process() -> None:
    ticks = pids_over(demo(gpu_count=4, process_count=12, seed=0, churn=0), 2000)

    assert all(pids == ticks[0] for pids in ticks)


def test_churn_leaves_a_lone_process_alone() -> None:
    ticks = pids_over(demo(gpu_count=1, process_count=1, seed=0, churn=5.0), 50)

    assert all(pids == [2113] for pids in ticks)


def test_same_seed_same_churn() -> None:
    first = run(demo(gpu_count=8, process_count=64, seed=4, churn=0.7), 300)
    second = run(demo(gpu_count=8, process_count=64, seed=4, churn=0.7), 300)

    assert first == second


@pytest.mark.parametrize("churn", [-0.1, float("nan"), float("inf")])
def test_impossible_churn_is_refused(churn: float) -> None:
    with pytest.raises(ValueError, match="churn"):
        DemoSource(current_user="me", churn=churn)


@pytest.mark.parametrize("seed", range(3))
def test_activity_readings_are_plausible(seed: int) -> None:
    """Free memory adds up, idle GPUs say so, per-process SM % shares the GPU's."""
    for sample in run(demo(gpu_count=8, process_count=12, seed=seed), 300):
        for gpu in sample.gpus:
            assert gpu.memory_free_bytes is not None
            assert gpu.memory_used_bytes is not None and gpu.memory_reserved_bytes is not None
            assert gpu.memory_free_bytes >= 0
            assert (
                gpu.memory_used_bytes + gpu.memory_reserved_bytes + gpu.memory_free_bytes
                == gpu.memory_total_bytes
            )
            assert gpu.pcie_rx_bytes_per_s is not None and gpu.pcie_rx_bytes_per_s > 0
            assert gpu.pcie_tx_bytes_per_s is not None and gpu.pcie_tx_bytes_per_s > 0
            assert gpu.utilization_encoder_pct == 0
            assert gpu.utilization_decoder_pct is not None
            assert 0 <= gpu.utilization_decoder_pct <= 100
            assert gpu.clock_graphics_mhz == gpu.clock_sm_mhz
            assert gpu.utilization_gpu_pct is not None
            idle = "gpu_idle" in (gpu.clock_event_reasons or ())
            assert idle == (gpu.clock_sm_mhz == 210)
            shares = [
                p.sm_utilization_pct
                for p in sample.processes_on(gpu.index)
                if p.kind is ProcessKind.COMPUTE
            ]
            if idle:
                assert shares == [0] * len(shares)  # no NVML sample in the window: 0 %
            elif shares:  # a job may have just started with no process listed yet
                assert all(share is not None for share in shares)
                total = sum(share or 0 for share in shares)
                assert abs(total - gpu.utilization_gpu_pct) <= len(shares)


def test_a_gpu_near_its_power_limit_says_so() -> None:
    seen: dict[str, int] = {}
    for seed in range(6):
        for sample in run(demo(gpu_count=8, seed=seed), 300):
            for gpu in sample.gpus:
                assert gpu.power_draw_w is not None and gpu.power_limit_w is not None
                capped = gpu.clock_event_reasons == ("sw_power_cap",)
                assert capped == (gpu.power_draw_w >= 0.9 * gpu.power_limit_w)
                for reason in gpu.clock_event_reasons or ():
                    seen[reason] = seen.get(reason, 0) + 1

    assert set(seen) == {"gpu_idle", "sw_power_cap"}


def test_pcie_repeats_between_five_second_readings_like_the_nvml_source() -> None:
    samples = run(demo(gpu_count=2, seed=1), 20)

    readings = [sample.gpus[0].pcie_rx_bytes_per_s for sample in samples]
    assert all(readings[i] == readings[i - i % 5] for i in range(20))
    assert len(set(readings)) == 4  # it still moves: a new reading every 5 ticks


def test_demo_processes_run_in_slurm_jobs_containers_both_or_neither() -> None:
    """``--demo`` shows the job and container columns filled as on a real cluster: most
    processes in Slurm jobs, notebooks and an inference server in containers, a notebook
    in both, and the display server and hidden rows in neither."""
    samples = run(demo(gpu_count=8, seed=0, churn=0.5), 40)
    seen: dict[int, tuple[str | None, str | None]] = {}
    for sample in samples:
        for process in sample.processes:
            ids = (process.job_id, process.container_id)
            assert seen.setdefault(process.pid, ids) == ids  # stable for a process's life
            assert process.job_id is None or re.fullmatch("[0-9]{7}", process.job_id)
            assert process.container_id is None or re.fullmatch(
                "[0-9a-f]{12}", process.container_id
            )
            if not process.visible or process.kind is ProcessKind.GRAPHICS:
                assert ids == (None, None)
    kinds = {(job is not None, container is not None) for job, container in seen.values()}
    assert kinds == {(True, False), (False, True), (True, True), (False, False)}
    jobs = [job for job, _ in seen.values() if job is not None]
    assert len(jobs) > len(seen) / 2 and len(set(jobs)) == len(jobs)


def test_the_ids_draw_no_random_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the ids, a seed gives the same server as with them: screenshots of a seed
    did not change when the ids were added."""
    with_ids = run(demo(gpu_count=8, seed=4, churn=0.5), 30)
    monkeypatch.setattr(demo_module, "_placement", lambda process: (None, None))
    without = run(demo(gpu_count=8, seed=4, churn=0.5), 30)

    def no_ids(sample: Sample) -> Sample:
        processes = tuple(
            dataclasses.replace(process, job_id=None, container_id=None)
            for process in sample.processes
        )
        return dataclasses.replace(sample, processes=processes)

    assert [no_ids(sample) for sample in with_ids] == without
    assert any(p.job_id for sample in with_ids for p in sample.processes)
