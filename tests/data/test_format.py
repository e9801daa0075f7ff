"""The shared formatting helpers that both the dashboard and ``gpumon once`` rely on."""

from __future__ import annotations

import os

import pytest

from gpumon.data import format as fmt
from gpumon.data.model import GpuStats

# Temperature colours -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("temperature", "level"),
    [
        (60, "normal"),
        (77, "normal"),  # 16 °C below a 93 °C slowdown
        (78, "warm"),  # 15 °C below
        (87, "warm"),
        (88, "hot"),  # 5 °C below
        (93, "hot"),
        (105, "hot"),  # past the threshold
    ],
)
def test_temperature_level_boundaries(temperature: int, level: str) -> None:
    assert fmt.temperature_level(temperature, 93) == level


def test_unreadable_temperature_is_na() -> None:
    assert fmt.temperature_level(None, 93) == "na"
    assert fmt.temperature_level(None, None) == "na"


@pytest.mark.parametrize("slowdown", [None, 0])
def test_unknown_slowdown_assumes_90(slowdown: int | None) -> None:
    assert fmt.DEFAULT_SLOWDOWN_C == 90
    assert fmt.temperature_level(74, slowdown) == "normal"
    assert fmt.temperature_level(75, slowdown) == "warm"
    assert fmt.temperature_level(85, slowdown) == "hot"


def test_a_hot_running_gpu_with_a_high_threshold_stays_normal() -> None:
    assert fmt.temperature_level(86, 110) == "normal"


# Truncation ----------------------------------------------------------------------------


def test_truncate_marks_the_cut_with_an_ellipsis() -> None:
    assert fmt.truncate("python train.py", 8) == "python …"
    assert fmt.truncate("python train.py", 8, "~") == "python ~"
    assert fmt.truncate("python train.py", 8, fmt.ASCII_ELLIPSIS) == "python ~"


@pytest.mark.parametrize("ellipsis", ["…", "~"])
def test_truncate_width_edges(ellipsis: str) -> None:
    text = "abcdef"
    assert fmt.truncate(text, 0, ellipsis) == ""
    assert fmt.truncate(text, -3, ellipsis) == ""
    assert fmt.truncate(text, 1, ellipsis) == ellipsis
    assert fmt.truncate(text, 5, ellipsis) == "abcd" + ellipsis
    assert fmt.truncate(text, 6, ellipsis) == text  # exact length: nothing cut
    assert fmt.truncate(text, 40, ellipsis) == text
    assert fmt.truncate("", 3, ellipsis) == ""


@pytest.mark.parametrize("width", range(0, 9))
def test_truncate_never_exceeds_width(width: int) -> None:
    assert len(fmt.truncate("abcdef", width)) <= width


def test_dashboard_glyphs_truncate_with_their_own_ellipsis() -> None:
    from gpumon.ui.widgets.lines import Glyphs

    assert Glyphs(ascii_only=False).truncate("abcdef", 4) == "abc…"
    assert Glyphs(ascii_only=True).truncate("abcdef", 4) == "abc~"
    assert Glyphs(ascii_only=True).truncate("abcdef", 6) == "abcdef"
    assert Glyphs(ascii_only=True).truncate("abcdef", 0) == ""


# Short UUIDs ---------------------------------------------------------------------------

GPU_UUID = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
MIG_UUID = "MIG-9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0"


@pytest.mark.parametrize(
    ("uuid", "short"),
    [
        (GPU_UUID, "GPU-1a2b3c4d"),
        (MIG_UUID, "MIG-9f8e7d6c"),
        ("GPU-abc", "GPU-abc"),  # shorter than 8 after the prefix: kept whole
        ("0123456789abcdef0123", "0123456789ab"),  # no dash: first 12 characters
        ("nodash", "nodash"),
        ("GPU-", "GPU-"),  # nothing after the dash
        ("", ""),
    ],
)
def test_short_uuid(uuid: str, short: str) -> None:
    assert fmt.short_uuid(uuid) == short


def test_model_short_uuid_is_the_same_function() -> None:
    gpu = GpuStats(index=0, uuid=GPU_UUID)
    assert gpu.short_uuid == fmt.short_uuid(GPU_UUID) == "GPU-1a2b3c4d"


