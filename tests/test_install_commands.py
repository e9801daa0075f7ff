"""The install commands a user types, run as the README writes them, and the wheel beside the
oldest Textual and rich its ranges allow. Each downloads from the package index (marked
``network``: skipped where it cannot be reached); together about a minute."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.packaging_helpers import (
    ROOT,
    copy_of_the_clone,
    fresh_environment,
    needs_the_index,
    run_dashboard_in_a_terminal,
)

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
requirements = pytest.importorskip("packaging.requirements", reason="needs `packaging`")
Version = pytest.importorskip("packaging.version", reason="needs `packaging`").Version

pytestmark = [pytest.mark.network, pytest.mark.slow]

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
README = (ROOT / "README.md").read_text()
VERSION_LINE = f"gpumon {PROJECT['version']}\n"


def readme_block(after: str, end: str | None = None) -> list[str]:
    """The code blocks of the README from the line ``after`` up to the line ``end`` (or the
    first block only, without ``end``)."""
    start = README.index(after)
    section = README[start : README.index(end, start) if end else None]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    assert blocks, f"no code block after {after!r} in README.md"
    return blocks if end else blocks[:1]


def lowest_allowed(name: str) -> str:
    """The lowest version the runtime dependency on ``name`` allows."""
    for line in PROJECT["dependencies"]:
        requirement = requirements.Requirement(line)
        if requirement.name == name:
            (lowest,) = [spec.version for spec in requirement.specifier if spec.operator == ">="]
            return str(lowest)
    raise AssertionError(f"{name} is not a runtime dependency")


def test_the_wheel_runs_beside_the_lowest_textual_and_rich(
    distributions: tuple[Path, Path], tmp_path: Path
) -> None:
    """gpumon no longer pins Textual: installed into a fresh environment with the oldest
    Textual and rich its ranges allow, the headless modes run and the dashboard draws its
    first frame and quits on q."""
    needs_the_index()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    pins = [("textual", lowest_allowed("textual")), ("rich", lowest_allowed("rich"))]
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q"]
    install = subprocess.run(
        [*pip, distributions[1], *(f"{name}=={version}" for name, version in pins)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    env = fresh_environment()

    def gpumon(*args: str) -> str:
        done = subprocess.run(
            [venv / "bin" / "gpumon", *args], capture_output=True, text=True, env=env, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    show = "from importlib.metadata import version; print(version('textual'), version('rich'))"
    versions = subprocess.run(
        [venv / "bin" / "python", "-c", show], capture_output=True, text=True, check=True
    )
    installed = [Version(text) for text in versions.stdout.split()]
    assert installed == [Version(version) for _, version in pins]
    version = gpumon("--version")
    assert version.startswith(VERSION_LINE)
    assert ": off" not in version  # every replacement of Textual's code on with the oldest
    assert "DEMO (simulated data)" in gpumon("once", "--demo")
    screen = run_dashboard_in_a_terminal(f"{venv}/bin/gpumon --demo --demo-gpus 2", env, tmp_path)
    assert "DEMO" in screen


def test_the_readme_pipx_install_of_a_wheel_works(
    distributions: tuple[Path, Path], tmp_path: Path
) -> None:
    """Install: `pipx install dist/gpumon_tui-*.whl`, in a directory holding the wheel as a
    build leaves it, gives a `gpumon` command that runs."""
    needs_the_index()
    (command,) = readme_block("<!-- install-from-wheel -->")
    (tmp_path / "dist").mkdir()
    os.link(distributions[1], tmp_path / "dist" / distributions[1].name)
    env = fresh_environment()
    # pipx itself (the test extra's), and every path it writes inside tmp_path.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env.update(
        PIPX_HOME=str(tmp_path / "pipx"),
        PIPX_BIN_DIR=str(tmp_path / "bin"),
        PIPX_MAN_DIR=str(tmp_path / "man"),
    )
    done = subprocess.run(
        ["bash", "-e", "-c", command],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    status = subprocess.run(
        [tmp_path / "bin" / "gpumon", "status", "--demo", "--demo-gpus", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith("DEMO GPU 0:")


def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    """Quick start, from a clone: a virtual environment, `pip install . && gpumon --demo`,
    on a terminal: the dashboard draws its first frame, and q quits it with status 0."""
    needs_the_index()
    clone, *rest = "\n".join(readme_block("## Quick start", "Run the tests:")).splitlines()
    # The clone is this working tree: the repository's address is checked, not fetched.
    repository = PROJECT["urls"]["Repository"]
    assert clone == f"git clone {repository}.git && cd gpumon-tui"
    copy_of_the_clone(tmp_path / "gpumon-tui")
    script = "\n".join(["set -e", "cd gpumon-tui", *rest])
    assert "gpumon --demo" in script
    screen = run_dashboard_in_a_terminal(script, fresh_environment(), tmp_path)
    assert "DEMO" in screen and "COMMAND" in screen
