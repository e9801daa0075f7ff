"""`gpumon status`: the one-line tmux summary, its --format, and its failures."""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpumon.cli import main
from gpumon.commands import status
from gpumon.data.model import (
    DriverInfo,
    GpuStats,
    GpuUnavailable,
    HostStats,
    Sample,
    UnavailableReason,
)
from gpumon.sampling import snapshot
from tests.support.samples import make_process

GIB = 1024**3
ROOT = Path(__file__).resolve().parents[2]


def make_sample(*gpus: GpuStats, simulated: bool = False) -> Sample:
    return Sample(
        timestamp_s=1_700_000_000.0,
        host=HostStats("node7", None, None, None, None, None, None),
        driver=DriverInfo("550.54.15", "12.4", None),
        gpus=gpus,
        simulated=simulated,
    )


def busy_gpu(index: int, **fields: object) -> GpuStats:
    values: dict[str, Any] = dict(
        index=index,
        uuid=f"GPU-{index:08x}-0000-0000-0000-000000000000",
        name="NVIDIA H100 80GB HBM3",
        temperature_c=61,
        utilization_gpu_pct=87,
        utilization_memory_pct=35,
        memory_used_bytes=int(12.3 * GIB),
        memory_total_bytes=80 * GIB,
        power_draw_w=512.6,
        power_limit_w=700.0,
        fan_pct=None,
    )
    values.update(fields)
    return GpuStats(**values)


def run_status(monkeypatch: pytest.MonkeyPatch, argv: list[str], sample: Sample) -> tuple[int, str]:
    monkeypatch.setattr(snapshot, "take_sample", lambda args, **options: sample)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    return main(["status", *argv]), out.getvalue()


def test_default_line_is_one_cell_per_gpu_utilisation_and_memory_percent() -> None:
    sample = make_sample(busy_gpu(0), busy_gpu(1, utilization_gpu_pct=3, memory_used_bytes=0))
    assert status.status_line(sample) == "GPU 0:87/15% 1:3/0%"


def test_eight_busy_gpus_leave_room_for_a_clock_in_tmux_120_columns() -> None:
    """The README's tmux line is `#(gpumon status) | %H:%M` in status-right-length 120."""
    full = [busy_gpu(i, utilization_gpu_pct=100, memory_used_bytes=80 * GIB) for i in range(8)]
    worst = max(
        status.status_line(make_sample(*full, simulated=True)),
        status.status_line(make_sample(*(busy_gpu(i, utilization_gpu_pct=None) for i in range(8)))),
        key=len,
    )
    assert len(worst + " | 12:00") <= 120
    assert worst.startswith("DEMO GPU 0:100/100% 1:100/100%")


def test_demo_line_starts_with_demo() -> None:
    line = status.status_line(make_sample(busy_gpu(0), simulated=True))
    assert line == "DEMO GPU 0:87/15%"


def test_lost_gpu_and_na_readings() -> None:
    sample = make_sample(
        busy_gpu(0, temperature_c=None, utilization_gpu_pct=None),
        GpuStats(index=1, uuid="GPU-lost", lost=True),
        busy_gpu(2, memory_used_bytes=None),
    )
    line = status.status_line(sample)
    assert line == "GPU 0:N/A/15% 1:LOST 2:87/N/A%"


def test_custom_format_and_separator(monkeypatch: pytest.MonkeyPatch) -> None:
    sample = make_sample(busy_gpu(0), busy_gpu(1, memory_used_bytes=40 * GIB))
    code, out = run_status(
        monkeypatch,
        [
            "--format",
            "{index}:{util:>4} {mem_pct} {power}/{power_limit} {fan}",
            "--separator",
            ";",
        ],
        sample,
    )
    assert code == 0
    assert out == "0: 87% 15% 513W/700W N/A;1: 87% 50% 513W/700W N/A\n"


