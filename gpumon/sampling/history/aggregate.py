"""What the recorder keeps of each sample until it is written: no SQL, no I/O.

Each sample adds to pending rows per GPU and minute (:class:`GpuMinute`), per process
session (:class:`Session`) and per hour, GPU and holder (:class:`Usage`); the writer commits
and forgets them. A sample stands for the time since the previous one, a gap longer than
``max_gap_s`` is credited to nobody, and IDLE is the live view's rule. Details: docs/history.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpumon.data.free import processes_known
from gpumon.data.idle import IdleRule
from gpumon.data.model import GpuProcess, Sample
from gpumon.sampling.history.schema import HISTORY_FIELDS, HOUR_S, MINUTE_S

Number = TypeVar("Number", int, float)
#: A process session's identity: (GPU UUID, PID, start time).
Identity = tuple[str, int, float | None]
#: A usage row's key: (position in GROUPINGS, hour start, GPU UUID, key); the key is the
#: user, job or container (``''`` for none), ``''`` for the GPU itself.
UsageKey = tuple[int, int, str, str]

_ENERGY = HISTORY_FIELDS.index("energy_j")
#: (position in HISTORY_FIELDS, name) of the readings a sample's GPU gives as they are.
_READINGS = tuple(
    (position, name) for position, name in enumerate(HISTORY_FIELDS) if position != _ENERGY
)


def hour_parts(now_s: float, dt_s: float) -> list[tuple[int, float]]:
    """The interval (``now_s - dt_s``, ``now_s``] cut at the hours: (hour start, seconds in
    it), newest first. An interval across 11:00 (a long ``--interval``) books each part to
    its own hour, not all of it to the hour the sample falls in; a sample exactly at 11:00
    closes the hour before."""
    parts: list[tuple[int, float]] = []
    end, remaining = now_s, dt_s
    while remaining > 0:
        hour = math.floor(end / HOUR_S) * HOUR_S
        if hour == end:
            hour -= HOUR_S
        part = min(remaining, end - hour)
        parts.append((hour, part))
        end -= part
        remaining -= part
    return parts


@dataclass(slots=True)
class GpuMinute:
    """One GPU's readings in one minute, since the last write: per field of
    :data:`HISTORY_FIELDS`, the sum and count (for the mean) and the max; energy: the
    joules used."""

    samples: int = 0
    sums: list[float] = field(default_factory=lambda: [0.0] * len(HISTORY_FIELDS))
    counts: list[int] = field(default_factory=lambda: [0] * len(HISTORY_FIELDS))
    maxes: list[float | None] = field(default_factory=lambda: [None] * len(HISTORY_FIELDS))

    def add(self, position: int, value: float | None) -> None:
        if value is None:
            return
        self.sums[position] += value
        self.counts[position] += 1
        self.maxes[position] = _higher(self.maxes[position], value)

    def means(self) -> list[float | None]:
        """Per field, the mean (for energy: the joules used), ``None`` when never read."""
        return [
            None if count == 0 else total if position == _ENERGY else total / count
            for position, (total, count) in enumerate(zip(self.sums, self.counts, strict=True))
        ]


@dataclass(slots=True)
class Session:
    """One process on one GPU, as the recorder follows it: ``row_id`` is its ``sessions`` row
    (``None`` until written or found); ``pending_*`` amounts are added at the next write.
    """

    identity: Identity
    process: GpuProcess
    first_seen_s: float
    last_seen_s: float
    row_id: int | None = None
    quiet_since_s: float | None = None
    idle_since_s: float | None = None
    #: It holds memory (by the idle rule) with no SM utilisation reading: idle or not is
    #: unknown.
    idle_unknown: bool = False
    peak_memory_bytes: int | None = None
    pending_held_s: float = 0.0
    pending_memory_byte_s: float = 0.0
    pending_sm_s: float = 0.0
    pending_idle_held_s: float = 0.0
    changed: bool = True

    def see(self, process: GpuProcess, now_s: float, dt: float, rule: IdleRule) -> bool:
        """Take in this sample's reading of the process; returns whether it is IDLE."""
        self.process = process
        self.last_seen_s = now_s
        self.changed = True
        memory = process.gpu_memory_bytes
        utilization = process.sm_utilization_pct
        self.peak_memory_bytes = _higher(self.peak_memory_bytes, memory)
        if not rule.quiet(utilization):
            self.quiet_since_s = None  # busy, or N/A: unknown is never quiet
        elif self.quiet_since_s is None:
            self.quiet_since_s = now_s
        idle = (
            self.quiet_since_s is not None
            and now_s - self.quiet_since_s >= rule.after_s
            and rule.holds(process)
        )
        self.idle_since_s = self.quiet_since_s if idle else None
        self.idle_unknown = utilization is None and rule.holds(process)
        self.pending_held_s += dt
        if memory is not None:
            self.pending_memory_byte_s += memory * dt
        if utilization is not None:
            self.pending_sm_s += utilization / 100.0 * dt
        if idle:
            self.pending_idle_held_s += dt
        return idle

    def written(self) -> None:
        self.pending_held_s = self.pending_memory_byte_s = 0.0
        self.pending_sm_s = self.pending_idle_held_s = 0.0
        self.changed = False


