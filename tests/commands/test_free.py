"""FREE in the headless outputs: `once` marks it, `once --json` says it, `status` shows it,
`export` serves it; and a GPU whose processes are unknown is never FREE in any of them."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gpumon.cli import main
from gpumon.commands import once, status
from gpumon.commands.export import collector as export
from gpumon.config import Settings
from gpumon.data import painting
from gpumon.data.free import free_gpu_indices
from gpumon.data.model import GpuStats, MigInstance, Sample
from gpumon.sampling import snapshot
from gpumon.sources import base
from tests.commands.test_once import GIB, MIB, gpu, process, troubled_sample, validate

IDLE = {"memory_used_bytes": 3 * MIB, "utilization_gpu_pct": 0}


def shared_server(**sample_fields: Any) -> Sample:
    """GPU 0 busy (one process), 1 idle, 2 idle but holding 2 GiB nobody lists, 3 idle with
    its process list refused, 4 lost, 5 idle with memory in use N/A."""
    gpus = (
        gpu(0),
        gpu(1, **IDLE),
        gpu(2, memory_used_bytes=2 * GIB),
        gpu(3, **IDLE, processes_error="NVML: Insufficient Permissions"),
        GpuStats(index=4, uuid="GPU-00000004-lost", name="NVIDIA A100-SXM4-80GB", lost=True),
        gpu(5, memory_used_bytes=None),
    )
    base_sample = troubled_sample()
    return dataclasses.replace(
        base_sample, gpus=gpus, processes=(process(gpus[0], 4242),), **sample_fields
    )


def run_cli(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], sample: Sample
) -> tuple[int, str, dict[str, Any]]:
    """Run gpumon with ``sample`` in place of a real one; the options take_sample got too."""
    asked: dict[str, Any] = {}

    def take(settings: Settings, **options: Any) -> Sample:
        asked.update(options)
        return sample

    monkeypatch.setattr(snapshot, "take_sample", take)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    return main(argv), out.getvalue(), asked


def gpu_lines(text: str) -> dict[int, str]:
    return {int(line[1]): line for line in text.splitlines() if line.startswith("[")}


def test_only_the_idle_gpu_whose_processes_are_known_is_free() -> None:
    assert free_gpu_indices(shared_server(), 1024) == {1}


# --- once -----------------------------------------------------------------------------------


def test_once_marks_free_gpus_on_their_line_and_no_other(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run_cli(monkeypatch, ["once", "--color", "never"], shared_server())

    assert code == 0
    lines = gpu_lines(out)
    assert lines[1].endswith("| FREE")
    assert [index for index, line in lines.items() if "FREE" in line] == [1]


def test_once_takes_the_threshold_from_the_config_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("free_threshold_mib = 4096\n")

    _, out, _ = run_cli(monkeypatch, ["--config", str(config), "once"], shared_server())

    # 2 GiB in use is FREE under a 4 GiB threshold; unknown memory still is not.
    assert [index for index, line in gpu_lines(out).items() if "FREE" in line] == [1, 2]


def test_once_without_processes_marks_nothing_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """--no-processes reads none (the demo source lists them anyway): nothing is known free."""
    code, out, asked = run_cli(monkeypatch, ["once", "--no-processes"], shared_server())

    assert code == 0 and asked["processes"] is False
    assert "FREE" not in out


def test_the_demo_without_processes_marks_nothing_free_either(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert main(["once", "--demo", "--demo-gpus", "3"]) == 0
    assert "| FREE" in sys.stdout.getvalue()  # the demo's third GPU is idle

    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert main(["once", "--demo", "--demo-gpus", "3", "--no-processes"]) == 0
    assert "FREE" not in sys.stdout.getvalue()


def test_free_is_green_on_a_terminal() -> None:
    sample = shared_server()
    table = once.render_table(sample, color=True, free=free_gpu_indices(sample, 1024))
    assert f"\x1b[{painting.BOLD};{painting.GREEN}mFREE\x1b[0m" in table


# --- once --json ----------------------------------------------------------------------------


def test_json_free_is_true_only_where_the_processes_are_known_and_none_run() -> None:
    document = snapshot.sample_to_dict(shared_server())

    validate(document)
    assert [entry["free"] for entry in document["gpus"]] == [
        False,  # busy
        True,
        False,  # 2 GiB in use
        False,  # refused process list: unknown
        False,  # lost
        False,  # memory N/A
    ]


def test_json_free_follows_the_threshold() -> None:
    document = snapshot.sample_to_dict(shared_server(), free_threshold_mib=4096)
    assert [entry["index"] for entry in document["gpus"] if entry["free"]] == [1, 2]


@pytest.mark.parametrize(
    ("sample", "include_processes"),
    [
        (shared_server(processes_read=False), True),  # the source did not read them
        (shared_server(), False),  # --no-processes (the demo reads them anyway)
    ],
    ids=["processes_read_false", "no_processes"],
)
def test_json_is_never_free_when_processes_were_not_read(
    sample: Sample, include_processes: bool
) -> None:
    document = snapshot.sample_to_dict(sample, include_processes=include_processes)

    validate(document)
    assert not any(entry["free"] for entry in document["gpus"])
    assert all(entry["processes"] is None for entry in document["gpus"])
    assert document["users"] is None


def test_a_mig_gpu_whose_instances_are_unreadable_is_not_free() -> None:
    mig_on = gpu(0, **{**IDLE, "utilization_gpu_pct": None}, mig_mode=True, mig_instances=None)
    sample = dataclasses.replace(shared_server(), gpus=(mig_on,), processes=())

    document = snapshot.sample_to_dict(sample)

    validate(document)
    assert document["gpus"][0]["free"] is False
    assert document["gpus"][0]["mig_instances"] is None


def test_the_free_threshold_default_is_the_settings_default() -> None:
    assert Settings().free_threshold_mib == snapshot.DEFAULT_FREE_THRESHOLD_MIB


# --- status ---------------------------------------------------------------------------------


def test_status_shows_free_in_place_of_zero_percent(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, asked = run_cli(monkeypatch, ["status"], shared_server())

    assert code == 0
    assert out == "GPU 0:87/15% 1:FREE 2:87/2% 3:0/0%? 4:LOST 5:87/N/A%\n"  # 3: refused list
    # Process lists from NVML to tell FREE, but nothing about the processes from the host.
    assert asked["processes"] is True and asked["host_details"] is False


def test_status_free_field_for_a_format(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, asked = run_cli(
        monkeypatch, ["status", "--format", "{index}{free:>5}", "--separator", "|"], shared_server()
    )

    assert code == 0
    assert out == "0     |1 FREE|2     |3     |4:LOST|5     \n"
    assert asked["processes"] is True and asked["host_details"] is False


def test_status_reads_no_process_list_for_a_format_without_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tmux runs it every few seconds: a line that cannot show FREE makes no process call."""
    code, out, asked = run_cli(
        monkeypatch, ["status", "--format", "{index}:{util}"], shared_server(processes_read=False)
    )

    assert code == 0 and asked["processes"] is False
    assert "FREE" not in out


