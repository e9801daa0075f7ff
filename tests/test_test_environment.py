"""The tests pass whatever ``GPUMON_*`` variables the developer's shell sets: conftest.py
clears them all (every settings variable is named ``GPUMON_...``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.config import SETTINGS

ROOT = next(path for path in Path(__file__).resolve().parents if (path / "pyproject.toml").exists())


def test_every_settings_variable_is_named_gpumon_something() -> None:
    names = [spec.env for spec in SETTINGS if spec.env]
    assert names and all(name.startswith("GPUMON_") for name in names)


def test_no_gpumon_variable_reaches_a_test(capsys: pytest.CaptureFixture[str]) -> None:
    leaked = [name for name in os.environ if name.startswith("GPUMON_")]
    assert leaked == ["GPUMON_CLAIMS_DIR"]  # conftest's: a directory of the test's own
    assert main(["--print-config"]) == 0
    origins = [line.rpartition("  # ")[2] for line in capsys.readouterr().out.splitlines()[1:]]
    assert set(origins) == {"default", "GPUMON_CLAIMS_DIR"}


def test_the_tests_pass_with_every_gpumon_variable_set_badly() -> None:
    environ = {**os.environ, "GPUMON_ASCII": "1"}
    environ.update({spec.env: "not a value" for spec in SETTINGS if spec.env})
    canary = (
        f"{Path(__file__).relative_to(ROOT)}::{test_no_gpumon_variable_reaches_a_test.__name__}"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            canary,
        ],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:]
