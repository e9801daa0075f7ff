"""`gpumon once`: the text table, its colours and widths, the JSON and its schema, no driver."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpumon.cli import main
from gpumon.commands import once
from gpumon.data import painting
from gpumon.data.model import (
    DriverInfo,
    GpuProcess,
    GpuStats,
    GpuUnavailable,
    HostStats,
    MigInstance,
    ProcessKind,
    Sample,
    UnavailableReason,
)
from gpumon.sampling import snapshot

GIB = 1024**3
MIB = 1024**2
FIXED_TIME = 1_700_000_000.0
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ROOT = Path(__file__).resolve().parents[2]
LONG_COMMAND = "python train.py " + " ".join(f"--option-{n} value-{n}" for n in range(12))


def gpu(index: int, **fields: object) -> GpuStats:
    values: dict[str, Any] = dict(
        index=index,
        uuid=f"GPU-{index:08x}-aaaa-bbbb-cccc-dddddddddddd",
        name="NVIDIA A100-SXM4-80GB",
        pci_bus_id=f"00000000:{index + 7:02X}:00.0",
        persistence_mode=True,
        display_active=False,
        performance_state=0,
        fan_pct=None,  # SXM boards have no fan of their own
        temperature_c=61,
        temperature_slowdown_c=90,
        temperature_shutdown_c=95,
        power_draw_w=312.4,
        power_limit_w=400.0,
        memory_used_bytes=12 * GIB,
        memory_total_bytes=80 * GIB,
        memory_reserved_bytes=512 * MIB,
        utilization_gpu_pct=87,
        utilization_memory_pct=40,
        clock_sm_mhz=1410,
        clock_memory_mhz=1593,
        compute_mode="Default",
        ecc_errors_uncorrected_volatile=0,
        mig_mode=False,
    )
    values.update(fields)
    return GpuStats(**values)


def process(gpu_stats: GpuStats, pid: int, **fields: object) -> GpuProcess:
    values: dict[str, Any] = dict(
        gpu_index=gpu_stats.index,
        gpu_uuid=gpu_stats.uuid,
        pid=pid,
        kind=ProcessKind.COMPUTE,
        gpu_memory_bytes=4 * GIB,
        user="alice",
        command="python train.py",
        cpu_pct=98.5,
        rss_bytes=3 * GIB,
        elapsed_s=3600.0,
    )
    values.update(fields)
    return GpuProcess(**values)


def troubled_sample(*, simulated: bool = False) -> Sample:
    """Four GPUs: a healthy one, a short-named one, a lost one, one with N/A readings."""
    gpus = (
        gpu(0),
        gpu(1, name="T4", temperature_c=9, utilization_gpu_pct=100, power_draw_w=7.0),
        GpuStats(index=2, uuid="GPU-00000002-lost", name="NVIDIA A100-SXM4-80GB", lost=True),
        gpu(
            3,
            name=None,
            temperature_c=None,
            utilization_gpu_pct=None,
            power_draw_w=None,
            memory_used_bytes=None,
            ecc_errors_uncorrected_volatile=None,
        ),
    )
    processes = (
        process(gpus[0], 4242, command=LONG_COMMAND),
        process(gpus[0], 1_234_567, user="a-very-long-user-name", kind=ProcessKind.BOTH),
        process(gpus[1], 77, gpu_memory_bytes=None, kind=ProcessKind.GRAPHICS),
        process(gpus[3], 3_999_999, user=None, command=None, cpu_pct=None, visible=False),
    )
    return Sample(
        timestamp_s=FIXED_TIME,
        host=HostStats("node7", 12.0, (1.0, 1.0, 1.0), GIB, 8 * GIB, 0, GIB),
        driver=DriverInfo("550.54.15", "12.4", "12.550.54.15"),
        gpus=gpus,
        processes=processes,
        simulated=simulated,
    )


def unavailable_sample() -> Sample:
    return Sample(
        timestamp_s=FIXED_TIME,
        host=HostStats("node7", None, None, None, None, None, None),
        driver=None,
        gpus=(),
        unavailable=GpuUnavailable(
            UnavailableReason.DRIVER_NOT_LOADED,
            "The NVIDIA kernel driver is not loaded.",
            "NVML: Driver Not Loaded",
            "Load it (`sudo modprobe nvidia`).",
        ),
    )


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def run_gpumon(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        timeout=60,
    )


def run_in_process(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], sample: Sample, stdout: io.StringIO
) -> int:
    monkeypatch.setattr(snapshot, "take_sample", lambda args, **options: sample)
    monkeypatch.setattr(sys, "stdout", stdout)
    return main(argv)


def load_schema() -> dict[str, Any]:
    return json.loads(Path(snapshot.SCHEMA_PATH).read_text())


def validate(document: object) -> None:
    validator = jsonschema.Draft202012Validator(
        load_schema(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    validator.validate(document)


# --- the text table -------------------------------------------------------------------------


def test_gpu_columns_line_up_across_gpus_with_different_names() -> None:
    table = once.render_table(troubled_sample())
    gpu_lines = [line for line in table.splitlines() if line.startswith("[")]
    assert len(gpu_lines) == 4
    bar_positions = {line.index("|") for line in gpu_lines}
    assert len(bar_positions) == 1, gpu_lines  # name column sized to the longest name
    readable = [line for line in gpu_lines if "LOST" not in line]
    assert len({tuple(m.start() for m in re.finditer(r"\|", line)) for line in readable}) == 1


def test_process_columns_line_up_and_sit_below_their_gpu() -> None:
    lines = once.render_table(troubled_sample()).splitlines()
    process_lines = [line for line in lines if line.startswith("    ")]
    assert len(process_lines) == 4
    # The command starts in the same column on every process line.
    starts = {line.index("python") for line in process_lines[:3]}
    starts.add(process_lines[3].index("(not visible"))
    assert len(starts) == 1
    assert lines[1].startswith("[0]") and "4242" in lines[2] and "1234567" in lines[3]
    assert lines[4].startswith("[1]") and "77" in lines[5] and "N/A" in lines[5]
    assert lines[6].startswith("[2]") and "LOST" in lines[6]
    assert lines[7].startswith("[3]") and "3999999" in lines[8]
    assert "not visible here" in lines[8]


def test_na_fields_show_na_not_zero() -> None:
    line = once.render_table(troubled_sample()).splitlines()[7]
    assert line.count("N/A") >= 4  # name, temperature, utilisation, memory used, power draw
    assert " 0%" not in line and "0°C" not in line


def test_header_has_host_versions_and_demo_marker_only_for_simulated_data() -> None:
    real = once.render_table(troubled_sample()).splitlines()[0]
    demo = once.render_table(troubled_sample(simulated=True)).splitlines()[0]
    assert "node7" in real and "550.54.15" in real and "CUDA 12.4" in real
    assert "DEMO" not in real
    assert "DEMO (simulated data)" in demo


def test_piped_output_is_plain_and_commands_are_not_cut() -> None:
    result = run_gpumon("once", "--demo", "--demo-gpus", "8", env={"COLUMNS": "40"})
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout
    assert "DEMO (simulated data)" in result.stdout.splitlines()[0]
    assert "…" not in result.stdout
    assert any(len(line) > 40 for line in result.stdout.splitlines())


def test_on_a_terminal_commands_are_cut_to_its_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")  # the ellipsis follows the locale
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = FakeTty()
    assert run_in_process(monkeypatch, ["once", "--color", "never"], troubled_sample(), out) == 0
    process_lines = [line for line in out.getvalue().splitlines() if line.startswith("    ")]
    assert all(len(line) <= 60 for line in process_lines), process_lines
    assert any(line.endswith("…") for line in process_lines)


def test_terminal_gets_colours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "80")
    out = FakeTty()
    run_in_process(monkeypatch, ["once"], troubled_sample(), out)
    assert ANSI.search(out.getvalue())
    # Colours never change the layout: stripped, it is the plain table and user summary.
    plain = once.render_table(troubled_sample(), width=80) + once.render_users(troubled_sample())
    assert ANSI.sub("", out.getvalue()).splitlines()[1:] == plain.splitlines()[1:]


@pytest.mark.parametrize("value", ["1", "0", "false", "yes"])
def test_no_color_set_to_anything_turns_colours_off(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("NO_COLOR", value)
    out = FakeTty()
    assert run_in_process(monkeypatch, ["once", "--color", "auto"], troubled_sample(), out) == 0
    assert "\x1b[" not in out.getvalue()


def test_empty_no_color_does_not_count() -> None:
    assert painting.use_color("auto", FakeTty(), {"NO_COLOR": "", "TERM": "xterm"})
    assert not painting.use_color("auto", FakeTty(), {"TERM": "dumb"})
    assert not painting.use_color("auto", io.StringIO(), {})


def test_color_always_and_never_override_the_guess() -> None:
    result = run_gpumon("once", "--demo", "--color", "always", env={"NO_COLOR": "1"})
    assert result.returncode == 0
    assert ANSI.search(result.stdout)
    assert not painting.use_color("never", FakeTty(), {"TERM": "xterm"})


def test_temperature_colour_follows_the_gpus_slowdown_threshold() -> None:
    assert painting.RED in painting.temperature_codes(86, 90)
    assert painting.YELLOW in painting.temperature_codes(75, 90)
    assert painting.GREEN in painting.temperature_codes(60, 90)
    # The same 86 °C is fine on a GPU that slows down at 110 °C.
    assert painting.temperature_codes(86, 110) == (painting.GREEN,)
    assert painting.temperature_codes(None, 90) == ()


def test_no_processes_prints_one_line_per_gpu() -> None:
    result = run_gpumon("once", "--demo", "--demo-gpus", "3", "--no-processes")
    lines = result.stdout.splitlines()
    assert result.returncode == 0
    assert len(lines) == 4
    assert [line[:3] for line in lines[1:]] == ["[0]", "[1]", "[2]"]


# --- JSON -----------------------------------------------------------------------------------


def test_the_schema_itself_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(load_schema())


def test_demo_json_with_8_gpus_validates_against_the_schema() -> None:
    result = run_gpumon("once", "--json", "--demo", "--demo-gpus", "8", "--demo-processes", "20")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    validate(document)
    assert document["simulated"] is True
    assert document["schema_version"] == 1
    assert [entry["index"] for entry in document["gpus"]] == list(range(8))
    assert sum(len(entry["processes"]) for entry in document["gpus"]) == 20


def test_json_with_a_lost_gpu_and_na_fields_validates_and_keeps_nulls() -> None:
    sample = troubled_sample()
    document = json.loads(json.dumps(snapshot.sample_to_dict(sample)))
    validate(document)
    healthy, _, lost, partial = document["gpus"]
    assert healthy["memory_used_bytes"] == 12 * GIB
    assert healthy["power_draw_w"] == pytest.approx(312.4)
    assert healthy["fan_pct"] is None
    assert [p["pid"] for p in healthy["processes"]] == [4242, 1_234_567]
    assert healthy["processes"][1]["type"] == "C+G"
    assert lost["lost"] is True and lost["processes"] is None and lost["temperature_c"] is None
    assert partial["temperature_c"] is None and partial["name"] is None
    assert partial["processes"][0]["visible"] is False
    assert partial["processes"][0]["user"] is None
    assert document["timestamp"] == "2023-11-14T22:13:20.000Z"
    assert document["error"] is None


def test_json_has_every_model_field_and_the_schema_documents_exactly_those() -> None:
    schema = load_schema()
    gpu_schema = schema["$defs"]["gpu"]
    model_fields = {field.name for field in dataclasses.fields(GpuStats)}
    added = {"memory_unlisted_bytes", "free", "processes"}
    assert set(gpu_schema["required"]) == model_fields | added
    document = snapshot.sample_to_dict(troubled_sample())
    assert set(document["gpus"][0]) == model_fields | added
    # Strict: an undocumented field fails validation.
    document["gpus"][0]["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validate(document)


def refused_sample() -> Sample:
    """GPU 0 readable with one process; GPU 1 whose process list NVML refused."""
    gpus = (
        gpu(0),
        gpu(1, processes_error="NVML: Insufficient Permissions"),
    )
    return dataclasses.replace(troubled_sample(), gpus=gpus, processes=(process(gpus[0], 4242),))


def test_a_refused_process_list_is_null_in_json_and_na_in_the_table() -> None:
    sample = refused_sample()
    document = json.loads(json.dumps(snapshot.sample_to_dict(sample)))
    validate(document)
    readable, refused = document["gpus"]
    assert [p["pid"] for p in readable["processes"]] == [4242]
    assert refused["processes"] is None  # unknown, not "no processes"
    assert refused["processes_error"] == "NVML: Insufficient Permissions"
    lines = once.render_table(sample).splitlines()
    refused_at = next(i for i, line in enumerate(lines) if line.startswith("[1]"))
    assert lines[refused_at + 1] == "    processes: N/A (NVML: Insufficient Permissions)"


def test_json_no_processes_gives_null_not_an_empty_list() -> None:
    document = snapshot.sample_to_dict(troubled_sample(), include_processes=False)
    validate(document)
    assert all(entry["processes"] is None for entry in document["gpus"])


def test_every_schema_field_is_described_in_the_docs() -> None:
    docs = (ROOT / "docs" / "json-schema.md").read_text()
    schema = load_schema()
    names = set(schema["properties"])
    for definition in schema["$defs"].values():
        names |= set(definition["properties"])
    missing = sorted(name for name in names if f"`{name}`" not in docs)
    assert not missing


# --- no driver ------------------------------------------------------------------------------


def test_no_driver_on_this_machine_exits_1_with_a_clear_message() -> None:
    result = run_gpumon("once")
    if result.returncode == 0:
        pytest.skip("this machine has a working NVIDIA driver")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("gpumon: no NVIDIA GPU data: ")
    assert "Traceback" not in result.stderr


def test_no_driver_json_still_prints_a_valid_document_with_the_error() -> None:
    result = run_gpumon("once", "--json")
    if result.returncode == 0:
        pytest.skip("this machine has a working NVIDIA driver")
    assert result.returncode == 1
    document = json.loads(result.stdout)
    validate(document)
    assert document["gpus"] == []
    assert document["error"]["reason"] in {"library_not_found", "driver_not_loaded"}


def test_unavailable_sample_gives_exit_1_and_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    assert run_in_process(monkeypatch, ["once"], unavailable_sample(), out) == 1
    assert out.getvalue() == ""
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "gpumon: no NVIDIA GPU data: The NVIDIA kernel driver is not loaded. "
        "(NVML: Driver Not Loaded)"
    )
    assert err[1] == "gpumon: hint: Load it (`sudo modprobe nvidia`)."


def test_unavailable_sample_json_has_error_object(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    assert run_in_process(monkeypatch, ["once", "--json"], unavailable_sample(), out) == 1
    document = json.loads(out.getvalue())
    validate(document)
    assert document["error"]["reason"] == "driver_not_loaded"
    assert document["error"]["hint"] == "Load it (`sudo modprobe nvidia`)."


def mig_sample() -> Sample:
    """GPU 0 in MIG mode with two instances and a Slurm job in one; GPU 1 without MIG running
    a container's process; GPU 2 in MIG mode whose instances NVML would not tell; 3 lost."""
    instances = (
        MigInstance(0, 0, 1, 0, "3g.40gb", "MIG-aaaa", 10 * GIB, 40 * GIB),
        MigInstance(0, 1, 2, 0, "2g.20gb", "MIG-bbbb", None, None),
    )
    gpus = (
        gpu(0, mig_mode=True, utilization_gpu_pct=None, mig_instances=instances),
        gpu(1),
        gpu(2, mig_mode=True, utilization_gpu_pct=None, mig_instances=None),
        GpuStats(index=3, uuid="GPU-00000003-lost", lost=True),
    )
    processes = (
        process(gpus[0], 10, job_id="81234", gpu_instance_id=1, compute_instance_id=0),
        process(gpus[1], 20, container_id="0123456789ab"),
    )
    return dataclasses.replace(troubled_sample(), gpus=gpus, processes=processes)


