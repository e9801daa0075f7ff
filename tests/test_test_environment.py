"""The tests pass whatever ``GPUMON_*`` variables the developer's shell sets: conftest.py
clears them all (every settings variable is named ``GPUMON_...``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpumon.settings import KEYS

ROOT = Path(__file__).resolve().parent.parent


def test_every_settings_variable_is_named_gpumon_something() -> None:
    names = [spec.env for spec in KEYS.values() if spec.env]
    assert names and all(name.startswith("GPUMON_") for name in names)


def test_no_gpumon_variable_reaches_a_test() -> None:
    leaked = [name for name in os.environ if name.startswith("GPUMON_")]
    assert leaked == ["GPUMON_CLAIMS_DIR"]


def test_the_tests_pass_with_every_gpumon_variable_set_badly() -> None:
    environ = {**os.environ, "GPUMON_ASCII": "1"}
    environ.update({spec.env: "not a value" for spec in KEYS.values() if spec.env})
    test = "tests/test_settings.py::test_print_config_is_toml_with_where_each_value_came_from"
    canary = __name__.replace(".", "/") + ".py::" + test_no_gpumon_variable_reaches_a_test.__name__
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
            test,
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