@dataclass(slots=True)
class Usage:
    """A holder's seconds on one GPU in one hour, since the last write: ``used_s`` is
    counted over ``known_s``, the seconds whose SM utilisation was known."""

    held_s: float = 0.0
    used_s: float = 0.0
    known_s: float = 0.0
    idle_held_s: float = 0.0
    peak_memory_bytes: int | None = None


@dataclass(slots=True)
class _Holding:
    """A holder's processes on one GPU in one sample."""

    used: float = 0.0
    unknown: bool = False  # a process whose SM utilisation is N/A
    idle: bool = False
    in_use: bool = False  # a process that keeps it from being held idle
    peak_memory_bytes: int | None = None

    def add(self, process: GpuProcess, idle: bool, rule: IdleRule) -> None:
        utilization = process.sm_utilization_pct
        if utilization is not None:
            self.used += utilization / 100.0
        else:
            self.unknown = True
        if idle:
            self.idle = True
        elif process.gpu_memory_bytes is None or rule.holds(process):
            self.in_use = True  # holds memory (or may: N/A) without being IDLE
        elif utilization is not None and not rule.quiet(utilization):
            self.in_use = True  # small, but keeps the SMs busy
        self.peak_memory_bytes = _higher(self.peak_memory_bytes, process.gpu_memory_bytes)


