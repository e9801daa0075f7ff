"""What the host knows: CPU/RAM for the host strip, and per-PID details via psutil.

psutil's NoSuchProcess, AccessDenied and ZombieProcess never escape this module. Text that
comes from other users (command lines, user names) is made safe here, once, for every output
(:func:`gpumon.data.format.safe_text`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

import psutil

from gpumon.data.format import safe_text
from gpumon.data.model import HostStats
from gpumon.sources.host import cgroup
from gpumon.sources.host.cgroup import NO_IDS, CgroupIds
from gpumon.sources.host.details import PSUTIL_ERRORS, read_uid
from gpumon.sources.host.procfs import (
    CLOCK_TICKS,
    ProcStat,
    proc_hides_pids,
    proc_is_readable,
    read_command_line,
    read_proc_stat,
    read_real_uid,
    uses_a_gpu_device,
)

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
    create_time_s: float | None = None
    job_id: str | None = None
    container_id: str | None = None
    exited: bool = False


#: HostProcessInfo's fields: GpuProcess has each under the same name.
HOST_FIELDS = tuple(field.name for field in fields(HostProcessInfo))
NOT_VISIBLE = HostProcessInfo(visible=False)
#: A PID that is not on this host although gpumon sees every PID of it: the process exited
#: (NVML's list lags, or the driver still tears its context down).
EXITED = HostProcessInfo(visible=False, exited=True)

#: The inode Linux gives the initial PID namespace (PROC_PID_INIT_INO in the kernel).
_INITIAL_PID_NAMESPACE_INODE = 0xEFFFFFFC


def in_foreign_pid_namespace(proc: str = "/proc") -> bool:
    """True when gpumon runs in a PID namespace other than the host's (a container without
    ``--pid=host``): NVML's PIDs are the host's, so a process here with the same number is,
    as a rule, another process."""
    try:
        return os.stat(f"{proc}/self/ns/pid").st_ino != _INITIAL_PID_NAMESPACE_INODE
    except OSError:
        return False


def sees_every_host_pid(proc: str = "/proc") -> bool:
    """True when a PID NVML lists but ``/proc`` lacks can only have exited: gpumon runs in
    the host's PID namespace (NVML's PIDs are the host's) and ``/proc`` hides no one's
    processes."""
    try:
        if in_foreign_pid_namespace(proc):
            return False
        with open(f"{proc}/self/mountinfo", encoding="utf-8", errors="replace") as file:
            mounts = file.read(1 << 20)
    except OSError:
        return False
    return not proc_hides_pids(mounts, proc)


#: How many PIDs no longer listed the inspector remembers the identity of.
FORGOTTEN_MAX = 4096


@dataclass(slots=True)
class _Tracked:
    process: psutil.Process | None  # None: discovered from /proc (see _discover_from_proc)
    create_time: float
    user: str | None
    uid: int | None
    command: str | None
    ids: CgroupIds = NO_IDS  # Slurm job and container: read once, as the rest above
    primed: bool = False
    # The /proc way: identity and the previous CPU reading.
    start_ticks: int | None = None
    cpu_ticks: int | None = None
    read_at_s: float = 0.0


class ProcessInspector:
    """Joins NVML's PIDs with host details.

    What never changes for a live process (user, command line, start time, Slurm job and
    container) is read once, when its PID first appears; CPU, RSS and zombie state every tick
    (one ``/proc/PID/stat`` read on Linux, else psutil). A process is known by (PID, start
    time), so a reused PID is never mistaken for the old process.

    ``process_factory`` is ``psutil.Process`` or a look-alike (tests); ``current_uid`` owns
    the processes that are "mine" (default: this process's real uid); ``clock`` dates elapsed
    times, ``monotonic`` CPU percentages. ``read_stat`` (the per-tick reader), ``read_cgroup``,
    ``sees_every_pid`` (a PID missing here has exited) and ``foreign_namespace`` (outside the
    host's PID namespace, a PID here is NVML's only with an NVIDIA device open) are detected
    by default.
    """

    def __init__(
        self,
        *,
        process_factory: Callable[[int], psutil.Process] = psutil.Process,
        current_uid: int | None = None,
        clock: Callable[[], float] = time.time,
        read_stat: Callable[[int], ProcStat | None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        read_cgroup: Callable[[int], CgroupIds] | None = None,
        sees_every_pid: bool | None = None,
        foreign_namespace: bool | None = None,
    ) -> None:
        self._process_factory = process_factory
        if foreign_namespace is None:
            foreign_namespace = process_factory is psutil.Process and in_foreign_pid_namespace()
        self._foreign = foreign_namespace
        # Foreign namespace: PIDs found here without an NVIDIA device open -> their create
        # time (not asked again while it is the same process).
        self._collisions: dict[int, float] = {}
        if sees_every_pid is None:  # a look-alike's PIDs are not this host's
            sees_every_pid = process_factory is psutil.Process and sees_every_host_pid()
        # What a PID missing here means: it exited, or it is outside this namespace.
        self._missing = EXITED if sees_every_pid else NOT_VISIBLE
        self._current_uid = os.getuid() if current_uid is None else current_uid
        self._clock = clock
        if read_stat is None and process_factory is psutil.Process and proc_is_readable():
            read_stat = read_proc_stat
        self._read_stat = read_stat
        # This host's /proc, read directly: a new PID's identity, owner and command too.
        self._proc_discovery = read_stat is read_proc_stat and process_factory is psutil.Process
        self._boot_s: float | None = None  # psutil.boot_time(), read once per inspect()
        self._monotonic = monotonic
        if read_cgroup is None:
            real = process_factory is psutil.Process
            read_cgroup = cgroup.read_cgroup_ids if real else lambda pid: NO_IDS
        self._read_cgroup = read_cgroup
        self._tracked: dict[int, _Tracked] = {}
        #: PIDs no longer asked about -> (start ticks, create time) as last known, the
        #: newest FORGOTTEN_MAX: a process NVML lists again after a gap keeps its create time
        #: (its identity in the store, the history and the detail screen) even when the
        #: clock stepped meanwhile (psutil's boot time moves with the clock).
        self._forgotten: dict[int, tuple[int, float]] = {}
        self._user_names: dict[int, str] = {}

    def inspect(self, pids: Iterable[int]) -> dict[int, HostProcessInfo]:
        """Return details for each PID; forget PIDs not asked about (bounded memory)."""
        wanted = set(pids)
        for gone in self._tracked.keys() - wanted:
            tracked = self._tracked.pop(gone)
            if tracked.start_ticks is not None:
                self._forgotten.pop(gone, None)  # to the end: the newest
                self._forgotten[gone] = (tracked.start_ticks, tracked.create_time)
        while len(self._forgotten) > FORGOTTEN_MAX:
            del self._forgotten[next(iter(self._forgotten))]
        for gone in self._collisions.keys() - wanted:
            del self._collisions[gone]
        now = self._clock()
        self._boot_s = None  # as psutil's create_time(): the boot time as the clock says now
        if self._read_stat is not None:
            read_at = self._monotonic()
            return {pid: self._inspect_by_stat(pid, now, read_at) for pid in wanted}
        return {pid: self._inspect_one(pid, now) for pid in wanted}

    def _inspect_by_stat(self, pid: int, now: float, read_at: float) -> HostProcessInfo:
        assert self._read_stat is not None
        stat = self._read_stat(pid)
        tracked = self._tracked.get(pid)
        if tracked is not None and (stat is None or stat.start_ticks != tracked.start_ticks):
            del self._tracked[pid]  # gone, or its PID now belongs to a new process
            tracked = None
        if stat is None:
            return self._missing
        if tracked is None:
            if self._proc_discovery:
                tracked = self._discover_from_proc(pid, stat.start_ticks)
            else:
                tracked = self._discover(pid)
            if tracked is None:
                return self._missing
            tracked.start_ticks = stat.start_ticks
        cpu_pct: float | None = None
        if tracked.cpu_ticks is not None and read_at > tracked.read_at_s:
            used_s = (stat.cpu_ticks - tracked.cpu_ticks) / CLOCK_TICKS
            cpu_pct = max(0.0, 100.0 * used_s / (read_at - tracked.read_at_s))
        tracked.cpu_ticks, tracked.read_at_s = stat.cpu_ticks, read_at
        return self._info(tracked, now, cpu_pct, stat.rss_bytes, stat.zombie)

    def _info(
        self, tracked: _Tracked, now: float, cpu_pct: float | None, rss: int | None, zombie: bool
    ) -> HostProcessInfo:
        return HostProcessInfo(
            visible=True,
            user=tracked.user,
            command=_defunct(tracked.command) if zombie else tracked.command,
            cpu_pct=cpu_pct,
            rss_bytes=rss,
            elapsed_s=max(0.0, now - tracked.create_time),
            is_current_user=tracked.uid is not None and tracked.uid == self._current_uid,
            create_time_s=tracked.create_time,
            job_id=tracked.ids.job_id,
            container_id=tracked.ids.container_id,
        )

    def _inspect_one(self, pid: int, now: float) -> HostProcessInfo:
        tracked = self._track(pid)
        if tracked is None:
            return self._missing
        process = tracked.process
        assert process is not None  # the psutil way discovers with psutil
        cpu_pct: float | None = None
        rss: int | None = None
        zombie = False
        try:
            with process.oneshot():
                with contextlib.suppress(psutil.AccessDenied):
                    # An exited process its parent never reaped: NVML may still list it.
                    zombie = process.status() == psutil.STATUS_ZOMBIE
                with contextlib.suppress(psutil.AccessDenied):
                    value = process.cpu_percent(interval=None)
                    # The first call only primes the counter: its 0.0 is not a measurement.
                    cpu_pct = value if tracked.primed else None
                    tracked.primed = True
                with contextlib.suppress(psutil.AccessDenied):
                    rss = process.memory_info().rss
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            self._tracked.pop(pid, None)
            return self._missing
        except OSError:
            pass
        return self._info(tracked, now, cpu_pct, rss, zombie)

    def _track(self, pid: int) -> _Tracked | None:
        tracked = self._tracked.get(pid)
        if tracked is not None:
            # is_running() compares create time: catches a PID reused by a new process.
            with contextlib.suppress(*PSUTIL_ERRORS):
                if tracked.process is not None and tracked.process.is_running():
                    return tracked
            del self._tracked[pid]
        return self._discover(pid)

    def _discover(self, pid: int) -> _Tracked | None:
        """Read what never changes about a new PID, once; ``None`` when it is not here."""
        try:
            process = self._process_factory(pid)
            create_time = process.create_time()
        except PSUTIL_ERRORS:
            # Not in this PID namespace (container) or already gone.
            return None
        if self._is_a_collision(pid, create_time):
            return None
        uid = read_uid(process)
        user, command = self._user_name(uid, process), _read_command(process)
        return self._keep(pid, _Tracked(process, create_time, user, uid, command))

    def _discover_from_proc(self, pid: int, start_ticks: int) -> _Tracked | None:
        """:meth:`_discover` from this host's /proc, whose stat was just read: psutil's values from
        three reads (``status``, ``cmdline``, ``stat`` again: it must not have exited), not five.
        """
        if self._boot_s is None:
            try:
                self._boot_s = psutil.boot_time()
            except (OSError, RuntimeError):
                return None
        create_time = start_ticks / CLOCK_TICKS + self._boot_s
        known = self._forgotten.pop(pid, None)
        if known is not None and known[0] == start_ticks:
            create_time = known[1]  # seen before in this run: the same process, as then
        if self._is_a_collision(pid, create_time):
            return None
        uid = read_real_uid(pid)
        command = read_command_line(pid)
        if command is None:  # none readable or an empty one (a zombie): the name, as psutil
            try:
                command = _read_command(psutil.Process(pid))
            except PSUTIL_ERRORS:
                command = None
        again = read_proc_stat(pid)
        if again is None or again.start_ticks != start_ticks:
            # It exited (or its PID went to another process) while being read: what was read
            # is not its owner and command but nothing, and it is gone, not a row of unknowns.
            return None
        return self._keep(pid, _Tracked(None, create_time, self._user_name(uid), uid, command))

    def _is_a_collision(self, pid: int, create_time: float) -> bool:
        """Outside the host's PID namespace: whether ``pid`` here is some other process
        than NVML's (it has no NVIDIA device open); remembered while it is the same one."""
        if not self._foreign:
            return False
        if self._collisions.get(pid) == create_time:
            return True
        if not uses_a_gpu_device(pid):
            self._collisions[pid] = create_time  # the host's PID, another process here
            return True
        self._collisions.pop(pid, None)
        return False

    def _keep(self, pid: int, tracked: _Tracked) -> _Tracked:
        tracked.ids = self._read_cgroup(pid)
        self._tracked[pid] = tracked
        return tracked

    def _user_name(self, uid: int | None, process: psutil.Process | None = None) -> str | None:
        if uid is not None:
            if uid not in self._user_names:
                try:
                    self._user_names[uid] = safe_text(pwd.getpwuid(uid).pw_name)
                except KeyError:  # not cached: a directory service that failed may answer
                    return str(uid)  # for the next new process
            return self._user_names[uid]
        if process is None:
            return None
        try:
            return safe_text(str(process.username()))
        except (*PSUTIL_ERRORS, KeyError):
            return None


def _defunct(command: str | None) -> str:
    """How ps shows a zombie: the name it had, marked defunct."""
    return f"{command or '?'} <defunct>"


def _read_command(process: psutil.Process) -> str | None:
    with contextlib.suppress(*PSUTIL_ERRORS):
        text = " ".join(process.cmdline())
        if text.strip():  # argv [""] is no command: the name, as for an empty one
            return safe_text(text)
    try:
        return safe_text(str(process.name()))
    except PSUTIL_ERRORS:
        return None
