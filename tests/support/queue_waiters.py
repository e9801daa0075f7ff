"""Real `gpumon pick` processes, of root or of nobody, over GPUs a test frees by writing a file.

:func:`start` forks a process that becomes the given uid and runs pick's ``main`` over
:class:`StateSource`, whose GPUs are FREE or held by carol as the test's state file says;
:class:`Running` reads its exit status and output. No Textual here (forked children).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gpumon.cli import main
from gpumon.sources import base
from tests.support.pick_helpers import GIB, SampleSource, gpu, job, sample

NOBODY = 65534
#: What a pick imports as it runs, imported before the fork: nobody cannot read this
#: interpreter's library.
PICK_MODULES = (
    "gpumon.commands.pick",
    "gpumon.commands.pick_claims",
    "gpumon.commands.pick_hints",
    "gpumon.commands.pick_queue",
    "gpumon.data.selection",
    "gpumon.sampling.snapshot",
    "gpumon.sources.cluster_base",
)


@contextlib.contextmanager
def shared_place() -> Iterator[Path]:
    """A directory every uid can reach, with ``claims/`` (root's, 1777) and the state file."""
    made = Path(tempfile.mkdtemp(prefix="gpumon-queue-test-", dir="/tmp"))
    made.chmod(0o755)
    (made / "claims").mkdir(mode=0o1777)
    (made / "claims").chmod(0o1777)
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def set_free(place: Path, gpus: int, free: tuple[int, ...]) -> None:
    """``gpus`` GPUs, those in ``free`` FREE, the others running a job of carol's (20 GiB of
    their 24 GiB in use)."""
    temporary = place / "state.tmp"
    temporary.write_text(json.dumps({"gpus": gpus, "free": list(free)}))
    temporary.chmod(0o644)
    temporary.rename(place / "state")


class StateSource(SampleSource):
    """The GPUs the state file describes, read anew at every sample."""

    def __init__(self, state: Path) -> None:
        super().__init__(self._read(state))
        self.state = state

    @staticmethod
    def _read(state: Path):  # type: ignore[no-untyped-def]
        described = json.loads(state.read_text())
        gpus = tuple(
            gpu(index)
            if index in described["free"]
            else gpu(index, memory_used_bytes=20 * GIB, memory_free_bytes=4 * GIB)
            for index in range(described["gpus"])
        )
        free = described["free"]
        busy = tuple(job(on, 1000 + on.index, user="carol") for on in gpus if on.index not in free)
        return sample(gpus, busy)

    def sample(self):  # type: ignore[no-untyped-def]
        self.reads += 1
        return self._read(self.state)


def become(uid: int) -> None:
    """Be ``uid``, with no config of the user the test runs as (nobody cannot read it)."""
    for name in ("HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "XDG_STATE_HOME"):
        os.environ[name] = "/nonexistent"
    if uid != os.geteuid():
        os.setgid(uid)
        os.setuid(uid)


@dataclass
class Running:
    """A forked process: its PID, and where it leaves its exit status and output."""

    pid: int
    files: Path
    status: int | None = None

    def finished(self, timeout_s: float) -> bool:
        """True once the process has ended (waited for up to ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while self.status is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.status = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def result(self, timeout_s: float = 30) -> tuple[int, str, str]:
        """``(exit status, stdout, stderr)`` of pick, once it ended."""
        assert self.finished(timeout_s), f"still running: {self.err()}"
        assert self.status == 0, self.err()
        return int((self.files / "rc").read_text()), (self.files / "out").read_text(), self.err()

    def err(self) -> str:
        return (self.files / "err").read_text()

    def kill(self) -> None:
        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            self.finished(10)


def start(place: Path, name: str, uid: int, work: Callable[[], int]) -> Running:
    """Fork a process that becomes ``uid`` and runs ``work`` (its status goes to ``rc``; its
    stdout and stderr to ``out`` and ``err`` in ``place/name``)."""
    for module in PICK_MODULES:
        importlib.import_module(module)
    files = place / name
    files.mkdir()
    handles = [open(files / what, "w") for what in ("out", "err", "rc")]  # noqa: SIM115
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        status = 0
        try:
            out, err, rc = handles
            become(uid)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = work()
            rc.write(str(code))
            for handle in handles:
                handle.close()
        except BaseException:
            traceback.print_exc()
            status = 1
        os._exit(status)
    for handle in handles:
        handle.close()
    return Running(child, files)


def start_pick(place: Path, name: str, uid: int, *argv: str) -> Running:
    """``gpumon pick ARGV`` as ``uid`` over the state file's GPUs, claims in ``place/claims``."""

    def work() -> int:
        base.source_for = lambda settings, **options: StateSource(place / "state")  # type: ignore[assignment]
        return main(["pick", *argv, "--claims-dir", str(place / "claims")])

    return start(place, name, uid, work)


def waiter_files(place: Path, uid: int | None = None) -> list[str]:
    """The waiter files in the claims directory (of ``uid`` only, when given)."""
    prefix = "@wait." if uid is None else f"@wait.{uid}."
    return sorted(name for name in os.listdir(place / "claims") if name.startswith(prefix))


def until(condition: Callable[[], object], timeout_s: float = 20) -> None:
    """Wait until ``condition()`` is true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
