"""The command line: options, bad input, and what it prints."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpumon import __version__
from gpumon.cli import build_parser, main


def run_gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_version() -> None:
    result = run_gpumon("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"gpumon {__version__}"


def test_help_lists_options_and_modes() -> None:
    result = run_gpumon("--help")
    assert result.returncode == 0
    for option in ("--interval", "--demo", "--demo-gpus", "--probe-python", "once", "status"):
        assert option in result.stdout


@pytest.mark.parametrize("value", ["0.1", "0", "-1", "abc", "nan"])
def test_interval_below_the_floor_is_one_clear_line(value: str) -> None:
    result = run_gpumon("--interval", value)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("gpumon: error: argument --interval")
    assert "Traceback" not in result.stderr


def test_interval_at_the_floor_is_accepted() -> None:
    args = build_parser().parse_args(["--interval", "0.25"])
    assert args.interval == 0.25


def test_demo_gpus_must_be_positive() -> None:
    result = run_gpumon("--demo", "--demo-gpus", "0")
    assert result.returncode == 2
    assert "--demo-gpus" in result.stderr and "at least 1" in result.stderr


def test_demo_options_work_before_or_after_a_subcommand() -> None:
    parser = build_parser()
    before = parser.parse_args(["--demo", "--demo-gpus", "8", "once"])
    after = parser.parse_args(["once", "--demo", "--demo-gpus", "8"])
    assert before.demo and after.demo
    assert before.demo_gpus == after.demo_gpus == 8


def test_dashboard_without_a_terminal_says_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--demo"]) == 2
    assert "gpumon once" in capsys.readouterr().err