# Locale --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "utf8"),
    [
        ({"LANG": "C"}, False),
        ({}, False),
        ({"LANG": "en_US.UTF-8"}, True),
        ({"LANG": "en_US.utf8"}, True),
        ({"LANG": "C.UTF8"}, True),
        ({"LC_ALL": "POSIX", "LANG": "en_US.UTF-8"}, False),
        ({"LC_ALL": "C.utf8", "LANG": "C"}, True),
        ({"LC_CTYPE": "C", "LANG": "en_US.UTF-8"}, False),
        ({"LC_ALL": "", "LANG": "en_US.UTF-8"}, True),  # empty means not set
        ({"LANG": "de_DE.ISO-8859-1"}, False),
        ({"GPUMON_ASCII": "1", "LANG": "en_US.UTF-8"}, False),
        ({"GPUMON_ASCII": "0", "LANG": "en_US.UTF-8"}, True),
        ({"GPUMON_ASCII": "", "LANG": "en_US.UTF-8"}, True),
    ],
)
def test_locale_is_utf8(environ: dict[str, str], utf8: bool) -> None:
    assert fmt.locale_is_utf8(environ) is utf8


def test_once_cuts_commands_with_the_locale_s_ellipsis(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpumon once`` on a terminal: ``…`` in a UTF-8 locale, ``~`` otherwise."""
    from gpumon.commands import once
    from gpumon.data.model import GpuProcess, HostStats, ProcessKind, Sample

    gpu = GpuStats(index=0, uuid=GPU_UUID, name="Test GPU")
    process = GpuProcess(
        gpu_index=0,
        gpu_uuid=GPU_UUID,
        pid=4242,
        kind=ProcessKind.COMPUTE,
        gpu_memory_bytes=1 << 30,
        user="alice",
        command="python " + "x" * 200,
    )
    host = HostStats("h", None, None, None, None, None, None)
    sample = Sample(0.0, host, None, (gpu,), (process,))

    def last_char(ascii_only: bool | None = None) -> str:
        table = once.render_table(sample, width=60, ascii_only=ascii_only)
        return table.splitlines()[-1][-1]

    assert last_char(ascii_only=False) == "…"
    assert last_char(ascii_only=True) == "~"
    for name in ("LC_ALL", "LC_CTYPE", "GPUMON_ASCII"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C")
    assert last_char() == "~"
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    assert last_char() == "…"


def test_pythons_own_locale_coercion_is_not_a_utf8_terminal() -> None:
    """Started in the C locale, CPython sets LC_CTYPE=C.UTF-8 itself (PEP 538)."""
    assert not fmt.locale_is_utf8({"LC_CTYPE": "C.UTF-8"})
    assert not fmt.locale_is_utf8({"LC_CTYPE": "C.UTF-8", "LANG": "C"})
    assert fmt.locale_is_utf8({"LC_CTYPE": "C.UTF-8", "LANG": "en_US.UTF-8"})
    assert fmt.locale_is_utf8({"LC_ALL": "C.UTF-8"})


def test_a_real_interpreter_started_without_a_locale_draws_ascii() -> None:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG"))}
    env.pop("GPUMON_ASCII", None)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from gpumon.data.format import locale_is_utf8; print(locale_is_utf8())",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "N/A"),
        (0, "0s"),
        (42.9, "42s"),
        (60, "1m"),
        (17 * 60 + 3, "17m"),  # no seconds past the first minute: fewer bytes per refresh
        (3600 + 2 * 60 + 3, "1h02m"),
        (3 * 86_400 + 4 * 3600 + 59, "3d04h"),
    ],
)
def test_elapsed_time_is_as_precise_as_is_useful(seconds: float | None, shown: str) -> None:
    assert fmt.duration(seconds) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "N/A"),
        (0, "<1m"),
        (59.9, "<1m"),  # a young job stands out without a cell that ticks every second
        (60, "1m"),
        (3600 + 2 * 60 + 3, "1h02m"),
    ],
)
def test_running_time_in_the_table_has_one_step_a_minute(seconds: float | None, shown: str) -> None:
    assert fmt.running_time(seconds) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "N/A"),
        (0, "0s"),
        (42.9, "42s"),
        (60, "1m00s"),
        (17 * 60 + 4, "17m04s"),
        (5 * 3600 + 17 * 60 + 4, "5h17m04s"),
        (3 * 86_400 + 4 * 3600 + 5 * 60 + 6, "3d04h05m06s"),
    ],
)
def test_precise_time_keeps_the_seconds_at_every_scale(seconds: float | None, shown: str) -> None:
    assert fmt.duration(seconds, precise=True) == shown
    assert fmt.running_time(seconds, precise=True) == shown  # no <1m: seconds were asked for