def test_json_has_mig_instances_and_the_jobs_containers_and_instances_of_processes() -> None:
    document = json.loads(json.dumps(snapshot.sample_to_dict(mig_sample())))

    validate(document)
    mig, plain, unreadable, lost = document["gpus"]
    assert mig["mig_instances"] == [
        {
            "index": 0,
            "gpu_instance_id": 1,
            "compute_instance_id": 0,
            "profile": "3g.40gb",
            "uuid": "MIG-aaaa",
            "memory_used_bytes": 10 * GIB,
            "memory_total_bytes": 40 * GIB,
        },
        {
            "index": 1,
            "gpu_instance_id": 2,
            "compute_instance_id": 0,
            "profile": "2g.20gb",
            "uuid": "MIG-bbbb",
            "memory_used_bytes": None,
            "memory_total_bytes": None,
        },
    ]
    assert plain["mig_instances"] == []  # MIG off: none, known
    assert unreadable["mig_instances"] is None  # MIG on, unknown
    assert lost["mig_instances"] is None  # a lost GPU's are unknown too
    (in_job,) = mig["processes"]
    assert (in_job["job_id"], in_job["container_id"]) == ("81234", None)
    assert (in_job["gpu_instance_id"], in_job["compute_instance_id"]) == (1, 0)
    (in_container,) = plain["processes"]
    assert (in_container["job_id"], in_container["container_id"]) == (None, "0123456789ab")
    assert (in_container["gpu_instance_id"], in_container["compute_instance_id"]) == (None, None)


def test_every_schema_object_is_strict() -> None:
    """An undocumented key anywhere fails validation: the docs cannot fall behind."""
    for name, definition in load_schema()["$defs"].items():
        if definition.get("type") == "object":
            assert definition.get("additionalProperties") is False, name
            assert set(definition["required"]) == set(definition["properties"]), name