def test_status_with_no_process_list_read_marks_nothing_free() -> None:
    sample = shared_server(processes_read=False)
    line = status.status_line(sample, free=free_gpu_indices(sample, 1024))
    assert "FREE" not in line and "1:0/0%" in line


def test_eight_free_gpus_fit_as_well_as_eight_busy_ones() -> None:
    idle = tuple(gpu(i, **IDLE) for i in range(8))
    sample = dataclasses.replace(shared_server(), gpus=idle, processes=(), simulated=True)

    line = status.status_line(sample, free=free_gpu_indices(sample, 1024))

    assert line == "DEMO GPU " + " ".join(f"{i}:FREE" for i in range(8))
    assert len(line + " | 12:00") <= 120


# --- export ---------------------------------------------------------------------------------


def free_series(sample: Sample, threshold_mib: int = 1024) -> dict[str, float]:
    families = export.build_families(sample, free_threshold_mib=threshold_mib)
    (family,) = [f for f in families if f.name == "gpumon_gpu_free"]
    return {s.labels["gpu"]: s.value for s in family.samples}


def test_export_free_gauge_is_1_or_0_and_absent_when_unknown() -> None:
    # GPU 3 (refused list), 4 (lost) and 5 (memory N/A, no process) cannot be told.
    assert free_series(shared_server()) == {"0": 0.0, "1": 1.0, "2": 0.0}
    assert free_series(shared_server(), threshold_mib=4096) == {"0": 0.0, "1": 1.0, "2": 1.0}


