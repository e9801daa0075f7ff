"""What the packaging tests share: building the sdist and wheel, a copy of the working tree,
the package index's reachability, and the dashboard run in a pseudo-terminal."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: What a checkout holds that is not the project: never copied as "the clone".
NOT_THE_PROJECT = (
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".grimp_cache",
    "snapshot_report.html",
)


def build(outdir: Path) -> tuple[Path, Path]:
    """``python -m build``: the sdist, then the wheel built from it, into ``outdir``.

    ``--no-isolation`` uses this environment's setuptools (the test extra has it): no
    download, and seconds faster than a fresh build environment.
    """
    if importlib.util.find_spec("build") is None or importlib.util.find_spec("setuptools") is None:
        pytest.skip("`build` and `setuptools` are not installed (they are in the test extra)")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(outdir), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # setuptools warns of what it will stop building (a license table, license classifiers).
    assert "deprecated" not in (done.stdout + done.stderr).lower()
    (sdist,) = outdir.glob("*.tar.gz")
    (wheel,) = outdir.glob("*.whl")
    return sdist, wheel


def copy_of_the_clone(target: Path) -> Path:
    """The working tree as ``git clone`` gives it (no virtual environment, no build output),
    copied to ``target``."""
    shutil.copytree(ROOT, target, ignore=shutil.ignore_patterns(*NOT_THE_PROJECT))
    return target


@functools.cache
def _index_answers() -> str | None:
    """None when the package index answers, else why not."""
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/").rstrip("/")
    try:
        with urllib.request.urlopen(f"{index}/pip/", timeout=10) as answer:
            answer.read(1)
    except OSError as error:
        return f"the package index ({index}) cannot be reached: {error}"
    return None


def needs_the_index() -> None:
    """Skip the calling test where the package index cannot be reached."""
    reason = _index_answers()
    if reason is not None:
        pytest.skip(reason)


def fresh_environment() -> dict[str, str]:
    """The environment for commands a user types: this test run's virtual environment not
    active, none of its variables that would change what pip or gpumon do."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("PYTEST_", "PIP_REQUIRE", "PYTHON"))
        and name not in ("VIRTUAL_ENV", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")
    }
    active = os.environ.get("VIRTUAL_ENV")
    env["PATH"] = os.pathsep.join(
        part
        for part in env.get("PATH", "").split(os.pathsep)
        if not (active and part == os.path.join(active, "bin"))
    )
    env.update(TERM="xterm-256color", LANG="C.UTF-8", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


_ESCAPES = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[ -/]*[0-~]")


def run_dashboard_in_a_terminal(
    script: str, env: Mapping[str, str], cwd: Path, timeout_s: float = 240
) -> str:
    """Run ``script`` (bash) on a 120x40 pseudo-terminal until the dashboard it starts has
    drawn its first frame (the process table's header and a demo process's command), press
    ``q``, and return what the terminal showed, escape sequences removed. Fails if the
    script exits without drawing it, or the dashboard does not exit 0 after ``q``."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(
        ["bash", "-c", script],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=dict(env),
        cwd=cwd,
        close_fds=True,
        start_new_session=True,
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )
    os.close(slave)
    output = bytearray()
    quit_sent = False
    deadline = time.monotonic() + timeout_s
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(master, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if selector.select(0.1):
                    try:
                        data = os.read(master, 65536)
                    except OSError:  # EIO: every process on the terminal is gone
                        data = b""
                    if not data:
                        break
                    output += data
                shown = _ESCAPES.sub(b"", output)
                if not quit_sent and b"COMMAND" in shown and b"python" in shown:
                    time.sleep(0.5)  # a moment on screen, as a user would look at it
                    os.write(master, b"q")
                    quit_sent = True
        status = process.wait(30)
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        os.close(master)
    text = _ESCAPES.sub(b"", output).decode("utf-8", "replace")
    assert quit_sent, f"the dashboard never drew its first frame: {text[-3000:]}"
    assert status == 0, f"exit status {status}: {text[-3000:]}"
    return text
