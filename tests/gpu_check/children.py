"""The processes the check starts (torch job, probe, exporter, pytest, screenshot): each in a
process group of its own, and always ended (on success, failure, Ctrl+C or SIGTERM), so that no
job is left holding GPU memory.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_LIVE: set[Child] = set()


def child_env(**extra: str) -> dict[str, str]:
    """This environment, with the repository first on PYTHONPATH (``python -m gpumon`` runs
    the checkout; the given entries made absolute, as the children run in the repository) and
    unbuffered output (lines arrive as they are printed)."""
    env = dict(os.environ)
    given = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    paths = [str(ROOT), *given]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class Child:
    """A child process whose output lines are read on threads as they come.

    ``merge`` sends stderr into the same lines as stdout (the exporter announces its port on
    stderr); otherwise stderr is kept apart, for :meth:`stderr_tail`.
    """

    def __init__(
        self, argv: Sequence[str], *, merge: bool = False, env: dict[str, str] | None = None
    ) -> None:
        self.argv = list(argv)
        self.process = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge else subprocess.PIPE,
            text=True,
            errors="replace",
            cwd=ROOT,
            env=child_env(**(env or {})),
            start_new_session=True,
        )
        _LIVE.add(self)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        assert self.process.stdout is not None
        threading.Thread(target=self._read, args=(self.process.stdout, True), daemon=True).start()
        if not merge:
            assert self.process.stderr is not None
            threading.Thread(
                target=self._read, args=(self.process.stderr, False), daemon=True
            ).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self, stream: Any, is_stdout: bool) -> None:
        for line in stream:
            if is_stdout:
                self.lines.put(line.rstrip("\n"))
            else:
                self.stderr.append(line.rstrip("\n"))
        if is_stdout:
            self.lines.put(None)

    def line(self, timeout_s: float) -> str | None:
        """The next line of output; ``None`` at its end or after ``timeout_s``."""
        try:
            return self.lines.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return None

    def all_lines(self, timeout_s: float) -> tuple[list[str], bool]:
        """Every line until the output ends (True) or ``timeout_s`` passes (False)."""
        deadline = time.monotonic() + timeout_s
        lines: list[str] = []
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return lines, False
            if line is None:
                return lines, True
            lines.append(line)

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(text)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self.process.wait(timeout=max(0.1, timeout_s))
        except subprocess.TimeoutExpired:
            return None

    def stderr_tail(self, count: int = 15) -> list[str]:
        return self.stderr[-count:]

    def stop(self) -> None:
        """SIGTERM to the whole group, then SIGKILL after 5 s; always reaped."""
        _LIVE.discard(self)
        if self.process.poll() is None:
            self._signal_group(signal.SIGTERM)
            if self.wait(5) is None:
                self._signal_group(signal.SIGKILL)
                self.wait(5)
        else:  # the leader is gone, but a grandchild may still hold the group
            self._signal_group(signal.SIGKILL)

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> Child:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


@atexit.register
def stop_all() -> None:
    """End every child still running."""
    for child in list(_LIVE):
        child.stop()


def end_on_sigterm() -> None:
    """SIGTERM (a timeout's kill) unwinds like Ctrl+C, so every child is stopped."""

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)


def run(argv: Sequence[str], timeout_s: float, **env: str) -> tuple[int | None, str, str]:
    """Run a child to its end: (exit status or ``None`` on timeout, stdout, stderr)."""
    with Child(argv, env=env) as child:
        lines, ended = child.all_lines(timeout_s)
        status = child.wait(5) if ended else None
        return status, "\n".join(lines), "\n".join(child.stderr)


def once_json(python: str, timeout_s: float = 60) -> dict[str, Any]:
    """``gpumon once --json``, as users run it."""
    status, out, err = run([python, "-m", "gpumon", "once", "--json"], timeout_s)
    if status != 0:
        raise RuntimeError(f"gpumon once --json exited {status}: {err.strip()[-500:]}")
    data: dict[str, Any] = json.loads(out)
    return data