def test_prefix_option(monkeypatch: pytest.MonkeyPatch) -> None:
    sample = make_sample(busy_gpu(0))
    assert run_status(monkeypatch, ["--prefix", "gpu: "], sample) == (0, "gpu: 0:87/15%\n")
    custom = ["--format", "{util}", "--prefix", "> "]
    assert run_status(monkeypatch, custom, sample) == (0, "> 87%\n")


def test_the_old_default_is_one_format_away(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = run_status(
        monkeypatch,
        ["--format", "GPU{index} {util} {mem_used} {temp}", "--separator", " | "],
        make_sample(busy_gpu(0), busy_gpu(1, utilization_gpu_pct=3, temperature_c=35)),
    )
    assert (code, out) == (0, "GPU0 87% 12.3G 61°C | GPU1 3% 12.3G 35°C\n")


def test_every_documented_field_can_be_used() -> None:
    template = " ".join(f"{{{name}}}" for name in status.FIELDS)
    assert status.check_template(template) is None
    fields = status.gpu_fields(busy_gpu(3))
    assert set(fields) == set(status.FIELDS)
    assert fields["short_uuid"] == "GPU-00000003"
    assert fields["mem_total"] == "80.0G"


@pytest.mark.parametrize(
    ("template", "complaint"),
    [
        ("{nope}", "unknown field {nope}"),
        ("{util", "expected '}'"),
        ("{}", "named fields"),
        # No attribute or index access, no conversions, bounded widths.
        ("{index.__class__}", "unknown field {index.__class__}"),
        ("{uuid[0]}", "unknown field {uuid[0]}"),
        ("{util!r}", "conversions are not supported"),
        ("{util:>999999999}", "a field takes [[fill]align][width][.precision]"),
        ("{util:>201}", "width 201 is more than 200"),
        ("{util:.5000}", "precision 5000 is more than 200"),
        ("{util:{index}}", "a field takes"),
        ("{util:=5}", "a field takes"),
        ("{util:\x1b>5}", "fill character must be printable"),
    ],
)
def test_bad_format_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    template: str,
    complaint: str,
) -> None:
    code, out = run_status(monkeypatch, ["--format", template], make_sample(busy_gpu(0)))
    err = capsys.readouterr().err
    assert code == 2
    assert out == ""
    assert complaint in err and err.count("\n") == 1
    assert "\x1b" not in err and "<class" not in err


def test_a_bounded_spec_still_aligns_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = run_status(
        monkeypatch,
        ["--format", "{index}:{util:>5}|{temp:*^8}|{name:.6}"],
        make_sample(busy_gpu(0)),
    )
    assert code == 0
    assert out.startswith("0:")
    assert "|" in out and len(out.strip().split("|")[1]) == 8


def test_unavailable_sample_exits_1_with_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = Sample(
        timestamp_s=0.0,
        host=HostStats("node7", None, None, None, None, None, None),
        driver=None,
        gpus=(),
        unavailable=GpuUnavailable(
            UnavailableReason.VERSION_MISMATCH, "Driver/library version mismatch.", "NVML: x"
        ),
    )
    code, out = run_status(monkeypatch, [], sample)
    assert code == 1
    assert out == "GPU N/A\n"  # a tmux bar says so rather than going blank
    assert capsys.readouterr().err == (
        "gpumon: no NVIDIA GPU data: Driver/library version mismatch. (NVML: x)\n"
    )


def test_real_command_with_demo_and_without_a_driver() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpumon", "status", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ},
            timeout=60,
        )

    demo = run("--demo", "--demo-gpus", "3")
    assert demo.returncode == 0
    assert demo.stdout.startswith("DEMO GPU 0:")
    # The demo's third GPU is idle: FREE in place of its 0/0%.
    assert demo.stdout.count("\n") == 1 and demo.stdout.count("%") == 2
    assert demo.stdout.rstrip().endswith(" 2:FREE")
    first = run("--demo", "--demo-gpus", "3", "--free-first")
    assert first.returncode == 0 and first.stdout.startswith("DEMO free 2 | GPU 0:")

    real = run()
    if real.returncode == 0:
        pytest.skip("this machine has a working NVIDIA driver")
    assert real.returncode == 1
    assert real.stdout == "GPU N/A\n"
    assert real.stderr.startswith("gpumon: no NVIDIA GPU data: ")


