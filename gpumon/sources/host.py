"""What the host knows: CPU/RAM for the host strip, and per-PID details via psutil.

psutil's NoSuchProcess, AccessDenied and ZombieProcess never escape this module. Text that
comes from other users (command lines, user names) is made safe here, once, for every output
(:func:`gpumon.format.safe_text`).
"""

from __future__ import annotations

import os
import pwd
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

from gpumon.format import safe_text
from gpumon.model import HostStats

_cpu_primed = False


def sample_host(hostname: str | None = None) -> HostStats:
    """Read the host strip. ``cpu_percent(None)`` is a delta since the previous call, so
    the very first reading is meaningless and shown as N/A, not as 0 %."""
    try:
        load: tuple[float, float, float] | None = tuple(os.getloadavg())  # type: ignore[assignment]
    except (OSError, AttributeError):
        load = None
    memory = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return HostStats(
        hostname=safe_text(hostname or socket.gethostname()),
        cpu_pct=_host_cpu_pct(),
        load_average=load,
        memory_used_bytes=memory.total - memory.available,
        memory_total_bytes=memory.total,
        swap_used_bytes=swap.used,
        swap_total_bytes=swap.total,
        cpu_count=psutil.cpu_count(),
    )


def _host_cpu_pct() -> float | None:
    global _cpu_primed
    value = psutil.cpu_percent(interval=None)
    if not _cpu_primed:
        _cpu_primed = True
        return None
    return float(value)


@dataclass(frozen=True, slots=True)
class HostProcessInfo:
    """What psutil could read about one PID. Unreadable fields are ``None``."""

    visible: bool
    user: str | None = None
    command: str | None = None
    cpu_pct: float | None = None
    rss_bytes: int | None = None
    elapsed_s: float | None = None
    is_current_user: bool = False


NOT_VISIBLE = HostProcessInfo(visible=False)

_PSUTIL_ERRORS = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError)


@dataclass(slots=True)
class _Tracked:
    process: psutil.Process
    create_time: float
    user: str | None
    uid: int | None
    command: str | None
    primed: bool = False


class ProcessInspector:
    """Joins NVML's PIDs with host details.

    ``psutil.Process`` objects are kept per (pid, create time) so ``cpu_percent`` is a real
    delta between two samples and a reused PID is never mistaken for the old process.
    User and command line never change for a live process, so they are read once.
    """

    def __init__(
        self,
        *,
        process_factory: Callable[[int], psutil.Process] = psutil.Process,
        current_uid: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._process_factory = process_factory
        self._current_uid = os.getuid() if current_uid is None else current_uid
        self._clock = clock
        self._tracked: dict[int, _Tracked] = {}
        self._user_names: dict[int, str] = {}

    def inspect(self, pids: Iterable[int]) -> dict[int, HostProcessInfo]:
        """Return details for each PID; forget PIDs not asked about (bounded memory)."""
        wanted = set(pids)
        for gone in self._tracked.keys() - wanted:
            del self._tracked[gone]
        now = self._clock()
        return {pid: self._inspect_one(pid, now) for pid in wanted}

    def _inspect_one(self, pid: int, now: float) -> HostProcessInfo:
        tracked = self._track(pid)
        if tracked is None:
            return NOT_VISIBLE
        process = tracked.process
        cpu_pct: float | None = None
        rss: int | None = None
        zombie = False
        try:
            with process.oneshot():
                try:
                    # An exited process its parent never reaped: NVML may still list it.
                    zombie = process.status() == psutil.STATUS_ZOMBIE
                except psutil.AccessDenied:
                    pass
                try:
                    value = process.cpu_percent(interval=None)
                    # The first call only primes the counter: its 0.0 is not a measurement.
                    cpu_pct = value if tracked.primed else None
                    tracked.primed = True
                except psutil.AccessDenied:
                    pass
                try:
                    rss = process.memory_info().rss
                except psutil.AccessDenied:
                    pass
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            self._tracked.pop(pid, None)
            return NOT_VISIBLE
        except OSError:
            pass
        return HostProcessInfo(
            visible=True,
            user=tracked.user,
            command=_defunct(tracked.command) if zombie else tracked.command,
            cpu_pct=cpu_pct,
            rss_bytes=rss,
            elapsed_s=max(0.0, now - tracked.create_time),
            is_current_user=tracked.uid is not None and tracked.uid == self._current_uid,
        )

    def _track(self, pid: int) -> _Tracked | None:
        tracked = self._tracked.get(pid)
        if tracked is not None:
            try:
                # is_running() compares create time: catches a PID reused by a new process.
                if tracked.process.is_running():
                    return tracked
            except _PSUTIL_ERRORS:
                pass
            del self._tracked[pid]
        try:
            process = self._process_factory(pid)
            create_time = process.create_time()
        except _PSUTIL_ERRORS:
            # Not in this PID namespace (container) or already gone.
            return None
        uid = _read_uid(process)
        tracked = _Tracked(
            process=process,
            create_time=create_time,
            uid=uid,
            user=self._user_name(process, uid),
            command=_read_command(process),
        )
        self._tracked[pid] = tracked
        return tracked

    def _user_name(self, process: psutil.Process, uid: int | None) -> str | None:
        if uid is not None:
            if uid not in self._user_names:
                try:
                    self._user_names[uid] = safe_text(pwd.getpwuid(uid).pw_name)
                except KeyError:
                    self._user_names[uid] = str(uid)
            return self._user_names[uid]
        try:
            return safe_text(str(process.username()))
        except (*_PSUTIL_ERRORS, KeyError):
            return None


def _defunct(command: str | None) -> str:
    """How ps shows a zombie: the name it had, marked defunct."""
    return f"{command or '?'} <defunct>"


def _read_uid(process: psutil.Process) -> int | None:
    try:
        return int(process.uids().real)
    except (*_PSUTIL_ERRORS, AttributeError):
        return None


def _read_command(process: psutil.Process) -> str | None:
    try:
        parts = process.cmdline()
        if parts:
            return safe_text(" ".join(parts))
    except _PSUTIL_ERRORS:
        pass
    try:
        return safe_text(str(process.name()))
    except _PSUTIL_ERRORS:
        return None
