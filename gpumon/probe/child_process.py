"""Starting and ending the probe child: its command, the parent-death signal, process
groups killed on exit (also at interpreter exit), and reaping.

Each group is pinned by a pidfd of its leader, so a group number reused after the leader
was reaped is never killed; without pidfds the group is killed by number. Details:
docs/probe-protocol.md.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

from gpumon.probe.child_io import EXIT_PARENT_GONE
from gpumon.sources.host.pidfd import open_pidfd

#: Seconds to wait for a killed child to be reaped.
REAP_TIMEOUT_S = 5.0

# Its first line takes the working directory off the module path ("-c" puts it first, an
# empty PYTHONPATH entry adds it again): the probe may start in /tmp, where another user's
# argparse.py or json.py would otherwise run as this user. Python < 3.11 has no -P, and -I
# would drop the PYTHONPATH the child is meant to keep.
_BOOTSTRAP = """\
import sys; sys.path[:] = [entry for entry in sys.path if entry not in ("", ".")]
import importlib.util, os, runpy
package_dir = sys.argv.pop(1)
spec = importlib.util.spec_from_file_location(
    "gpumon", os.path.join(package_dir, "__init__.py"), submodule_search_locations=[package_dir]
)
module = importlib.util.module_from_spec(spec)
sys.modules["gpumon"] = module
spec.loader.exec_module(module)
runpy.run_module("gpumon.probe.child", run_name="__main__", alter_sys=True)
"""

#: Process groups of children not known to be reaped, which the atexit hook kills: the group
#: number (the leader's PID) -> a pidfd of the leader, or None where there are no pidfds.
LIVE_GROUPS: dict[int, int | None] = {}
# The event loop's thread forgets groups (closing their pidfds) while the quit watchdog's
# thread may be killing them: a pidfd must not be closed, and its number reused, in between.
_GROUPS_LOCK = threading.RLock()
# Tasks waiting for children that outlived end_child (asyncio keeps only weak references).
_LATE_REAPS: set[asyncio.Future[int]] = set()


def child_command(python: str | None = None) -> list[str]:
    """The argv that starts the probe child in ``python`` (default: this interpreter)."""
    package_dir = str(Path(__file__).resolve().parent.parent)
    return [python or sys.executable, "-c", _BOOTSTRAP, package_dir]


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, or None where there is none (anything but Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _prctl()


def parent_death_preexec(parent_pid: int | None = None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child die with SIGKILL when gpumon dies (Linux only;
    None elsewhere).

    It calls only what was resolved before the fork; if gpumon died before it ran, the child
    sees another parent than ``parent_pid`` and exits. The kernel signals when the *thread*
    that forked ends: start the child from the event loop's thread, never from a short-lived
    one (``asyncio.to_thread``, a thread worker).
    """
    prctl = _PRCTL
    if prctl is None:
        return None
    parent = os.getpid() if parent_pid is None else parent_pid

    def die_with_parent() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(EXIT_PARENT_GONE)

    return die_with_parent


def track_group(pid: int) -> None:
    """Remember the process group of the child ``pid`` (its leader) for :func:`kill_group`
    and the atexit hook. Call it right after the spawn, before anything may reap the child."""
    try:
        pidfd = open_pidfd(pid)
    except ProcessLookupError:
        return  # already reaped: its group number may be anyone's now
    with _GROUPS_LOCK:
        LIVE_GROUPS[pid] = pidfd


def forget_group(pid: int) -> None:
    """The leader ``pid`` was reaped: never kill its group number again."""
    with _GROUPS_LOCK:
        _drop(pid)


def kill_group(pid: int) -> None:
    """SIGKILL the process group of the tracked child ``pid``, unless its leader was reaped."""
    with _GROUPS_LOCK:
        _kill_group(pid)


def _drop(pid: int) -> None:
    pidfd = LIVE_GROUPS.pop(pid, None)
    if pidfd is not None:
        os.close(pidfd)


def _kill_group(pid: int) -> None:
    if pid not in LIVE_GROUPS:
        return
    pidfd = LIVE_GROUPS[pid]
    if pidfd is not None and not _unreaped(pidfd):
        _drop(pid)
        return
    # start_new_session=True made the child the leader of a group whose id is its PID. The
    # leader is unreaped, so the number is still its group's (without a pidfd: see above).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _unreaped(pidfd: int) -> bool:
    """True while the process behind ``pidfd`` is alive or a zombie not yet reaped."""
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists (a set-user-ID interpreter, say)
    return True


@atexit.register
def kill_live_children() -> None:
    """Kill the process group of every child still running (at exit, or when quitting hangs).
    The lock is awaited a moment only: this runs in the quit watchdog's thread too.
    """
    locked = _GROUPS_LOCK.acquire(timeout=1.0)
    try:
        for pid in list(LIVE_GROUPS):
            _kill_group(pid)
    finally:
        if locked:
            _GROUPS_LOCK.release()


def _forget_when_reaped(process: asyncio.subprocess.Process) -> None:
    """Forget the group of ``process`` as soon as the child watcher reaps it (on this loop;
    a child reaped after the loop ended is found out by :func:`kill_group`'s pidfd check)."""
    waiter = asyncio.ensure_future(process.wait())
    _LATE_REAPS.add(waiter)

    def reaped(task: asyncio.Future[int]) -> None:
        _LATE_REAPS.discard(task)
        if not task.cancelled() and task.exception() is None:
            forget_group(process.pid)

    waiter.add_done_callback(reaped)


async def end_child(process: asyncio.subprocess.Process, stderr_task: asyncio.Future[None]) -> None:
    """Kill the child (if still running), reap it and drain its pipes.

    Runs in ``finally``, possibly cancelled again: each wait is retried through cancellations
    within its own short limit, and a cancellation swallowed here is raised again at the end.
    """
    if process.returncode is None:
        kill_group(process.pid)
    loop = asyncio.get_running_loop()
    cancelled = False

    async def patiently(wait: Callable[[], Awaitable[object]], limit_s: float) -> None:
        nonlocal cancelled
        deadline = loop.time() + limit_s
        while (remaining := deadline - loop.time()) > 0:
            try:
                await asyncio.wait_for(wait(), remaining)
                return
            except asyncio.CancelledError:
                cancelled = True
            except (asyncio.TimeoutError, ValueError):
                return

    async def stderr_drained() -> None:
        if not stderr_task.done():
            await asyncio.shield(stderr_task)

    # A process stuck inside the GPU driver may take a while to die even from SIGKILL: do
    # not hold up quitting gpumon for it (the atexit hook tries again).
    await patiently(process.wait, REAP_TIMEOUT_S)
    if process.returncode is not None:
        forget_group(process.pid)
    else:
        _forget_when_reaped(process)
    if process.stdin is not None:
        process.stdin.close()
    if process.stdout is not None:
        await patiently(process.stdout.read, 1.0)
    await patiently(stderr_drained, 1.0)
    if cancelled:
        raise asyncio.CancelledError