def test_export_free_is_0_for_a_busy_gpu_even_with_memory_na() -> None:
    busy = gpu(0, memory_used_bytes=None)
    sample = dataclasses.replace(shared_server(), gpus=(busy,), processes=(process(busy, 1),))
    assert free_series(sample) == {"0": 0.0}


def test_export_free_is_absent_under_mig_with_unreadable_instances() -> None:
    mig_on = gpu(0, **IDLE, mig_mode=True, mig_instances=None)
    readable = gpu(
        1, **IDLE, mig_mode=True, mig_instances=(MigInstance(1, 0, 1, 0, "7g", "MIG-a"),)
    )
    sample = dataclasses.replace(shared_server(), gpus=(mig_on, readable), processes=())
    assert free_series(sample) == {"1": 1.0}


def test_the_collector_uses_the_threshold_it_is_given() -> None:
    collector = export.SampleCollector(free_threshold_mib=4096)
    collector.update(shared_server())
    (family,) = [f for f in collector.collect() if f.name == "gpumon_gpu_free"]
    assert {s.labels["gpu"]: s.value for s in family.samples}["2"] == 1.0
    assert "4096 MiB" in family.documentation


# --- the plumbing: process lists without host details -----------------------------------------


class RecordingNvmlSource:
    """Stands in for NvmlSource: records what it was built with."""

    simulated = False
    made: list[dict[str, Any]] = []

    def __init__(self, **options: Any) -> None:
        RecordingNvmlSource.made.append(options)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    import gpumon.sources.nvml.source as nvml

    RecordingNvmlSource.made = []
    monkeypatch.setattr(nvml, "NvmlSource", RecordingNvmlSource)
    return RecordingNvmlSource.made


def test_host_details_off_reaches_the_nvml_source(recorded: list[dict[str, Any]]) -> None:
    base.open_source(host_details=False, pcie=False)
    assert recorded == [{"read_processes": True, "read_pcie": False, "read_host_details": False}]


def test_host_details_stay_on_for_every_other_mode(recorded: list[dict[str, Any]]) -> None:
    base.open_source()
    base.open_source(processes=False)
    assert recorded == [
        {"read_processes": True, "read_pcie": True, "read_host_details": True},
        {"read_processes": False, "read_pcie": True, "read_host_details": True},
    ]


def test_the_demo_ignores_host_details() -> None:
    source = base.open_source(demo=True, demo_gpus=2, host_details=False)
    assert source.sample().processes  # simulated processes, as ever


def test_take_sample_hands_host_details_to_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: dict[str, Any] = {}

    class Source:
        simulated = False  # GpuSource's attribute: a real driver's read is bounded in time

        def sample(self) -> Sample:
            return shared_server()

        def close(self) -> None:
            asked["closed"] = True

    def source_for(settings: Settings, **options: Any) -> Source:
        asked.update(options)
        return Source()

    monkeypatch.setattr("gpumon.sources.base.source_for", source_for)
    snapshot.take_sample(Settings(), pcie=False, host_details=False)
    assert asked == {"processes": True, "pcie": False, "host_details": False, "closed": True}


def test_json_free_output_of_the_real_command_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run_cli(monkeypatch, ["once", "--json"], shared_server())
    assert code == 0
    document = json.loads(out)
    validate(document)
    assert [entry["index"] for entry in document["gpus"] if entry["free"]] == [1]
