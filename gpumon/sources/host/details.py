"""What the process detail screen shows of one PID, read once when it opens (psutil).

The full command line, owner, start time, parent chain, and for the user's own processes
only ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` (nothing else of the environment: it
may hold secrets). Blocking: call it off the event loop. Text is made safe here.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import psutil

from gpumon.data.format import safe_text

#: CUDA's variables that decide which GPU ``cuda:N`` is.
CUDA_VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
#: A detail screen shows the whole command line; still bounded (a cmdline can be 2 MiB).
COMMAND_MAX_CHARS = 64 * 1024
#: Parents shown at most (init and the kernel's threads are never shown).
MAX_ANCESTORS = 12

PSUTIL_ERRORS = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError)


@dataclass(frozen=True, slots=True)
class Ancestor:
    """One process of the parent chain."""

    pid: int
    user: str | None
    command: str | None


@dataclass(frozen=True, slots=True)
class ProcessDetails:
    """One PID as the host sees it. ``visible`` False: not in this PID namespace, or gone."""

    pid: int
    visible: bool
    command: str | None = None
    user: str | None = None
    started_at_s: float | None = None
    ancestors: tuple[Ancestor, ...] = ()
    own: bool = False
    #: The CUDA variables of the user's own process (``None`` value: not set); ``None``
    #: for another user's process or when its environment could not be read.
    cuda_environment: dict[str, str | None] | None = None


def read_process_details(pid: int, expected_start_s: float | None = None) -> ProcessDetails:
    """Read ``pid`` once. ``expected_start_s``: its start time as the table knew it; a PID
    that has since been reused by another process reads as gone."""
    try:
        process = psutil.Process(pid)
        started = process.create_time()
    except PSUTIL_ERRORS:
        return ProcessDetails(pid, visible=False)
    if expected_start_s is not None and abs(started - expected_start_s) > 1.0:
        return ProcessDetails(pid, visible=False)  # a new process under an old PID
    uid = read_uid(process)
    own = uid is not None and uid == os.getuid()
    return ProcessDetails(
        pid=pid,
        visible=True,
        command=_command(process),
        user=_user(process),
        started_at_s=started,
        ancestors=_ancestors(process),
        own=own,
        cuda_environment=_cuda_environment(process) if own else None,
    )


def read_uid(process: psutil.Process) -> int | None:
    try:
        return int(process.uids().real)
    except (*PSUTIL_ERRORS, AttributeError):
        return None


def _user(process: psutil.Process) -> str | None:
    try:
        return safe_text(str(process.username()))
    except (*PSUTIL_ERRORS, KeyError):
        uid = read_uid(process)
        return None if uid is None else str(uid)


def _command(process: psutil.Process) -> str | None:
    with contextlib.suppress(*PSUTIL_ERRORS):
        parts = process.cmdline()
        if parts:
            return safe_text(" ".join(parts), COMMAND_MAX_CHARS)
    try:
        return safe_text(str(process.name()))
    except PSUTIL_ERRORS:
        return None


def _ancestors(process: psutil.Process) -> tuple[Ancestor, ...]:
    """Parent first, up to (not including) init: the launcher is the last one shown."""
    chain: list[Ancestor] = []
    current = process
    for _ in range(MAX_ANCESTORS):
        try:
            parent = current.parent()
        except PSUTIL_ERRORS:
            break
        if parent is None or parent.pid <= 1:
            break
        chain.append(Ancestor(parent.pid, _user(parent), _short(_command(parent))))
        current = parent
    return tuple(chain)


def _short(command: str | None, limit: int = 200) -> str | None:
    if command is None or len(command) <= limit:
        return command
    return command[: limit - 3] + "..."  # ASCII: every terminal shows it


def _cuda_environment(process: psutil.Process) -> dict[str, str | None] | None:
    try:
        environment = process.environ()
    except PSUTIL_ERRORS:
        return None
    return {
        name: None if name not in environment else safe_text(environment[name], 256)
        for name in CUDA_VARIABLES
    }