@pytest.mark.parametrize(("template", "pcie"), [(None, False), ("{index} {pcie_rx:>6}", True)])
def test_pcie_is_read_only_when_the_line_shows_it(
    monkeypatch: pytest.MonkeyPatch, template: str | None, pcie: bool
) -> None:
    """NVML's PCIe throughput call blocks ~20 ms per GPU: a tmux line without it skips it."""
    assert options_asked(monkeypatch, template)["pcie"] is pcie


def options_asked(monkeypatch: pytest.MonkeyPatch, template: str | None) -> dict[str, object]:
    """What ``gpumon status [--format template]`` asks of take_sample."""
    asked: dict[str, object] = {}

    def take(settings: object, **options: object) -> Sample:
        asked.update(options)
        return make_sample(busy_gpu(0))

    monkeypatch.setattr(snapshot, "take_sample", take)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert main(["status", *(["--format", template] if template else [])]) == 0
    return asked


@pytest.mark.parametrize(
    ("template", "details"),
    [
        (None, False),  # the default line: utilisation and memory only
        ("{index}:{util}:{temp}", False),
        ("{index}:{gr_clock}", True),  # the graphics clock is read only when shown
        ("{index}:{enc}/{dec}", True),
    ],
)
def test_fields_read_only_on_demand_are_read_when_the_line_shows_them(
    monkeypatch: pytest.MonkeyPatch, template: str | None, details: bool
) -> None:
    """The GPU screen's fields (graphics clock, video engines, energy, ...) cost NVML calls
    a tmux line without them does not need."""
    assert options_asked(monkeypatch, template)["details"] is details


def test_a_sample_taken_without_details_reads_them_as_not_read_not_na() -> None:
    from gpumon.data.model import ON_DEMAND_GPU_FIELDS
    from gpumon.sources.base import read_details
    from tests.sources.nvml.test_nvml_source import make_source
    from tests.support.fake_nvml import FakeNvml, make_gpu

    source = make_source(FakeNvml([make_gpu(0, clock_graphics=1755)]))
    assert read_details(source, False)
    sample = source.sample()
    assert sample.unread_gpu_fields == ON_DEMAND_GPU_FIELDS
    assert sample.gpus[0].clock_graphics_mhz is None


def test_free_first_leads_with_the_free_gpus_within_120_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`status --free-first`: what a glance at the bar is for comes first, 8 GPUs in 120."""
    free_ones = {3, 6, 7}
    gpus = [
        busy_gpu(i, utilization_gpu_pct=0, memory_used_bytes=0)
        if i in free_ones
        else busy_gpu(i, utilization_gpu_pct=100, memory_used_bytes=80 * GIB)
        for i in range(8)
    ]
    sample = dataclasses.replace(
        make_sample(*gpus, simulated=True), processes_read=True, processes=()
    )
    busy = tuple(
        dataclasses.replace(make_process(gpus[i], 100 + i), gpu_memory_bytes=GIB)
        for i in range(8)
        if i not in free_ones
    )
    code, out = run_status(
        monkeypatch, ["--free-first"], dataclasses.replace(sample, processes=busy)
    )
    assert code == 0
    assert out.startswith("DEMO free 3,6,7 | GPU 0:100/100% ")
    assert len(out.rstrip("\n") + " | 12:00") <= 120
    none_free = dataclasses.replace(
        sample, processes=busy + tuple(make_process(gpus[i], 200 + i) for i in free_ones)
    )
    assert run_status(monkeypatch, ["--free-first"], none_free)[1].startswith("DEMO 0 free | GPU ")
    unknown = dataclasses.replace(sample, processes_read=False)
    assert run_status(monkeypatch, ["--free-first"], unknown)[1].startswith("DEMO free ? | GPU ")
