"""Shared test set-up."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpumon.config.settings import VARIABLES


@pytest.fixture(autouse=True)
def utf8_locale(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test sees a UTF-8 locale unless it sets its own: the result must not depend
    on the locale of the machine running CI (without one, gpumon falls back to ASCII)."""
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_CTYPE", raising=False)
    monkeypatch.delenv("GPUMON_ASCII", raising=False)


@pytest.fixture(autouse=True)
def host_pid_namespace(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Tests run as in the host's PID namespace even inside a container (CI's may be one):
    their processes are real children whose PIDs NVML fakes list. The tests of a foreign
    namespace say so to the inspector themselves, or are marked ``real_pid_namespace``."""
    from gpumon.sources.host import inspector

    if request.node.get_closest_marker("real_pid_namespace"):
        return
    monkeypatch.setattr(inspector, "in_foreign_pid_namespace", lambda proc="/proc": False)


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clock times on screen and in output are in UTC, whatever the machine's time zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


@pytest.fixture(autouse=True)
def no_user_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Tests never read the developer's ~/.config/gpumon/config.toml, the machine's
    /etc/xdg/gpumon/config.toml or GPUMON_* settings, nor colour because CI forces it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.getbasetemp() / "no-config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path_factory.getbasetemp() / "no-config"))
    # Nor the developer's history database (gpumon record's, under $XDG_STATE_HOME).
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.getbasetemp() / "no-state"))
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    # Every GPUMON_* variable gpumon reads (the settings' table names them), and any other.
    for name in VARIABLES | {name for name in os.environ if name.startswith("GPUMON_")}:
        monkeypatch.delenv(name, raising=False)
    # `gpumon pick` claims what it prints: never in the machine's shared /dev/shm directory,
    # and never seen by the next test.
    claims = tmp_path_factory.mktemp("claims", numbered=True) / "gpumon-claims"
    monkeypatch.setenv("GPUMON_CLAIMS_DIR", str(claims))


@pytest.fixture(scope="session")
def distributions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel built from this tree, once per test run (the packaging
    tests: tests/test_packaging.py, tests/test_install_commands.py)."""
    from tests.support.packaging_helpers import build

    return build(tmp_path_factory.mktemp("dist"))