class Pending:
    """The rows not yet written; :meth:`observe` takes in each sample. A gap longer than
    ``max_gap_s`` is credited to nobody, and ends a process's quiet spell.
    """

    def __init__(self, rule: IdleRule, max_gap_s: float) -> None:
        self.rule = rule
        self.max_gap_s = max_gap_s
        self.minutes: dict[tuple[int, str], GpuMinute] = {}
        self.sessions: dict[Identity, Session] = {}
        self.usage: dict[UsageKey, Usage] = {}
        #: NVML index and name of each GPU, as last seen.
        self.gpus: dict[str, tuple[int, str | None]] = {}
        #: The samples are simulated (``--demo``).
        self.simulated = False
        self.first_sample_s: float | None = None
        self.last_sample_s: float | None = None
        self._previous_s: float | None = None
        self._energy: dict[str, float] = {}  # each GPU's energy counter in the last sample

    def resume(self, last_sample_s: float | None) -> None:
        """Carry on from an earlier recorder's last sample (the database's), before the
        first sample: the time since it counts as any other interval, up to the gap."""
        if self._previous_s is None and self.last_sample_s is None:
            self._previous_s = last_sample_s

    def observe(self, sample: Sample) -> None:
        """Add ``sample`` to the pending rows."""
        now = sample.timestamp_s
        previous, self._previous_s = self._previous_s, now
        dt = now - previous if previous is not None else 0.0
        if not 0.0 < dt <= self.max_gap_s:
            dt = 0.0
            self._energy.clear()  # a rise across a gap is not this minute's
        if sample.unavailable is not None or not sample.gpus:
            self._previous_s = None
            return
        if self.first_sample_s is None:
            self.first_sample_s = now
        self.simulated = sample.simulated
        self.last_sample_s = now
        minute = int(now // MINUTE_S) * MINUTE_S
        for gpu in sample.gpus:
            if gpu.uuid is None or gpu.lost:
                if gpu.uuid is not None:
                    self._energy.pop(gpu.uuid, None)
                continue
            self.gpus[gpu.uuid] = (gpu.index, gpu.name)
            row = self.minutes.setdefault((minute, gpu.uuid), GpuMinute())
            row.samples += 1
            for position, name in _READINGS:
                row.add(position, getattr(gpu, name))
            energy, before = gpu.energy_j, self._energy.pop(gpu.uuid, None)
            if energy is not None:
                self._energy[gpu.uuid] = energy
                if before is not None and energy >= before:  # lower: the counter restarted
                    row.add(_ENERGY, energy - before)
        self._observe_processes(sample, now, dt)

    def _observe_processes(self, sample: Sample, now: float, dt: float) -> None:
        uuids = {gpu.index: gpu.uuid for gpu in sample.gpus if processes_known(gpu, sample)}
        holdings: dict[tuple[int, str, str], _Holding] = {}
        rule = self.rule
        seen: set[Identity] = set()
        for process in sample.processes:
            uuid = uuids.get(process.gpu_index)
            if uuid is None:
                continue  # a lost GPU, a refused list, a GPU whose UUID is not known yet
            identity = (uuid, process.pid, process.create_time_s)
            if identity in seen:
                continue  # listed twice (compute and graphics): the first entry counts
            seen.add(identity)
            session = self.sessions.get(identity)
            if session is None:
                session = Session(identity, process, first_seen_s=now, last_seen_s=now)
                self.sessions[identity] = session
            elif now - session.last_seen_s > self.max_gap_s:
                # Not seen for longer than a gap: a quiet spell does not carry over it (the
                # rule rows._find_session applies when the recorder restarted).
                session.quiet_since_s = None
            idle = session.see(process, now, dt, rule)
            # The holders, in the order of GROUPINGS: user, job, container, the GPU.
            keys = (process.user, process.job_id, process.container_id, "")
            for grouping, key in enumerate(keys):
                holding = holdings.setdefault((grouping, uuid, key or ""), _Holding())
                holding.add(process, idle, rule)
        hour = int(now // HOUR_S) * HOUR_S
        parts = hour_parts(now, dt)
        for (grouping, uuid, key), holding in holdings.items():
            for start_s, seconds in parts:
                usage = self.usage.setdefault((grouping, start_s, uuid, key), Usage())
                usage.held_s += seconds
                if not holding.unknown:
                    usage.known_s += seconds
                    usage.used_s += min(1.0, holding.used) * seconds
                if holding.idle and not holding.in_use:
                    usage.idle_held_s += seconds
            # The hour of the sample itself.
            usage = self.usage.setdefault((grouping, hour, uuid, key), Usage())
            usage.peak_memory_bytes = _higher(usage.peak_memory_bytes, holding.peak_memory_bytes)
        self._forget_gone(now)

    def _forget_gone(self, now: float) -> None:
        """Drop the sessions not seen for longer than a gap, once written: memory stays
        bounded however many processes come and go (one seen again later is found in the
        database)."""
        self.sessions = {
            identity: session
            for identity, session in self.sessions.items()
            if session.changed or not now - session.last_seen_s > self.max_gap_s
        }

    def written(self) -> None:
        """Everything pending has been committed: start afresh (sessions stay followed)."""
        self.minutes.clear()
        self.usage.clear()
        for session in self.sessions.values():
            session.written()

    def trim(self, max_rows: int) -> None:
        """While nothing can be written: keep at most ``max_rows`` GPU minutes, usage rows
        and ended sessions, the newest (the oldest are lost), so memory stays bounded."""
        _drop_oldest(self.minutes, max_rows, lambda key: key[0])
        _drop_oldest(self.usage, max_rows, lambda key: key[1])
        if len(self.sessions) > max_rows:
            by_age = sorted(self.sessions.values(), key=lambda session: session.last_seen_s)
            for session in by_age[: len(self.sessions) - max_rows]:
                del self.sessions[session.identity]


def _drop_oldest(rows: dict[Any, Any], keep: int, time: Callable[[Any], int]) -> None:
    """Keep the ``keep`` newest rows (``time`` reads a key's time)."""
    if len(rows) > keep:
        for key in sorted(rows, key=time)[: len(rows) - keep]:
            del rows[key]


def _higher(peak: Number | None, value: Number | None) -> Number | None:
    """The greater of a peak and a reading; N/A (``None``) counts as nothing."""
    if value is None:
        return peak
    return value if peak is None or value > peak else peak
